/*
 * cpu_conv_dnnl.c — the CPU convolution forward through oneDNN (PyTorch's CPU
 * convolution engine) where the build has it: f32, any groups (depthwise
 * included), NCHW or NHWC by strides, bias and ReLU fused as a post-op. oneDNN
 * picks its own blocked layout (format "any"); the user's tensors are reordered
 * into it and the result back. Primitive creation goes through oneDNN's own
 * primitive cache, so a repeated shape costs a lookup, not a JIT compile.
 *
 * cpu_conv_dnnl_forward() returns 1 when it computed y, 0 when oneDNN declined
 * (dtype, an implementation missing, memory): the caller then runs the im2col +
 * GEMM path (cpu_conv.c), which stays the fallback and the only path for the
 * backwards. Forward direct convolution in oneDNN splits work over images,
 * output channels and rows, never over the reduced input channels, so each
 * output sums its taps in one order whatever the thread count.
 */
#include <pthread.h>
#include <stdlib.h>
#include "gpucore_config.h"
#include "cpu_internal.h"
#include "dtype_access.h"

#if GPUCORE_HAVE_DNNL
#include <dnnl.h>

static dnnl_engine_t dnnl_cpu_engine;
static pthread_once_t dnnl_engine_once = PTHREAD_ONCE_INIT;

static void dnnl_engine_init(void)
{
    if (dnnl_engine_create(&dnnl_cpu_engine, dnnl_cpu, 0) != dnnl_success) dnnl_cpu_engine = NULL;
}

/* The one oneDNN CPU engine of the process (also used by cpu_matmul_dnnl.c); NULL when oneDNN has none. */
void *cpu_dnnl_engine(void)
{
    pthread_once(&dnnl_engine_once, dnnl_engine_init);
    return dnnl_cpu_engine;
}

/* One operand: the user's memory and, when the primitive wants another layout, a
 * memory in that layout plus the reorder between the two. */
typedef struct dnnl_operand {
    dnnl_memory_t user, inner;
    dnnl_primitive_t reorder;
} dnnl_operand;

static void operand_free(dnnl_operand *o)
{
    if (o->reorder) dnnl_primitive_destroy(o->reorder);
    if (o->inner && o->inner != o->user) dnnl_memory_destroy(o->inner);
    if (o->user) dnnl_memory_destroy(o->user);
}

/* to_user: the reorder runs inner -> user (the output), else user -> inner. */
static int operand_make(dnnl_operand *o, const dnnl_memory_desc_t *user_md, const dnnl_memory_desc_t *want,
                        void *data, int to_user)
{
    if (dnnl_memory_create(&o->user, user_md, dnnl_cpu_engine, data) != dnnl_success) return 0;
    if (dnnl_memory_desc_equal(user_md, want)) {
        o->inner = o->user;
        return 1;
    }
    if (dnnl_memory_create(&o->inner, want, dnnl_cpu_engine, DNNL_MEMORY_ALLOCATE) != dnnl_success) return 0;
    dnnl_primitive_desc_t rpd = NULL;
    int ok = (to_user ? dnnl_reorder_primitive_desc_create(&rpd, want, dnnl_cpu_engine, user_md, dnnl_cpu_engine, NULL)
                      : dnnl_reorder_primitive_desc_create(&rpd, user_md, dnnl_cpu_engine, want, dnnl_cpu_engine, NULL))
             == dnnl_success &&
             dnnl_primitive_create(&o->reorder, rpd) == dnnl_success;
    if (rpd) dnnl_primitive_desc_destroy(rpd);
    return ok;
}

static int operand_reorder(const dnnl_operand *o, dnnl_stream_t stream, int to_user)
{
    if (!o->reorder) return 1;
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, to_user ? o->inner : o->user}, {DNNL_ARG_TO, to_user ? o->user : o->inner}};
    return dnnl_primitive_execute(o->reorder, stream, 2, args) == dnnl_success;
}

int cpu_conv_dnnl_forward(const gpucore_conv_desc *d)
{
    if (d->op != GPUCORE_CONV_OP_FORWARD || d->dtype != GPUCORE_KDT_F32 || d->n == 0 || d->k == 0 || d->p == 0 ||
        d->q == 0)
        return 0;
    pthread_once(&dnnl_engine_once, dnnl_engine_init);
    if (!dnnl_cpu_engine) return 0;
    const int64_t G = d->groups, Kg = d->k / G;
    const int64_t *ws = d->w_strides;
    dnnl_dims_t xdims = {d->n, d->c, d->h, d->w}, ydims = {d->n, d->k, d->p, d->q}, bdims = {d->k}, bstr = {1};
    dnnl_dims_t xstr = {d->x_strides[0], d->x_strides[1], d->x_strides[2], d->x_strides[3]};
    dnnl_dims_t ystr = {d->y_strides[0], d->y_strides[1], d->y_strides[2], d->y_strides[3]};
    dnnl_dims_t wdims = {d->k, d->c / G, d->r, d->s}, wstr = {ws[0], ws[1], ws[2], ws[3]};
    int wnd = 4;
    if (G > 1) { /* grouped weights are [G, K/G, C/G, R, S] */
        dnnl_dims_t gd = {G, Kg, d->c / G, d->r, d->s}, gs = {Kg * ws[0], ws[0], ws[1], ws[2], ws[3]};
        for (int i = 0; i < 5; i++) { wdims[i] = gd[i]; wstr[i] = gs[i]; }
        wnd = 5;
    }
    dnnl_dims_t strides = {d->stride_h, d->stride_w}, dil = {d->dil_h - 1, d->dil_w - 1}, pad_l = {d->pad_h, d->pad_w};
    dnnl_dims_t pad_r = {(d->p - 1) * d->stride_h + (d->r - 1) * d->dil_h + 1 - d->h - d->pad_h,
                         (d->q - 1) * d->stride_w + (d->s - 1) * d->dil_w + 1 - d->w - d->pad_w};
    dnnl_memory_desc_t xu, wu, yu, bu, xa, wa, ya;
    if (dnnl_memory_desc_init_by_strides(&xu, 4, xdims, dnnl_f32, xstr) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&wu, wnd, wdims, dnnl_f32, wstr) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&yu, 4, ydims, dnnl_f32, ystr) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&bu, 1, bdims, dnnl_f32, bstr) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&xa, 4, xdims, dnnl_f32, dnnl_format_tag_any) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&wa, wnd, wdims, dnnl_f32, dnnl_format_tag_any) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&ya, 4, ydims, dnnl_f32, dnnl_format_tag_any) != dnnl_success)
        return 0;
    dnnl_convolution_desc_t cd;
    if (dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct, &xa, &wa,
                                                   d->bias ? &bu : NULL, &ya, strides, dil, pad_l, pad_r) != dnnl_success)
        return 0;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    if (dnnl_primitive_attr_create(&attr) != dnnl_success) return 0;
    if (d->relu) {
        if (dnnl_post_ops_create(&po) != dnnl_success || dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f) != dnnl_success ||
            dnnl_primitive_attr_set_post_ops(attr, po) != dnnl_success) {
            if (po) dnnl_post_ops_destroy(po);
            dnnl_primitive_attr_destroy(attr);
            return 0;
        }
    }
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t conv = NULL;
    dnnl_stream_t stream = NULL;
    dnnl_operand x = {0}, w = {0}, y = {0};
    dnnl_memory_t b = NULL;
    int ok = dnnl_primitive_desc_create(&pd, &cd, attr, dnnl_cpu_engine, NULL) == dnnl_success &&
             dnnl_primitive_create(&conv, pd) == dnnl_success &&
             dnnl_stream_create(&stream, dnnl_cpu_engine, dnnl_stream_default_flags) == dnnl_success &&
             operand_make(&x, &xu, dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0), d->x, 0) &&
             operand_make(&w, &wu, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0), d->wt, 0) &&
             operand_make(&y, &yu, dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0), d->y, 1) &&
             (!d->bias || dnnl_memory_create(&b, &bu, dnnl_cpu_engine, (void *)d->bias) == dnnl_success);
    if (ok) {
        dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, x.inner}, {DNNL_ARG_WEIGHTS, w.inner}, {DNNL_ARG_DST, y.inner},
                                   {DNNL_ARG_BIAS, b}};
        ok = operand_reorder(&x, stream, 0) && operand_reorder(&w, stream, 0) &&
             dnnl_primitive_execute(conv, stream, d->bias ? 4 : 3, args) == dnnl_success &&
             operand_reorder(&y, stream, 1) && dnnl_stream_wait(stream) == dnnl_success;
    }
    if (b) dnnl_memory_destroy(b);
    operand_free(&y);
    operand_free(&w);
    operand_free(&x);
    if (stream) dnnl_stream_destroy(stream);
    if (conv) dnnl_primitive_destroy(conv);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
    return ok;
}

#else

int cpu_conv_dnnl_forward(const gpucore_conv_desc *d)
{
    (void)d;
    return 0;
}

void *cpu_dnnl_engine(void)
{
    return NULL;
}

#endif
