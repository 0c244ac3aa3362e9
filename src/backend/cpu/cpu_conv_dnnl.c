/*
 * cpu_conv_dnnl.c — the CPU convolution through oneDNN (PyTorch's CPU convolution
 * engine) where the build has it: forward, backward data and backward filter, f32
 * and bf16 (bf16 only where oneDNN has JIT kernels for it: AVX512-BF16 or AMX), any
 * groups (depthwise included), NCHW or NHWC by strides, the forward's bias and ReLU
 * fused as a post-op. oneDNN picks its own blocked layout; the user's tensors are
 * reordered into it and the results back. The convolution, its reorders and its
 * layouts are prepared once per shape and op and kept in the context's plan cache
 * (cpu_plan_cache.c); the blocked copies and the scratchpad live in the running
 * thread's scratch buffer, so a repeated shape allocates nothing.
 *
 * cpu_conv_dnnl() returns 1 when it computed the op's output, 0 when oneDNN declined
 * (dtype, only a reference loop, memory, GPUCORE_CPU_GEMM=blas or
 * GPUCORE_CPU_PORTABLE): the caller then runs the im2col + GEMM path (cpu_conv.c).
 * oneDNN splits the forward and the data gradient over images, channels and rows,
 * never over a reduction, and the filter gradient's reduction over images and pixels
 * over a fixed static partition of its OpenMP threads, so a rerun on the same thread
 * count gives the same bits.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
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

/* A prepared op: the convolution in oneDNN's chosen layouts, the user's layouts of x, w and y,
 * and the reorders between them (NULL where the layouts agree): into the chosen layout for the
 * op's inputs, back to the user's for its output. The inner tensors and the scratchpad live at
 * fixed offsets of the running thread's scratch buffer (cpu_plan_scratch). */
enum { T_X, T_W, T_Y, T_N };
typedef struct conv_plan {
    dnnl_primitive_t conv, re[T_N];
    dnnl_memory_desc_t user[T_N], want[T_N], bu, sp;
    size_t off[T_N], off_s, total;
    int out; /* which of T_X, T_W, T_Y the op writes */
} conv_plan;

/* The key: the op, dtype, geometry, strides and epilogue (zeroed first, so padding compares equal). */
typedef struct conv_key {
    int64_t dims[16], xs[4], ws[4], ys[4];
    int32_t has_bias, relu, tag, op, dtype, pad;
} conv_key;

static void conv_plan_destroy(void *p)
{
    conv_plan *pl = p;
    if (pl->conv) dnnl_primitive_destroy(pl->conv);
    for (int i = 0; i < T_N; i++)
        if (pl->re[i]) dnnl_primitive_destroy(pl->re[i]);
    free(pl);
}

/* The reorder user -> want (to_user: want -> user) into *r, NULL when the layouts agree; its inner
 * buffer takes *off bytes at the plan's running total. */
static int reorder_make(conv_plan *pl, const dnnl_memory_desc_t *user, const dnnl_memory_desc_t *want, int to_user,
                        dnnl_primitive_t *r, size_t *off)
{
    *r = NULL;
    if (dnnl_memory_desc_equal(user, want)) return 1;
    *off = pl->total;
    pl->total += (dnnl_memory_desc_get_size(want) + 63) & ~(size_t)63;
    dnnl_primitive_desc_t rpd = NULL;
    int ok = (to_user ? dnnl_reorder_primitive_desc_create(&rpd, want, dnnl_cpu_engine, user, dnnl_cpu_engine, NULL)
                      : dnnl_reorder_primitive_desc_create(&rpd, user, dnnl_cpu_engine, want, dnnl_cpu_engine, NULL))
                 == dnnl_success &&
             dnnl_primitive_create(r, rpd) == dnnl_success;
    if (rpd) dnnl_primitive_desc_destroy(rpd);
    return ok;
}

/* The implementation of pd is a JIT kernel: not oneDNN's reference loop (slower than im2col + GEMM),
 * and, where blocked says so, not its GEMM-based convolution either. */
static int impl_fast(const_dnnl_primitive_desc_t pd, int blocked)
{
    const char *impl = NULL;
    return dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl &&
           !strstr(impl, "ref") && !(blocked && strstr(impl, "gemm"));
}

/* The geometry of d as oneDNN descriptors. */
typedef struct conv_geo {
    dnnl_dims_t xdims, ydims, wdims, strides, dil, pad_l, pad_r;
    int wnd;
} conv_geo;

static void *conv_build(const void *kp, void *arg)
{
    const gpucore_conv_desc *d = arg;
    const conv_key *key = kp;
    const dnnl_data_type_t dt = key->dtype == GPUCORE_KDT_BF16 ? dnnl_bf16 : dnnl_f32;
    const int64_t G = d->groups, Kg = d->k / G;
    const int64_t *ws = d->w_strides;
    conv_geo g = {{d->n, d->c, d->h, d->w}, {d->n, d->k, d->p, d->q}, {d->k, d->c / G, d->r, d->s},
                  {d->stride_h, d->stride_w}, {d->dil_h - 1, d->dil_w - 1}, {d->pad_h, d->pad_w},
                  {(d->p - 1) * d->stride_h + (d->r - 1) * d->dil_h + 1 - d->h - d->pad_h,
                   (d->q - 1) * d->stride_w + (d->s - 1) * d->dil_w + 1 - d->w - d->pad_w}, 4};
    dnnl_dims_t bdims = {d->k}, bstr = {1};
    dnnl_dims_t xstr = {d->x_strides[0], d->x_strides[1], d->x_strides[2], d->x_strides[3]};
    dnnl_dims_t ystr = {d->y_strides[0], d->y_strides[1], d->y_strides[2], d->y_strides[3]};
    dnnl_dims_t wstr = {ws[0], ws[1], ws[2], ws[3]};
    if (G > 1) { /* grouped weights are [G, K/G, C/G, R, S] */
        dnnl_dims_t gd = {G, Kg, d->c / G, d->r, d->s}, gs = {Kg * ws[0], ws[0], ws[1], ws[2], ws[3]};
        for (int i = 0; i < 5; i++) { g.wdims[i] = gd[i]; wstr[i] = gs[i]; }
        g.wnd = 5;
    }
    conv_plan *pl = calloc(1, sizeof *pl);
    if (!pl) return NULL;
    pl->out = key->op == GPUCORE_CONV_OP_FORWARD ? T_Y : key->op == GPUCORE_CONV_OP_BACKWARD_DATA ? T_X : T_W;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL, hint = NULL;
    int ok = dnnl_memory_desc_init_by_strides(&pl->user[T_X], 4, g.xdims, dt, xstr) == dnnl_success &&
             dnnl_memory_desc_init_by_strides(&pl->user[T_W], g.wnd, g.wdims, dt, wstr) == dnnl_success &&
             dnnl_memory_desc_init_by_strides(&pl->user[T_Y], 4, g.ydims, dt, ystr) == dnnl_success &&
             dnnl_memory_desc_init_by_strides(&pl->bu, 1, bdims, dt, bstr) == dnnl_success &&
             dnnl_primitive_attr_create(&attr) == dnnl_success &&
             dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success &&
             dnnl_post_ops_create(&po) == dnnl_success &&
             (!d->relu || dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f) == dnnl_success) &&
             dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    /* The forward output's layout: channel-blocked (16 channels a block where the CPU has AVX-512, 8
     * with AVX2), PyTorch's choice, before oneDNN's own ("any": channels-last, brgconv). Measured on a
     * loaded 2-core AVX-512 machine: depthwise 3x3 0.09 ms blocked against 0.74 channels-last, 1x1
     * 0.36 against 0.83, and the blocked result goes back to NCHW 3.7x faster (0.09 against 0.33 ms
     * for 64x112x112). The input's layout is the kernel's choice (plain NCHW for the 3-channel stem),
     * else blocked like the output (the depthwise kernel wants that said). Where x and y are
     * channels-last (layout "nhwc") every op first tries that layout itself, which needs no
     * reorder: a reorder of a batch-32 activation costs more than a depthwise convolution (bf16
     * MobileNet 3x3 at 144 channels, batch 32: 12.5 -> 3.6 ms forward, 13.5 -> 4.2 data gradient,
     * 17.7 -> 8.4 filter gradient; batch 8 1x1 256->64 f32 8.4 -> 4.5 ms; 3x3 at 256 channels
     * the same). A candidate with a named layout counts only when a JIT kernel takes it (no
     * reference or GEMM loop). The backwards then take oneDNN's choice of layouts, with a
     * forward-training descriptor of the same ones as the hint oneDNN asks for. */
    const dnnl_format_tag_t any = dnnl_format_tag_any, b16 = dnnl_aBcd16b, b8 = dnnl_aBcd8b, cl = dnnl_acdb;
    const dnnl_format_tag_t xtags[6] = {cl, any, b16, any, b8, any}, ytags[6] = {cl, b16, b16, b8, b8, any};
    const int fwd = key->op == GPUCORE_CONV_OP_FORWARD;
    int first = fwd ? 1 : 5;
    if (ok) { /* the user's tensors are channels-last (layout "nhwc"): that layout first, for every op */
        dnnl_memory_desc_t xl, yl;
        if (dnnl_memory_desc_init_by_tag(&xl, 4, g.xdims, dt, cl) == dnnl_success &&
            dnnl_memory_desc_init_by_tag(&yl, 4, g.ydims, dt, cl) == dnnl_success &&
            dnnl_memory_desc_equal(&xl, &pl->user[T_X]) && dnnl_memory_desc_equal(&yl, &pl->user[T_Y]))
            first = 0;
    }
    for (int t = first; ok && t < 6 && !pd; t++) {
        dnnl_memory_desc_t xa, wa, ya;
        dnnl_convolution_desc_t cd, bd;
        if (dnnl_memory_desc_init_by_tag(&xa, 4, g.xdims, dt, xtags[t]) != dnnl_success ||
            dnnl_memory_desc_init_by_tag(&wa, g.wnd, g.wdims, dt, dnnl_format_tag_any) != dnnl_success ||
            dnnl_memory_desc_init_by_tag(&ya, 4, g.ydims, dt, ytags[t]) != dnnl_success ||
            dnnl_dilated_convolution_forward_desc_init(&cd, fwd ? dnnl_forward_inference : dnnl_forward_training,
                                                       dnnl_convolution_direct, &xa, &wa, d->bias ? &pl->bu : NULL,
                                                       &ya, g.strides, g.dil, g.pad_l, g.pad_r) != dnnl_success)
            continue;
        if (fwd) {
            if (dnnl_primitive_desc_create(&pd, &cd, attr, dnnl_cpu_engine, NULL) != dnnl_success) continue;
        } else {
            const int data = key->op == GPUCORE_CONV_OP_BACKWARD_DATA;
            if (hint) { /* an earlier candidate's */
                dnnl_primitive_desc_destroy(hint);
                hint = NULL;
            }
            if (dnnl_primitive_desc_create(&hint, &cd, NULL, dnnl_cpu_engine, NULL) != dnnl_success ||
                (data ? dnnl_dilated_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &xa, &wa, &ya,
                                                                         g.strides, g.dil, g.pad_l, g.pad_r)
                      : dnnl_dilated_convolution_backward_weights_desc_init(&bd, dnnl_convolution_direct, &xa, &wa,
                                                                            NULL, &ya, g.strides, g.dil, g.pad_l,
                                                                            g.pad_r)) != dnnl_success ||
                dnnl_primitive_desc_create(&pd, &bd, attr, dnnl_cpu_engine, hint) != dnnl_success)
                continue;
        }
        if (!impl_fast(pd, ytags[t] != any)) {
            dnnl_primitive_desc_destroy(pd);
            pd = NULL;
        }
    }
    ok = ok && pd && dnnl_primitive_create(&pl->conv, pd) == dnnl_success;
    if (ok) {
        const int data = key->op == GPUCORE_CONV_OP_BACKWARD_DATA, filt = key->op == GPUCORE_CONV_OP_BACKWARD_FILTER;
        pl->want[T_X] = *dnnl_primitive_desc_query_md(pd, data ? dnnl_query_diff_src_md : dnnl_query_src_md, 0);
        pl->want[T_W] = *dnnl_primitive_desc_query_md(pd, filt ? dnnl_query_diff_weights_md : dnnl_query_weights_md, 0);
        pl->want[T_Y] = *dnnl_primitive_desc_query_md(pd, fwd ? dnnl_query_dst_md : dnnl_query_diff_dst_md, 0);
        pl->sp = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        pl->off_s = 0;
        pl->total = (dnnl_memory_desc_get_size(&pl->sp) + 63) & ~(size_t)63;
        for (int i = 0; ok && i < T_N; i++)
            ok = reorder_make(pl, &pl->user[i], &pl->want[i], i == pl->out, &pl->re[i], &pl->off[i]);
    }
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (hint) dnnl_primitive_desc_destroy(hint);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (!ok) {
        conv_plan_destroy(pl);
        return NULL;
    }
    return pl;
}

/* Runs the reorder from -> to (both memories exist) when r is set. */
static int run_reorder(dnnl_primitive_t r, dnnl_stream_t stream, dnnl_memory_t from, dnnl_memory_t to)
{
    if (!r) return 1;
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    return dnnl_primitive_execute(r, stream, 2, args) == dnnl_success;
}

int cpu_conv_dnnl(cpu_context *ctx, const gpucore_conv_desc *d)
{
    if ((d->dtype != GPUCORE_KDT_F32 && d->dtype != GPUCORE_KDT_BF16) || d->n == 0 || d->k == 0 || d->p == 0 ||
        d->q == 0 || d->c == 0 || !ctx || !cpu_gemm_engine_dnnl(d->k, d->p * d->q, d->c * d->r * d->s, d->n))
        return 0;
    pthread_once(&dnnl_engine_once, dnnl_engine_init);
    if (!dnnl_cpu_engine) return 0;
    conv_key key;
    memset(&key, 0, sizeof key);
    const int64_t dims[16] = {d->n, d->c, d->h, d->w, d->k, d->r, d->s, d->p, d->q, d->groups, d->pad_h, d->pad_w,
                              d->stride_h, d->stride_w, d->dil_h, d->dil_w};
    memcpy(key.dims, dims, sizeof dims);
    memcpy(key.xs, d->x_strides, sizeof key.xs);
    memcpy(key.ws, d->w_strides, sizeof key.ws);
    memcpy(key.ys, d->y_strides, sizeof key.ys);
    const int fwd = d->op == GPUCORE_CONV_OP_FORWARD;
    key.has_bias = fwd && d->bias != NULL;
    key.relu = fwd && d->relu;
    key.tag = 'C';
    key.op = d->op;
    key.dtype = d->dtype;
    void *handle = NULL;
    conv_plan *pl = cpu_plan_cache_get(ctx->plans, &key, sizeof key, conv_build, (void *)d, conv_plan_destroy, &handle);
    if (!pl) {
        cpu_plan_cache_release(ctx->plans, handle);
        return 0;
    }
    char *sp = cpu_plan_scratch(pl->total ? pl->total : 1);
    dnnl_stream_t stream = NULL;
    dnnl_memory_t mu[T_N] = {0}, ma[T_N] = {0}, mb = NULL, ms = NULL;
    void *ptr[T_N] = {d->x, d->wt, d->y};
    int ok = sp && dnnl_stream_create(&stream, dnnl_cpu_engine, dnnl_stream_default_flags) == dnnl_success &&
             (!key.has_bias || dnnl_memory_create(&mb, &pl->bu, dnnl_cpu_engine, (void *)d->bias) == dnnl_success) &&
             dnnl_memory_create(&ms, &pl->sp, dnnl_cpu_engine, sp + pl->off_s) == dnnl_success;
    for (int i = 0; ok && i < T_N; i++)
        ok = dnnl_memory_create(&mu[i], &pl->user[i], dnnl_cpu_engine, ptr[i]) == dnnl_success &&
             (!pl->re[i] || dnnl_memory_create(&ma[i], &pl->want[i], dnnl_cpu_engine, sp + pl->off[i]) == dnnl_success);
    if (ok) {
        dnnl_memory_t m[T_N];
        for (int i = 0; i < T_N; i++) m[i] = pl->re[i] ? ma[i] : mu[i];
        const int data = d->op == GPUCORE_CONV_OP_BACKWARD_DATA;
        dnnl_exec_arg_t args[5] = {{fwd || !data ? DNNL_ARG_SRC : DNNL_ARG_DIFF_SRC, m[T_X]},
                                   {fwd || data ? DNNL_ARG_WEIGHTS : DNNL_ARG_DIFF_WEIGHTS, m[T_W]},
                                   {fwd ? DNNL_ARG_DST : DNNL_ARG_DIFF_DST, m[T_Y]},
                                   {DNNL_ARG_SCRATCHPAD, ms}, {DNNL_ARG_BIAS, mb}};
        for (int i = 0; ok && i < T_N; i++)
            if (i != pl->out) ok = run_reorder(pl->re[i], stream, mu[i], ma[i]);
        ok = ok && dnnl_primitive_execute(pl->conv, stream, key.has_bias ? 5 : 4, args) == dnnl_success &&
             run_reorder(pl->re[pl->out], stream, ma[pl->out], mu[pl->out]) && dnnl_stream_wait(stream) == dnnl_success;
    }
    for (int i = 0; i < T_N; i++) {
        if (mu[i]) dnnl_memory_destroy(mu[i]);
        if (ma[i]) dnnl_memory_destroy(ma[i]);
    }
    if (mb) dnnl_memory_destroy(mb);
    if (ms) dnnl_memory_destroy(ms);
    if (stream) dnnl_stream_destroy(stream);
    cpu_plan_cache_release(ctx->plans, handle);
    return ok;
}

#else

int cpu_conv_dnnl(cpu_context *ctx, const gpucore_conv_desc *d)
{
    (void)ctx; (void)d;
    return 0;
}

void *cpu_dnnl_engine(void)
{
    return NULL;
}

#endif
