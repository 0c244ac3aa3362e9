/*
 * cpu_ops_reduce.c — the CPU backend's reductions over one axis of a
 * contiguous [outer, len, inner] tensor. The axis is cut into the same fixed
 * chunks the CUDA kernels use (reduce_math.h); chunks are reduced in parallel
 * (OpenMP) into per-chunk partials, then folded in chunk order, so the result
 * does not depend on the thread count (a row or column run of one chunk is
 * written out by the thread that reduced it). Sums accumulate in f64 here, row sums
 * after short f32 runs (cpu_vec_sum_blocked: 8 elements per lane in f32, then
 * 16 fixed f64 lanes, SIMD; bf16 rows widened in registers, no staging); column
 * sums add whole rows, 8 at a time in f32 (cpu_vec_add_into, AVX2), into an f64
 * vector;
 * the dtype is dispatched once per block.
 */
#include <stdlib.h>
#include <string.h>
#include "cpu_internal.h"
#include "reduce_math.h"
#include "dtype_access.h"
#include "cpu_vec.h"
#include <math.h>

typedef struct cpu_acc { double val; int64_t idx; } cpu_acc;

static cpu_acc acc_combine(int op, cpu_acc a, cpu_acc b)
{
    if (gpucore_red_is_sum(op)) { a.val += b.val; if (a.idx < 0) a.idx = b.idx; return a; }
    if (a.idx < 0) return b;
    if (b.idx < 0) return a;
    int an = a.val != a.val, bn = b.val != b.val;
    if (an || bn) {
        if (an && bn) return a.idx <= b.idx ? a : b;
        return an ? a : b;
    }
    int b_better = op == GPUCORE_RED_MIN ? b.val < a.val : b.val > a.val;
    if (b_better || (b.val == a.val && b.idx < a.idx)) return b;
    return a;
}

/* One chunk [l0, l1) of one row (inner == 1): the row's elements widened to f32 a block
 * at a time (dtype dispatch once per block), then the cpu_vec.h kernels. */
static cpu_acc reduce_row_chunk(int op, const char *x, int dt, int es, int64_t l0, int64_t l1)
{
    float buf[GPUCORE_RED_ROW_CHUNK];
    const float *v = (const float *)(x + l0 * es);
    const int64_t n = l1 - l0;
    if (dt == GPUCORE_KDT_BF16 && (op == GPUCORE_RED_SUM || op == GPUCORE_RED_MEAN)) { /* one pass, no staging */
        cpu_acc a = {cpu_vec_sum_blocked_bf16((const uint16_t *)(x + l0 * es), n, buf), n > 0 ? l0 : -1};
        return a;
    }
    if (dt != GPUCORE_KDT_F32) {
        cpu_vec_load(buf, x + l0 * es, dt, n);
        v = buf;
    }
    cpu_acc a = {0, n > 0 ? l0 : -1};
    switch (op) {
    case GPUCORE_RED_SUM: case GPUCORE_RED_MEAN: a.val = cpu_vec_sum_blocked(v, n); break;
    case GPUCORE_RED_SUMSQ: a.val = cpu_vec_sumsq(v, n); break;
    case GPUCORE_RED_MAX: a.val = cpu_vec_max(v, n); break;
    case GPUCORE_RED_MIN: a.val = cpu_vec_min(v, n); break;
    default: /* argmax: the first index of the largest value; the first NaN wins */
        for (int64_t i = 0; i < n; i++) {
            if (v[i] != v[i]) { a.val = NAN; a.idx = l0 + i; break; }
            if (i == 0 || v[i] > a.val) { a.val = v[i]; a.idx = l0 + i; }
        }
    }
    return a;
}

/* Rows per f32 run of a column sum: each column adds CPU_COL_RUN rows in f32, in row order,
 * then that run's sum into its f64 total (as cpu_vec_sum_blocked does along a row). */
#define CPU_COL_RUN 8

/* One chunk of rows [l0, l1) of a column reduction (inner > 1) for the sums: each column
 * adds its rows in row order, in f32 runs of CPU_COL_RUN rows into f64 for sums, in f64
 * for sums of squares (the loops over columns vectorise). row and run hold inner floats. */
static void reduce_col_chunk_sum(int op, const char *x, int dt, int es, int64_t len, int64_t inner, int64_t o,
                                 int64_t l0, int64_t l1, cpu_acc *acc, double *dsum, float *row, float *run)
{
    for (int64_t j = 0; j < inner; j++) dsum[j] = 0;
    for (int64_t l = l0; l < l1; l++) {
        const char *src = x + ((o * len + l) * inner) * es;
        const float *v = (const float *)src;
        if (dt != GPUCORE_KDT_F32) {
            cpu_vec_load(row, src, dt, inner);
            v = row;
        }
        if (op == GPUCORE_RED_SUMSQ) {
            for (int64_t j = 0; j < inner; j++) dsum[j] += (double)v[j] * v[j];
            continue;
        }
        const int64_t k = (l - l0) % CPU_COL_RUN;
        if (k == 0) memcpy(run, v, sizeof(float) * (size_t)inner);
        else cpu_vec_add_into(run, v, inner);
        if (k == CPU_COL_RUN - 1 || l == l1 - 1) cpu_vec_add_into_f64(dsum, run, inner);
    }
    for (int64_t j = 0; j < inner; j++) { acc[j].val = dsum[j]; acc[j].idx = l1 > l0 ? l0 : -1; }
}

/* Partial result w of reduce_task (chunk w % chunks of outer index w / chunks) into part;
 * returns 1 when out of host memory. The same work whichever thread runs it. */
static int reduce_item(const gpucore_reduce_args *p, cpu_acc *part, int64_t chunks, int64_t w)
{
    const int64_t len = p->len, inner = p->inner;
    const int64_t chunk_len = inner == 1 ? GPUCORE_RED_ROW_CHUNK : GPUCORE_RED_COL_CHUNK;
    const int op = p->op, dt = p->in.dtype, es = p->in.elem_size;
    const char *x = p->in.data;
    const int64_t o = w / chunks, c = w % chunks;
    cpu_acc *acc = part + (o * chunks + c) * inner;
    const int64_t l0 = c * chunk_len, l1 = l0 + chunk_len < len ? l0 + chunk_len : len;
    if (inner == 1) {
        acc[0] = reduce_row_chunk(op, x + o * len * es, dt, es, l0, l1);
        return 0;
    }
    if (inner > 1 && gpucore_red_is_sum(op)) {
        double *dsum = malloc(sizeof(double) * (size_t)inner + 2 * sizeof(float) * (size_t)inner);
        if (!dsum) return 1;
        float *fbuf = (float *)(dsum + inner);
        reduce_col_chunk_sum(op, x, dt, es, len, inner, o, l0, l1, acc, dsum, fbuf, fbuf + inner);
        free(dsum);
        return 0;
    }
    for (int64_t j = 0; j < inner; j++) { acc[j].val = 0; acc[j].idx = -1; }
    for (int64_t l = l0; l < l1; l++) {
        const char *row = x + ((o * len + l) * inner) * es;
        for (int64_t j = 0; j < inner; j++) {
            double v = dt == GPUCORE_KDT_F32 ? ((const float *)row)[j] : gpucore_load_as_f32(row + j * es, dt);
            cpu_acc e = {v, l};
            acc[j] = acc_combine(op, acc[j], e);
        }
    }
    return 0;
}

/* Output element w of reduce_task: its chunks' partial results combined in chunk order. */
static void reduce_output(const gpucore_reduce_args *p, const cpu_acc *part, int64_t chunks, int64_t w)
{
    const int64_t o = w / p->inner, j = w % p->inner;
    cpu_acc a = {0, -1};
    for (int64_t c = 0; c < chunks; c++) a = acc_combine(p->op, a, part[(o * chunks + c) * p->inner + j]);
    char *out = p->out.data;
    if (p->op == GPUCORE_RED_ARGMAX) ((int64_t *)out)[w] = a.idx;
    else {
        double v = p->op == GPUCORE_RED_MEAN ? a.val / (double)p->len : a.val;
        gpucore_store_from_f32(out + w * p->out.elem_size, p->out.dtype, (float)v);
    }
}

/* Item w of reduce_task into part; where every outer index is one chunk (rows up to
 * GPUCORE_RED_ROW_CHUNK, columns up to GPUCORE_RED_COL_CHUNK), item w holds outputs
 * w*inner .. w*inner+inner-1 whole, and the thread that reduced it writes them (the same
 * reduce_output calls as the pass over every output, which then is not needed). */
static int reduce_item_out(const gpucore_reduce_args *p, cpu_acc *part, int64_t chunks, int64_t w)
{
    if (reduce_item(p, part, chunks, w)) return 1;
    if (chunks == 1)
        for (int64_t j = 0; j < p->inner; j++) reduce_output(p, part, 1, w * p->inner + j);
    return 0;
}

#define SUM_ROWS_GROUP 16 /* rows per item of sum_rows */

/* Sums (means) of whole f32 or bf16 rows that are one chunk each, in groups of rows, each row
 * through cpu_vec_sum_blocked(_bf16), one after the other (two rows side by side, their add chains
 * overlapping, measured faster in a steady loop but 1.3-1.8x slower in the median of repeated
 * batches, as the op table times), and each output written as reduce_output writes it (the one
 * chunk's sum, / len for a mean): the bits of the chunked path, without its partials. */
static void sum_rows(const gpucore_reduce_args *p)
{
    const int64_t rows = p->outer, len = p->len, groups = (rows + SUM_ROWS_GROUP - 1) / SUM_ROWS_GROUP;
    const int bf16 = p->in.dtype == GPUCORE_KDT_BF16;
    const char *x = p->in.data;
    char *out = p->out.data;
    CPU_PARALLEL_FOR(rows * len > 32768 && groups > 1, gi, groups, {
        float scratch[GPUCORE_RED_ROW_CHUNK]; /* the portable bf16 body widens a row here */
        const int64_t r0 = gi * SUM_ROWS_GROUP, nr = rows - r0 < SUM_ROWS_GROUP ? rows - r0 : SUM_ROWS_GROUP;
        for (int64_t r = 0; r < nr; r++) {
            const double v = bf16 ? cpu_vec_sum_blocked_bf16((const uint16_t *)x + (r0 + r) * len, len, scratch)
                                  : cpu_vec_sum_blocked((const float *)x + (r0 + r) * len, len);
            const double o = p->op == GPUCORE_RED_MEAN ? v / (double)len : v;
            gpucore_store_from_f32(out + (r0 + r) * p->out.elem_size, p->out.dtype, (float)o);
        }
    });
}

/* Small reductions run their loops right here: entering an OpenMP region, even one whose
 * if() clause is false, costs libgomp a team set-up (an allocation and futex calls). */
static gpucore_status reduce_task(void *argp)
{
    const gpucore_reduce_args *p = argp;
    const int64_t outer = p->outer, len = p->len, inner = p->inner;
    const int64_t chunks = gpucore_reduce_chunks(len, inner);
    if (inner == 1 && chunks == 1 && len > 0 && (p->in.dtype == GPUCORE_KDT_F32 || p->in.dtype == GPUCORE_KDT_BF16) &&
        (p->op == GPUCORE_RED_SUM || p->op == GPUCORE_RED_MEAN)) {
        sum_rows(p);
        return GPUCORE_OK;
    }
    cpu_acc *part = malloc(sizeof(cpu_acc) * (size_t)(outer * chunks * inner));
    if (!part) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "reduce: out of host memory for partial results");
    const int64_t items = outer * chunks, outs = outer * inner;
    int oom = 0;
    if (outer * len * inner <= 32768) {
        for (int64_t w = 0; w < items; w++) oom |= reduce_item_out(p, part, chunks, w);
    } else {
#pragma omp parallel for schedule(static) reduction(| : oom) /* items of equal size */
        for (int64_t w = 0; w < items; w++) oom |= reduce_item_out(p, part, chunks, w);
    }
    if (oom) {
        free(part);
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "reduce: out of host memory for a column accumulator");
    }
    if (chunks == 1) {
        /* written by reduce_item_out */
    } else if (outs <= 4096) {
        for (int64_t w = 0; w < outs; w++) reduce_output(p, part, chunks, w);
    } else {
#pragma omp parallel for schedule(static)
        for (int64_t w = 0; w < outs; w++) reduce_output(p, part, chunks, w);
    }
    free(part);
    return GPUCORE_OK;
}

gpucore_status cpu_reduce(void *bctx, const gpucore_reduce_args *args, void *s)
{
    (void)bctx;
    return cpu_stream_enqueue(s, reduce_task, args, sizeof *args);
}
