/*
 * cpu_ops_elementwise.c — the CPU backend's elementwise family. Work is cut
 * into blocks of EW_BLOCK elements spread over OpenMP threads; each block
 * loads its inputs into f32 buffers (dense, row-broadcast, scalar or general
 * strided addressing, the same modes the CUDA kernel uses), computes with the
 * op's loop hoisted out of the switch so the compiler can vectorise it, and
 * stores with round-to-nearest-even. Casts run through f64.
 */
#include <string.h>
#include "cpu_internal.h"
#include "../../kernels/elementwise_math.h"

#define EW_BLOCK 2048
#define EW_PARALLEL_MIN 32768

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

static void load_f32(const gpucore_view *v, int mode, int64_t inner, int64_t i0, int n, float *buf, int64_t *off)
{
    const char *base = v->data;
    const int dt = v->dtype, es = v->elem_size;
    if (mode == 0 && dt == GPUCORE_KDT_F32) { memcpy(buf, (const float *)base + i0, sizeof(float) * (size_t)n); return; }
    if (mode == 0 && dt == GPUCORE_KDT_BF16) {
        const uint16_t *p = (const uint16_t *)base + i0;
        for (int k = 0; k < n; k++) buf[k] = gpucore_bf16_to_f32(p[k]);
        return;
    }
    if (mode == 0 && dt == GPUCORE_KDT_F16) {
        const uint16_t *p = (const uint16_t *)base + i0;
        for (int k = 0; k < n; k++) buf[k] = gpucore_f16_to_f32(p[k]);
        return;
    }
    if (mode == 2) {
        float x = gpucore_load_as_f32(base, dt);
        for (int k = 0; k < n; k++) buf[k] = x;
        return;
    }
    if (mode == 1) { /* one modulo per block, then walk the row with wrap-around */
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
    if (v->contiguous) {
        if (dt == GPUCORE_KDT_F32) { memcpy((float *)base + i0, buf, sizeof(float) * (size_t)n); return; }
        uint16_t *p = (uint16_t *)base + i0;
        if (dt == GPUCORE_KDT_BF16) for (int k = 0; k < n; k++) p[k] = gpucore_f32_to_bf16(buf[k]);
        else for (int k = 0; k < n; k++) p[k] = gpucore_f32_to_f16(buf[k]);
        return;
    }
    strided_offsets(v, i0, n, off);
    for (int k = 0; k < n; k++) gpucore_store_from_f32(base + off[k] * es, dt, buf[k]);
}

static void compute_block(const gpucore_ew_args *p, const float *a, const float *b, float *r, int n, int64_t i0)
{
    const float al = p->alpha, be = p->beta;
    int fused_act = 1;
    switch (p->op) {
    case GPUCORE_EW_ADD: for (int k = 0; k < n; k++) r[k] = a[k] + b[k]; break;
    case GPUCORE_EW_SUB: for (int k = 0; k < n; k++) r[k] = a[k] - b[k]; break;
    case GPUCORE_EW_MUL: for (int k = 0; k < n; k++) r[k] = a[k] * b[k]; break;
    case GPUCORE_EW_DIV: for (int k = 0; k < n; k++) r[k] = a[k] / b[k]; break;
    case GPUCORE_EW_AXPBY: for (int k = 0; k < n; k++) r[k] = al * a[k] + be * b[k]; break;
    case GPUCORE_EW_AFFINE: for (int k = 0; k < n; k++) r[k] = al * a[k] + be; fused_act = 0; break;
    case GPUCORE_EW_NEG: for (int k = 0; k < n; k++) r[k] = -a[k]; fused_act = 0; break;
    default:
        for (int k = 0; k < n; k++)
            r[k] = gpucore_ew_compute(p->op, p->act, al, be, p->seed, p->offset, a[k], b[k], (uint64_t)(i0 + k));
        fused_act = 0;
        break;
    }
    if (fused_act && p->act)
        for (int k = 0; k < n; k++) r[k] = gpucore_act_apply(p->act, r[k]);
}

static void cast_block(const gpucore_ew_args *p, int64_t i0, int n, int64_t *off_in, int64_t *off_out)
{
    const gpucore_view *o = &p->out, *x = &p->in[0];
    if (!o->contiguous) strided_offsets(o, i0, n, off_out);
    if (!x->contiguous) strided_offsets(x, i0, n, off_in);
    for (int k = 0; k < n; k++) {
        int64_t io = o->contiguous ? i0 + k : off_out[k], ii = x->contiguous ? i0 + k : off_in[k];
        double v = gpucore_load_as_f64((const char *)x->data + ii * x->elem_size, x->dtype);
        gpucore_store_from_f64((char *)o->data + io * o->elem_size, o->dtype, v);
    }
}

static gpucore_status elementwise_task(void *argp)
{
    const gpucore_ew_args *p = argp;
    const int64_t n = p->out.numel, blocks = (n + EW_BLOCK - 1) / EW_BLOCK;
    int mode[2] = {-1, -1};
    int64_t inner[2] = {0, 0};
    for (int i = 0; i < p->nin; i++)
        if (p->out.contiguous) mode[i] = gpucore_ew_input_mode(&p->out, &p->in[i], &inner[i]);
#pragma omp parallel if (n > EW_PARALLEL_MIN)
    {
        float a[EW_BLOCK], b[EW_BLOCK], r[EW_BLOCK];
        int64_t off[EW_BLOCK], off2[EW_BLOCK];
#pragma omp for schedule(static)
        for (int64_t blk = 0; blk < blocks; blk++) {
            const int64_t i0 = blk * EW_BLOCK;
            const int len = (int)(n - i0 < EW_BLOCK ? n - i0 : EW_BLOCK);
            if (p->op == GPUCORE_EW_CAST) { cast_block(p, i0, len, off, off2); continue; }
            load_f32(&p->in[0], mode[0], inner[0], i0, len, a, off);
            if (p->nin == 2) load_f32(&p->in[1], mode[1], inner[1], i0, len, b, off);
            else memset(b, 0, sizeof(float) * (size_t)len);
            compute_block(p, a, b, r, len, i0);
            store_f32(&p->out, i0, len, r, off);
        }
    }
    return GPUCORE_OK;
}

gpucore_status cpu_elementwise(void *bctx, const gpucore_ew_args *args, void *s)
{
    (void)bctx;
    return cpu_stream_enqueue(s, elementwise_task, args, sizeof *args);
}
