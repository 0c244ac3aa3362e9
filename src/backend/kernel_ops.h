/*
 * kernel_ops.h — vtable op entries shared by every backend that runs the
 * hand-written kernels in kernels/ (the CUDA module, and the test-only
 * cuda-emulated module). Each such module compiles src/backend/kernel_ops.c and
 * provides the two hooks below; adding an op means one entry in kernel_ops.c,
 * used by both.
 */
#ifndef GPUCORE_KERNEL_OPS_H
#define GPUCORE_KERNEL_OPS_H

#include "backend.h"
#include "kernels.h"

#define KOPS_HIDDEN __attribute__((visibility("hidden")))

/* Provided by the module: make `launch` for stream s of context bctx (select
 * the device, fill in stream and SM count). */
KOPS_HIDDEN gpucore_status kops_launch_for(void *bctx, void *s, gpucore_launch *launch);
/* Provided by the module: turn a launcher's non-zero return into a status. */
KOPS_HIDDEN gpucore_status kops_error(int err, const char *what);

/* Op entries (kernel_ops.c). */
KOPS_HIDDEN gpucore_status kops_copy_strided(void *bctx, const gpucore_view *dst, const gpucore_view *src, void *s);
KOPS_HIDDEN gpucore_status kops_fill(void *bctx, const gpucore_view *dst, uint64_t bits, void *s);
KOPS_HIDDEN gpucore_status kops_random(void *bctx, const gpucore_view *dst, int dist, double a, double b,
                                       uint64_t seed, uint64_t offset, void *s);
/* matmul through the tiled fallback kernel (the cuda-emulated backend's matmul;
 * the CUDA module's when cuBLASLt has no algorithm). */
KOPS_HIDDEN gpucore_status kops_matmul(void *bctx, const gpucore_gemm_desc *desc, void *s);
/* A convolution's unfused bias/ReLU (the CUDA module's conv, not a vtable op). */
KOPS_HIDDEN gpucore_status kops_conv_bias_act(void *bctx, const gpucore_conv_bias_args *args, void *s);
KOPS_HIDDEN gpucore_status kops_elementwise(void *bctx, const gpucore_ew_args *args, void *s);
KOPS_HIDDEN gpucore_status kops_reduce(void *bctx, const gpucore_reduce_args *args, void *s);
KOPS_HIDDEN gpucore_status kops_rows(void *bctx, const gpucore_rows_args *args, void *s);
/* training primitives (kernels/optim.cu) */
KOPS_HIDDEN gpucore_status kops_optim_step(void *bctx, const gpucore_optim_hparams *hp,
                                           const gpucore_optim_tensor *tensors, int64_t count, void *s);
KOPS_HIDDEN gpucore_status kops_amp_unscale(void *bctx, const gpucore_mt_tensor *grads, int64_t count,
                                            const float *scale, float *found_inf, void *s);
KOPS_HIDDEN gpucore_status kops_amp_update(void *bctx, float *scale, int32_t *growth_tracker, const float *found_inf,
                                           float growth, float backoff, int32_t interval, void *s);
KOPS_HIDDEN gpucore_status kops_clip_grad_norm(void *bctx, const gpucore_mt_tensor *grads, int64_t count,
                                               float *partials, float max_norm, float *total_norm, float *clip_coef,
                                               void *s);

/* scaled dot-product attention (kernels/attention.cu) */
KOPS_HIDDEN gpucore_status kops_attention(void *bctx, const gpucore_attn_args *args, void *s);
/* RoPE, gated linear units, fused residual + norm (kernels/transformer.cu) */
KOPS_HIDDEN gpucore_status kops_transformer(void *bctx, const gpucore_tfm_args *args, void *s);
/* Dequantizing only: src/ops/quant.c sends quantizing to the CPU backend alone. */
KOPS_HIDDEN gpucore_status kops_quant(void *bctx, const struct gpucore_quant_args *args, void *s);
/* A GEMM with a quantized weight (kernels/quant_matmul.cu). */
KOPS_HIDDEN gpucore_status kops_quant_matmul(void *bctx, const struct gpucore_qmm_args *args, void *s);

/* Every op entry above, as designated initializers: the cuda-emulated module
 * (tests/simt) installs exactly this list, so a new kops_* op must be added here
 * as well to run on the emulated backend. (The CUDA module lists its own, as it
 * puts cuBLASLt behind .matmul.) */
#define KOPS_VTABLE_OPS                          \
    .copy_strided = kops_copy_strided,           \
    .fill = kops_fill,                           \
    .random = kops_random,                       \
    .matmul = kops_matmul,                       \
    .elementwise = kops_elementwise,             \
    .reduce = kops_reduce,                       \
    .rows = kops_rows,                           \
    .optim_step = kops_optim_step,               \
    .amp_unscale = kops_amp_unscale,             \
    .amp_update = kops_amp_update,               \
    .clip_grad_norm = kops_clip_grad_norm,      \
    .attention = kops_attention,                \
    .transformer = kops_transformer,            \
    .quant = kops_quant,                        \
    .quant_matmul = kops_quant_matmul,

#endif
