/*
 * kernel_ops.c — vtable op entries for backends that run kernels/ launchers
 * (CUDA and cuda-emulated): get a launch descriptor from the module, call the
 * launcher, turn a launch error into a status. See kernel_ops.h.
 */
#include "kernel_ops.h"

#define LAUNCH_OR_RETURN(bctx, s, l)                          \
    gpucore_launch l;                                          \
    do {                                                       \
        gpucore_status launch_st_ = kops_launch_for(bctx, s, &l); \
        if (launch_st_) return launch_st_;                     \
    } while (0)

static gpucore_status launched(int err, const char *what) { return err ? kops_error(err, what) : GPUCORE_OK; }

/* Launch-argument preparation for ops on strided views: each launch gets copies of its views
 * with their dims merged (view.h: gpucore_views_coalesce), so the kernels unravel fewer dims
 * and a permuted-but-dense view takes the contiguous path. */
gpucore_status kops_copy_strided(void *bctx, const gpucore_view *dst, const gpucore_view *src, void *s)
{
    LAUNCH_OR_RETURN(bctx, s, l);
    gpucore_view d = *dst, v = *src;
    gpucore_view *views[2] = {&d, &v};
    gpucore_views_coalesce(views, 2);
    return launched(gpucore_kernel_copy_strided(&l, &d, &v), "copy_strided kernel launch");
}


gpucore_status kops_fill(void *bctx, const gpucore_view *dst, uint64_t bits, void *s)
{
    LAUNCH_OR_RETURN(bctx, s, l);
    gpucore_view d = *dst, *views[1] = {&d};
    gpucore_views_coalesce(views, 1);
    return launched(gpucore_kernel_fill(&l, &d, bits), "fill kernel launch");
}

gpucore_status kops_random(void *bctx, const gpucore_view *dst, int dist, double a, double b, uint64_t seed,
                           uint64_t offset, void *s)
{
    LAUNCH_OR_RETURN(bctx, s, l);
    gpucore_random_params rp = gpucore_random_params_make(dist, dst->dtype, a, b, seed, offset);
    gpucore_view d = *dst, *views[1] = {&d};
    gpucore_views_coalesce(views, 1);
    return launched(gpucore_kernel_random(&l, &d, &rp), "random kernel launch");
}

gpucore_status kops_elementwise(void *bctx, const gpucore_ew_args *args, void *s)
{
    LAUNCH_OR_RETURN(bctx, s, l);
    gpucore_ew_args a = *args;
    gpucore_view *views[3] = {&a.out, &a.in[0], &a.in[1]};
    gpucore_views_coalesce(views, a.nin >= 2 ? 3 : 2);
    return launched(gpucore_kernel_elementwise(&l, &a), "elementwise kernel launch");
}

gpucore_status kops_reduce(void *bctx, const gpucore_reduce_args *args, void *s)
{
    LAUNCH_OR_RETURN(bctx, s, l);
    return launched(gpucore_kernel_reduce(&l, args), "reduce kernel launch");
}

gpucore_status kops_quant(void *bctx, const struct gpucore_quant_args *args, void *s)
{
    if (!args->dequantize) return kops_error(1 /* cudaErrorInvalidValue */, "quantize (runs on the CPU backend)");
    LAUNCH_OR_RETURN(bctx, s, l);
    return launched(gpucore_kernel_quant_dequantize(&l, args), "dequantize kernel launch");
}

gpucore_status kops_quant_matmul(void *bctx, const struct gpucore_qmm_args *args, void *s)
{
    LAUNCH_OR_RETURN(bctx, s, l);
    return launched(gpucore_kernel_quant_matmul(&l, args), "quantized matmul kernel launch");
}

gpucore_status kops_rows(void *bctx, const gpucore_rows_args *args, void *s)
{
    LAUNCH_OR_RETURN(bctx, s, l);
    return launched(gpucore_kernel_rows(&l, args), "row-op (softmax/norm/cross-entropy/embedding) kernel launch");
}

gpucore_status kops_conv_bias_act(void *bctx, const gpucore_conv_bias_args *args, void *s)
{
    LAUNCH_OR_RETURN(bctx, s, l);
    return launched(gpucore_kernel_conv_bias_act(&l, args), "conv bias/ReLU kernel launch");
}

gpucore_status kops_matmul(void *bctx, const gpucore_gemm_desc *desc, void *s)
{
    /* never fp8: src/ops/matmul.c sends fp8 only to the CUDA module, which uses cuBLASLt for it */
    if (desc->a.dtype >= GPUCORE_KDT_FP8_E4M3 || desc->b.dtype >= GPUCORE_KDT_FP8_E4M3)
        return kops_error(1 /* cudaErrorInvalidValue */, "matmul fallback GEMM kernel (fp8 operands)");
    LAUNCH_OR_RETURN(bctx, s, l);
    return launched(gpucore_kernel_gemm_fallback(&l, desc), "matmul fallback GEMM kernel launch");
}

/* ---- training primitives (kernels/optim.cu) ---- */

gpucore_status kops_optim_step(void *bctx, const gpucore_optim_hparams *hp, const gpucore_optim_tensor *tensors,
                               int64_t count, void *s)
{
    LAUNCH_OR_RETURN(bctx, s, l);
    return launched(gpucore_kernel_optim_step(&l, hp, tensors, count), "optimizer step kernel launch");
}

gpucore_status kops_amp_unscale(void *bctx, const gpucore_mt_tensor *grads, int64_t count, const float *scale,
                                float *found_inf, void *s)
{
    LAUNCH_OR_RETURN(bctx, s, l);
    return launched(gpucore_kernel_amp_unscale(&l, grads, count, scale, found_inf), "loss-scale unscale kernel launch");
}

gpucore_status kops_amp_update(void *bctx, float *scale, int32_t *growth_tracker, const float *found_inf, float growth,
                               float backoff, int32_t interval, void *s)
{
    LAUNCH_OR_RETURN(bctx, s, l);
    return launched(gpucore_kernel_amp_update(&l, scale, growth_tracker, found_inf, growth, backoff, interval),
                    "loss-scale update kernel launch");
}

gpucore_status kops_clip_grad_norm(void *bctx, const gpucore_mt_tensor *grads, int64_t count, float *partials,
                                   float max_norm, float *total_norm, float *clip_coef, void *s)
{
    LAUNCH_OR_RETURN(bctx, s, l);
    return launched(gpucore_kernel_clip_grad_norm(&l, grads, count, partials, max_norm, total_norm, clip_coef),
                    "gradient clipping kernel launch");
}

/* ---- attention (kernels/attention.cu) ---- */

gpucore_status kops_attention(void *bctx, const gpucore_attn_args *args, void *s)
{
    LAUNCH_OR_RETURN(bctx, s, l);
    return launched(gpucore_kernel_attention(&l, args), "attention kernel launch");
}

gpucore_status kops_transformer(void *bctx, const gpucore_tfm_args *args, void *s)
{
    LAUNCH_OR_RETURN(bctx, s, l);
    return launched(gpucore_kernel_transformer(&l, args), "RoPE / GLU / residual-norm kernel launch");
}
