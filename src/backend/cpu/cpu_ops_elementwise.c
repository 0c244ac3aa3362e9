/*
 * cpu_ops_elementwise.c — the CPU backend's elementwise family. Work is cut
 * into blocks of EW_BLOCK elements spread over OpenMP threads; each block
 * loads its inputs into f32 buffers (dense, row-broadcast, scalar or general
 * strided addressing, the same layouts the CUDA kernel uses), computes with the
 * op's loop hoisted out of the switch so the compiler can vectorise it, and
 * stores with round-to-nearest-even. Casts run through f64. Every loop calls
 * the op's per-element function from elementwise_math.h (the op tables in
 * op_tables.h generate the cases), so the CPU computes the kernels' formula.
 *
 * Fast paths (the same per-element formulas): dense f32 operands are computed
 * straight from and into the tensors (no staging copies), add/sub/mul/div in
 * AVX2 (cpu_vec_f32_binary; the library is built for baseline x86-64, where the
 * compiler's loops take 4 lanes); the arithmetic,
 * conversion and clamp loops carry `omp simd` so they vectorise at -O2; the
 * libm-calling unary ops and the smooth activations (forward and backward) run
 * 8 lanes at a time where the CPU has AVX2, the exp- and erf-based ones 16 with AVX-512 (cpu_vec.h: activation_math.h's
 * formulas instantiated on vectors with SLEEF's 1-ulp exp/tanh/log and a table erf, so
 * their last bit may differ from libm's; the scalar formula otherwise); bf16 is
 * widened and rounded in registers (dense bf16 add/sub/mul/div in one pass
 * between the tensors, no staging); dropout draws one Philox block per 4
 * elements instead of one per element; casts between f32/f16/bf16 run straight
 * between the tensors and skip the f64 detour (exact: an f32 value is an f64
 * that rounds to itself). An op whose operands exceed the last-level cache
 * writes its output with streaming stores (cpu_vec_stream_copy), in short runs
 * staged in L1.
 */
#include <string.h>
#include "cpu_internal.h"
#include "elementwise_math.h"
#include "cpu_vec.h"

#define EW_BLOCK 2048
#define EW_PARALLEL_MIN 32768
#define EW_STREAM_RUN 512 /* elements per streamed run (2 KiB of f32) */

/* Vectorise this loop: iterations are independent (out is either exactly an input or
 * disjoint from it; the API layer checks). Plain loops without OpenMP. */
#if defined(_OPENMP)
#define EW_SIMD _Pragma("omp simd")
#else
#define EW_SIMD
#endif

/* Element offsets (in elements) of linear indices i0 .. i0+n-1 of view v. */
static void strided_offsets(const gpucore_view *v, int64_t i0, int n, int64_t *off)
{
    int64_t idx[GPUCORE_VIEW_MAX_DIMS], cur = 0, rest = i0;
    for (int d = v->ndim - 1; d >= 0; d--) {
        idx[d] = rest % v->shape[d];
        rest /= v->shape[d];
        cur += idx[d] * v->strides[d];
    }
    for (int k = 0; k < n; k++) {
        off[k] = cur;
        for (int d = v->ndim - 1; d >= 0; d--) { /* odometer step */
            cur += v->strides[d];
            if (++idx[d] < v->shape[d]) break;
            cur -= idx[d] * v->strides[d];
            idx[d] = 0;
        }
    }
}

static void load_f32(const gpucore_view *v, gpucore_ew_layout mode, int64_t inner, int64_t i0, int n, float *buf, int64_t *off)
{
    const char *base = v->data;
    const int dt = v->dtype, es = v->elem_size;
    if (mode == GPUCORE_EW_LAYOUT_DENSE && (dt == GPUCORE_KDT_F32 || dt == GPUCORE_KDT_BF16 || dt == GPUCORE_KDT_F16)) {
        cpu_vec_load(buf, base + i0 * es, dt, n); /* widened in registers */
        return;
    }
    if (mode == GPUCORE_EW_LAYOUT_SCALAR) {
        float x = gpucore_load_as_f32(base, dt);
        for (int k = 0; k < n; k++) buf[k] = x;
        return;
    }
    if (mode == GPUCORE_EW_LAYOUT_ROW) { /* one modulo per block, then walk the row with wrap-around */
        int64_t j = i0 % inner;
        for (int k = 0; k < n; k++) {
            buf[k] = dt == GPUCORE_KDT_F32 ? ((const float *)base)[j] : gpucore_load_as_f32(base + j * es, dt);
            if (++j == inner) j = 0;
        }
        return;
    }
    strided_offsets(v, i0, n, off);
    for (int k = 0; k < n; k++) buf[k] = gpucore_load_as_f32(base + off[k] * es, dt);
}

static void store_f32(const gpucore_view *v, int64_t i0, int n, const float *buf, int64_t *off)
{
    char *base = v->data;
    const int dt = v->dtype, es = v->elem_size;
    if (v->contiguous) { /* f32, bf16 or f16: rounded in registers */
        cpu_vec_store(base + i0 * es, dt, buf, n);
        return;
    }
    strided_offsets(v, i0, n, off);
    for (int k = 0; k < n; k++) gpucore_store_from_f32(base + off[k] * es, dt, buf[k]);
}

/* A loop over k the compiler may vectorise (SIMD) or that stays scalar (SCALAR:
 * libm calls, for the same bits as the kernels); the op tables say which. */
#define EW_LOOP_SIMD EW_SIMD for
#define EW_LOOP_SCALAR for
/* Whether the 8- or 16-lane SLEEF/libmvec body computed a unary op (libm-calling SCALAR rows only; SIMD rows
 * are the compiler's to vectorise). */
#define EW_VEC_SIMD(op, r, a, n) 0
#define EW_VEC_SCALAR(op, r, a, n) cpu_vec_unary(op, r, a, n)

/* r[k] = act(x[k]): the 8-lane formula (cpu_vec_act) where there is one, else the
 * activation's scalar formula called directly. */
static void act_loop(int act, const float *x, float *r, int n)
{
    if (cpu_vec_act(act, r, x, n)) return;
    switch (act) {
#define ACT_CASE(N, name, fwd, grad, simd) \
    case GPUCORE_ACT_CODE_##N: EW_LOOP_##simd (int k = 0; k < n; k++) r[k] = fwd(x[k]); break;
    GPUCORE_ACTIVATION_TABLE(ACT_CASE)
#undef ACT_CASE
    default: for (int k = 0; k < n; k++) r[k] = gpucore_act_apply(act, x[k]); break;
    }
}

/* r[k] = dy[k] * act'(x[k]). */
static void act_grad_loop(int act, const float *dy, const float *x, float *r, int n)
{
    if (cpu_vec_act_grad(act, r, dy, x, n)) return;
    switch (act) {
#define ACT_CASE(N, name, fwd, grad, simd) \
    case GPUCORE_ACT_CODE_##N: EW_LOOP_##simd (int k = 0; k < n; k++) r[k] = dy[k] * grad(x[k]); break;
    GPUCORE_ACTIVATION_TABLE(ACT_CASE)
#undef ACT_CASE
    default: for (int k = 0; k < n; k++) r[k] = dy[k] * gpucore_act_grad_apply(act, x[k]); break;
    }
}

/* Dropout of elements i0 .. i0+n-1: the Philox block of counter offset + i/4 serves
 * elements 4c .. 4c+3 (gpucore_philox_uniform's mapping); the blocks covering the run are drawn
 * together (cpu_vec_philox: 8 at a time in AVX2), then the formula per element. */
static void dropout_loop(const gpucore_ew_args *p, const float *a, float *r, int n, int64_t i0)
{
    enum { BLOCKS = EW_BLOCK / 4 + 2 }; /* a run of EW_BLOCK elements may start and end mid-block */
    uint32_t u[4 * BLOCKS];
    const float keep = p->alpha, scale = p->beta;
    for (int k0 = 0; k0 < n; k0 += EW_BLOCK) {
        const int m = n - k0 < EW_BLOCK ? n - k0 : EW_BLOCK;
        const uint64_t i = (uint64_t)(i0 + k0), first = i / 4, last = (i + (uint64_t)m - 1) / 4;
        cpu_vec_philox(p->seed, p->offset + first, (int64_t)(last - first + 1), u);
        const uint32_t *ue = u + i % 4; /* element i's word */
        EW_SIMD for (int k = 0; k < m; k++)
            r[k0 + k] = gpucore_ew_dropout(gpucore_u32_to_unit(ue[k]), keep, scale, a[k0 + k]);
    }
}

/* r = op(a, b) for n elements; r may be a (in place). Each case loops over the
 * op's per-element function from elementwise_math.h (the kernels' formula). */
static void compute_block(const gpucore_ew_args *p, const float *a, const float *b, float *r, int n, int64_t i0)
{
    const float al = p->alpha, be = p->beta;
    switch (p->op) {
#define BINARY_CASE(N, name, expr) \
    case GPUCORE_EW_##N: EW_SIMD for (int k = 0; k < n; k++) r[k] = gpucore_ew_##name(a[k], b[k]); break;
    GPUCORE_BINARY_TABLE(BINARY_CASE)
#undef BINARY_CASE
    case GPUCORE_EW_AXPBY: EW_SIMD for (int k = 0; k < n; k++) r[k] = gpucore_ew_axpby(al, be, a[k], b[k]); break;
    case GPUCORE_EW_AFFINE: EW_SIMD for (int k = 0; k < n; k++) r[k] = gpucore_ew_affine(al, be, a[k]); return;
    case GPUCORE_EW_CLAMP: EW_SIMD for (int k = 0; k < n; k++) r[k] = gpucore_ew_clamp(al, be, a[k]); return;
#define UNARY_CASE(N, name, expr, simd) \
    case GPUCORE_EW_##N:                                                                                             \
        if (!EW_VEC_##simd(p->op, r, a, n)) EW_LOOP_##simd (int k = 0; k < n; k++) r[k] = gpucore_ew_##name(a[k]);   \
        return;
    GPUCORE_UNARY_TABLE(UNARY_CASE)
#undef UNARY_CASE
    case GPUCORE_EW_ACT: act_loop(p->act, a, r, n); return;
    case GPUCORE_EW_ACT_GRAD: act_grad_loop(p->act, a, b, r, n); return;
    case GPUCORE_EW_DROPOUT: dropout_loop(p, a, r, n, i0); return;
    default:
        for (int k = 0; k < n; k++)
            r[k] = gpucore_ew_compute(p->op, p->act, al, be, p->seed, p->offset, a[k], b[k], (uint64_t)(i0 + k));
        return;
    }
    if (p->act) act_loop(p->act, r, r, n); /* binary ops and axpby: the fused activation */
}

/* Contiguous casts between f32, f16 and bf16: through f32, which equals the f64 route
 * (the f64 of an f32 value rounds to odd exactly to itself). */
static int cast_fast(const gpucore_ew_args *p)
{
    const gpucore_view *o = &p->out, *x = &p->in[0];
    const int f = (1 << GPUCORE_KDT_F32) | (1 << GPUCORE_KDT_F16) | (1 << GPUCORE_KDT_BF16);
    return o->contiguous && x->contiguous && o->dtype >= 0 && o->dtype < 31 && x->dtype >= 0 && x->dtype < 31 &&
           ((f >> o->dtype) & 1) && ((f >> x->dtype) & 1);
}

/* dst: where elements i0.. of a contiguous out go (out's own memory, or the staging of a streamed run) */
static void cast_block(const gpucore_ew_args *p, int64_t i0, int n, char *dst, int64_t *off_in, int64_t *off_out)
{
    const gpucore_view *o = &p->out, *x = &p->in[0];
    if (cast_fast(p)) { /* widen/narrow in registers straight between the tensors */
        const char *src = (const char *)x->data + i0 * x->elem_size;
        if (o->dtype == GPUCORE_KDT_F32) { cpu_vec_load((float *)dst, src, x->dtype, n); return; }
        if (x->dtype == GPUCORE_KDT_F32) { cpu_vec_store(dst, o->dtype, (const float *)src, n); return; }
        float buf[EW_BLOCK];
        cpu_vec_load(buf, src, x->dtype, n);
        cpu_vec_store(dst, o->dtype, buf, n);
        return;
    }
    if (!o->contiguous) strided_offsets(o, i0, n, off_out);
    if (!x->contiguous) strided_offsets(x, i0, n, off_in);
    for (int k = 0; k < n; k++) {
        int64_t io = o->contiguous ? i0 + k : off_out[k], ii = x->contiguous ? i0 + k : off_in[k];
        double v = gpucore_load_as_f64((const char *)x->data + ii * x->elem_size, x->dtype);
        gpucore_store_from_f64((char *)o->data + io * o->elem_size, o->dtype, v);
    }
}

/* What elementwise_task decides once per call, and the per-thread staging buffers. */
typedef struct ew_plan {
    const gpucore_ew_args *p;
    gpucore_ew_layout mode[2];
    int64_t inner[2];
    int direct;                       /* every operand dense f32: computed in place in the tensors */
    cpu_vec_bf16_binary_fn bf16_body; /* dense bf16 arithmetic in one vector pass, or NULL */
    cpu_vec_f32_binary_fn f32_body;   /* direct f32 add/sub/mul/div in AVX2, or NULL */
    int stream;                       /* contiguous out, operands past the cache: runs staged, then streamed */
} ew_plan;

typedef struct ew_bufs {
    float a[EW_BLOCK], b[EW_BLOCK], r[EW_BLOCK];
    float s[EW_STREAM_RUN] __attribute__((aligned(64))); /* a streamed run's output (elements of at most 4 bytes) */
    int64_t off[EW_BLOCK], off2[EW_BLOCK];
} ew_bufs;

/* Elements i0 .. i0+len-1 of the op into o: out's own memory at i0 for a contiguous out (or a
 * streamed run's staging), unused for a strided out (stored through the view). */
static void ew_range(const ew_plan *pl, int64_t i0, int len, char *o, ew_bufs *w)
{
    const gpucore_ew_args *p = pl->p;
    if (p->op == GPUCORE_EW_CAST) {
        cast_block(p, i0, len, o, w->off, w->off2);
    } else if (pl->bf16_body) {
        pl->bf16_body((uint16_t *)o, (const uint16_t *)p->in[0].data + i0, (const uint16_t *)p->in[1].data + i0, len);
    } else if (pl->f32_body) {
        float *r = (float *)o;
        pl->f32_body(r, (const float *)p->in[0].data + i0, (const float *)p->in[1].data + i0, len);
        if (p->act) act_loop(p->act, r, r, len); /* the fused activation, as compute_block */
    } else if (pl->direct) {
        compute_block(p, (const float *)p->in[0].data + i0, p->nin == 2 ? (const float *)p->in[1].data + i0 : w->b,
                      (float *)o, len, i0);
    } else {
        load_f32(&p->in[0], pl->mode[0], pl->inner[0], i0, len, w->a, w->off);
        if (p->nin == 2) load_f32(&p->in[1], pl->mode[1], pl->inner[1], i0, len, w->b, w->off);
        compute_block(p, w->a, w->b, w->r, len, i0);
        if (pl->stream) cpu_vec_store(o, p->out.dtype, w->r, len);
        else store_f32(&p->out, i0, len, w->r, w->off);
    }
}

/* Block blk (EW_BLOCK elements from blk * EW_BLOCK) of the op: the same work whichever
 * thread runs it, so results do not depend on the thread count. A streamed block goes in runs of
 * EW_STREAM_RUN elements, each computed into w->s (in L1) and copied out with streaming stores
 * (the same values: every element's value is independent of the run it is in). Runs this short
 * keep the loads and the streaming stores interleaved; a whole block computed, then copied, measured
 * no faster than plain stores. */
static void ew_block(const ew_plan *pl, int64_t blk, ew_bufs *w)
{
    const gpucore_ew_args *p = pl->p;
    const int64_t n = p->out.numel, i0 = blk * EW_BLOCK;
    const int len = (int)(n - i0 < EW_BLOCK ? n - i0 : EW_BLOCK);
    const size_t es = (size_t)p->out.elem_size;
    char *const dst = (char *)p->out.data + i0 * (int64_t)es; /* contiguous out only */
    if (!pl->stream) {
        ew_range(pl, i0, len, dst, w);
        return;
    }
    for (int k = 0; k < len; k += EW_STREAM_RUN) {
        const int m = len - k < EW_STREAM_RUN ? len - k : EW_STREAM_RUN;
        ew_range(pl, i0 + k, m, (char *)w->s, w);
        cpu_vec_stream_copy(dst + (size_t)k * es, w->s, (size_t)m * es);
    }
}

/* Whether the op's blocks stream their output: a contiguous out of elements of at most 4 bytes
 * (w->s holds a run), computed from registers or staging (not a strided cast), and the bytes
 * the op reads and writes at least cpu_vec_stream_min_bytes. */
static int ew_streams(const gpucore_ew_args *p, const ew_plan *pl)
{
    if (!p->out.contiguous || p->out.elem_size > 4 || (p->op == GPUCORE_EW_CAST && !cast_fast(p))) return 0;
    size_t bytes = (size_t)p->out.numel * (size_t)p->out.elem_size;
    for (int i = 0; i < p->nin; i++)
        if (pl->mode[i] == GPUCORE_EW_LAYOUT_DENSE) bytes += (size_t)p->in[i].numel * (size_t)p->in[i].elem_size;
    return bytes >= cpu_vec_stream_min_bytes();
}

static gpucore_status elementwise_task(void *argp)
{
    const gpucore_ew_args *p = argp;
    const int64_t n = p->out.numel, blocks = (n + EW_BLOCK - 1) / EW_BLOCK;
    ew_plan pl = {p, {GPUCORE_EW_LAYOUT_STRIDED, GPUCORE_EW_LAYOUT_STRIDED}, {0, 0}, 0, NULL, NULL, 0};
    for (int i = 0; i < p->nin; i++)
        if (p->out.contiguous) pl.mode[i] = gpucore_ew_input_mode(&p->out, &p->in[i], &pl.inner[i]);
    pl.direct = p->op != GPUCORE_EW_CAST && p->out.contiguous && p->out.dtype == GPUCORE_KDT_F32;
    for (int i = 0; i < p->nin; i++)
        pl.direct &= pl.mode[i] == GPUCORE_EW_LAYOUT_DENSE && p->in[i].dtype == GPUCORE_KDT_F32;
    if (p->nin == 2 && !p->act && p->out.contiguous && p->out.dtype == GPUCORE_KDT_BF16 &&
        pl.mode[0] == GPUCORE_EW_LAYOUT_DENSE && pl.mode[1] == GPUCORE_EW_LAYOUT_DENSE &&
        p->in[0].dtype == GPUCORE_KDT_BF16 && p->in[1].dtype == GPUCORE_KDT_BF16)
        pl.bf16_body = cpu_vec_bf16_binary(p->op);
    if (pl.direct && p->nin == 2) pl.f32_body = cpu_vec_f32_binary(p->op);
    pl.stream = ew_streams(p, &pl);
    /* A small op runs its blocks right here: entering an OpenMP region, even one whose if()
     * clause is false, costs libgomp a team set-up (an allocation and futex calls) per call. */
    if (n <= EW_PARALLEL_MIN) {
        ew_bufs w;
        if (p->nin < 2) memset(w.b, 0, sizeof w.b); /* unary ops never read b; zero it once anyway */
        for (int64_t blk = 0; blk < blocks; blk++) ew_block(&pl, blk, &w);
        if (pl.stream) cpu_vec_stream_fence();
        return GPUCORE_OK;
    }
#pragma omp parallel
    {
        ew_bufs w;
        if (p->nin < 2) memset(w.b, 0, sizeof w.b);
#pragma omp for schedule(static) nowait
        for (int64_t blk = 0; blk < blocks; blk++) ew_block(&pl, blk, &w);
        if (pl.stream) cpu_vec_stream_fence(); /* each thread's own streaming stores, before the region's end */
    }
    return GPUCORE_OK;
}

gpucore_status cpu_elementwise(void *bctx, const gpucore_ew_args *args, void *s)
{
    (void)bctx;
    /* a small op (a few microseconds, no parallel region) on an idle stream runs now */
    return args->out.numel <= 4096 ? cpu_stream_enqueue_small(s, elementwise_task, args, sizeof *args)
                                              : cpu_stream_enqueue(s, elementwise_task, args, sizeof *args);
}
