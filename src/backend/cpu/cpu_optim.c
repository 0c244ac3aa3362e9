/*
 * cpu_optim.c — the CPU backend's training primitives: fused optimizer step,
 * loss-scale unscale and update, gradient-norm clipping. Each is one task on
 * the stream's worker (the tensor list is copied into the task), parallel over
 * elements with OpenMP; the per-element math is kernels/optim_math.h, the same
 * source the CUDA kernels compile.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_internal.h"
#include "cpu_vec.h"

#define CPU_OPTIM_PARALLEL_THRESHOLD 16384

/* A task's argument block: a fixed header followed by the tensor list. */
static gpucore_status enqueue_with_list(void *s, cpu_task_fn fn, const void *header, size_t header_size,
                                        const void *list, size_t list_bytes)
{
    size_t total = header_size + list_bytes;
    char *buf = malloc(total ? total : 1);
    if (!buf) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "optimizer: out of host memory for a queued task");
    memcpy(buf, header, header_size);
    if (list_bytes) memcpy(buf + header_size, list, list_bytes);
    gpucore_status st = cpu_stream_enqueue(s, fn, buf, total);
    free(buf);
    return st;
}

/* ---- optimizer step ---- */

typedef struct optim_task_header { gpucore_optim_hparams hp; int64_t count; } optim_task_header;

/* AdamW fast paths: the same gpucore_adamw_update, over dense arrays, with the
 * hyperparameters copied into locals (stores through m/v/param no longer force
 * reloading them) and the dtype branches outside the loop; the f32 loop has an AVX2
 * clone (target_clones) chosen at load time. Bits equal the generic
 * gpucore_optim_element path. Returns 0 if t is not a case
 * handled here. */
/* n f32 elements of AdamW; restrict pointers and -fno-math-errno (meson.build) let it
 * vectorise (sqrtps and divps round as the scalar instructions do: same bits). An AVX2
 * copy runs where the CPU has it (chosen per call, no ifunc: sanitizer builds load it too). */
static inline void adamw_f32_body(float *restrict p, const float *restrict g, float *restrict m, float *restrict v,
                                  int64_t n, const gpucore_optim_hparams *hpp, const gpucore_optim_scalars *sp)
{
    const gpucore_optim_hparams hp = *hpp;
    const gpucore_optim_scalars s = *sp;
    for (int64_t i = 0; i < n; i++) p[i] = gpucore_adamw_update(p[i], g[i], &m[i], &v[i], &hp, &s);
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) static void adamw_f32_avx2(float *restrict p, const float *restrict g,
                                                           float *restrict m, float *restrict v, int64_t n,
                                                           const gpucore_optim_hparams *hp,
                                                           const gpucore_optim_scalars *s)
{
    adamw_f32_body(p, g, m, v, n, hp, s);
}
#endif

static void adamw_f32_run(float *p, const float *g, float *m, float *v, int64_t n, const gpucore_optim_hparams *hp,
                          const gpucore_optim_scalars *s)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (cpu_vec_have_avx2()) {
        adamw_f32_avx2(p, g, m, v, n, hp, s);
        return;
    }
#endif
    adamw_f32_body(p, g, m, v, n, hp, s);
}

#define ADAMW_CHUNK 8192

static int adamw_fast(const gpucore_optim_tensor *t, const gpucore_optim_hparams *hpp, const gpucore_optim_scalars *sp)
{
    const gpucore_optim_hparams hp = *hpp;
    const gpucore_optim_scalars s = *sp;
    const int64_t n = t->numel;
    float *m = t->state0, *v = t->state1;
    if (hp.kind != GPUCORE_OPTIM_KIND_ADAMW || !m || !v) return 0;
    if (!t->master && t->param_dtype == GPUCORE_KDT_F32 && t->grad_dtype == GPUCORE_KDT_F32) {
        float *p = t->param;
        const float *g = t->grad;
        const int64_t chunks = (n + ADAMW_CHUNK - 1) / ADAMW_CHUNK;
#pragma omp parallel for if (n > CPU_OPTIM_PARALLEL_THRESHOLD) schedule(static)
        for (int64_t c = 0; c < chunks; c++) {
            const int64_t i = c * ADAMW_CHUNK, len = n - i < ADAMW_CHUNK ? n - i : ADAMW_CHUNK;
            adamw_f32_run(p + i, g + i, m + i, v + i, len, &hp, &s);
        }
        return 1;
    }
    if (t->master && t->param_dtype == GPUCORE_KDT_BF16 &&
        (t->grad_dtype == GPUCORE_KDT_BF16 || t->grad_dtype == GPUCORE_KDT_F32)) {
        /* per chunk: the gradients widened to f32, the f32 loop above on the master weights (its
         * AVX2 copy; the same bits as element by element), then the bf16 parameters rounded from them */
        float *master = t->master;
        uint16_t *p = t->param;
        const int64_t chunks = (n + ADAMW_CHUNK - 1) / ADAMW_CHUNK;
        const int g16 = t->grad_dtype == GPUCORE_KDT_BF16;
#pragma omp parallel for if (n > CPU_OPTIM_PARALLEL_THRESHOLD) schedule(static)
        for (int64_t c = 0; c < chunks; c++) {
            const int64_t i = c * ADAMW_CHUNK, len = n - i < ADAMW_CHUNK ? n - i : ADAMW_CHUNK;
            float gbuf[ADAMW_CHUNK];
            const float *g = gbuf;
            if (g16) /* widening is exact; the vector conversions give the scalar ones' bits */
                cpu_vec_load(gbuf, (const uint16_t *)t->grad + i, GPUCORE_KDT_BF16, len);
            else
                g = (const float *)t->grad + i;
            adamw_f32_run(master + i, g, m + i, v + i, len, &hp, &s);
            cpu_vec_store(p + i, GPUCORE_KDT_BF16, master + i, len);
        }
        return 1;
    }
    return 0;
}

static gpucore_status optim_task(void *p)
{
    optim_task_header *h = p;
    const gpucore_optim_tensor *ts = (const gpucore_optim_tensor *)(h + 1);
    const gpucore_optim_hparams *hp = &h->hp;
    if (hp->found_inf && *hp->found_inf != 0.0f) return GPUCORE_OK; /* overflow: skip, step unchanged */
    *hp->step += 1.0f;
    gpucore_optim_scalars sc = gpucore_optim_scalars_make(hp, *hp->lr, *hp->step);
    for (int64_t k = 0; k < h->count; k++) {
        const gpucore_optim_tensor *t = &ts[k];
        const int64_t n = t->numel;
        if (adamw_fast(t, hp, &sc)) continue;
#pragma omp parallel for if (n > CPU_OPTIM_PARALLEL_THRESHOLD) schedule(static)
        for (int64_t i = 0; i < n; i++) gpucore_optim_element(t, i, hp, &sc);
    }
    return GPUCORE_OK;
}

gpucore_status cpu_optim_step(void *bctx, const gpucore_optim_hparams *hp, const gpucore_optim_tensor *tensors,
                              int64_t count, void *s)
{
    (void)bctx;
    optim_task_header h = {*hp, count};
    return enqueue_with_list(s, optim_task, &h, sizeof h, tensors, (size_t)count * sizeof *tensors);
}

/* ---- loss scaling ---- */

typedef struct unscale_task_header { const float *scale; float *found_inf; int64_t count; } unscale_task_header;

static gpucore_status unscale_task(void *p)
{
    unscale_task_header *h = p;
    const gpucore_mt_tensor *ts = (const gpucore_mt_tensor *)(h + 1);
    const float inv_scale = 1.0f / *h->scale;
    int bad = 0;
    for (int64_t k = 0; k < h->count; k++) {
        const gpucore_mt_tensor *t = &ts[k];
        const int64_t n = t->numel;
        int tensor_bad = 0;
#pragma omp parallel for if (n > CPU_OPTIM_PARALLEL_THRESHOLD) schedule(static) reduction(| : tensor_bad)
        for (int64_t i = 0; i < n; i++) tensor_bad |= gpucore_unscale_element(t->data, t->dtype, i, inv_scale);
        bad |= tensor_bad;
    }
    if (bad) *h->found_inf = 1.0f;
    return GPUCORE_OK;
}

gpucore_status cpu_amp_unscale(void *bctx, const gpucore_mt_tensor *grads, int64_t count, const float *scale,
                               float *found_inf, void *s)
{
    (void)bctx;
    unscale_task_header h = {scale, found_inf, count};
    return enqueue_with_list(s, unscale_task, &h, sizeof h, grads, (size_t)count * sizeof *grads);
}

typedef struct amp_update_args {
    float *scale; int32_t *tracker; const float *found_inf; float growth, backoff; int32_t interval;
} amp_update_args;

static gpucore_status amp_update_task(void *p)
{
    amp_update_args *a = p;
    gpucore_loss_scale_update(a->scale, a->tracker, a->found_inf, a->growth, a->backoff, a->interval);
    return GPUCORE_OK;
}

gpucore_status cpu_amp_update(void *bctx, float *scale, int32_t *growth_tracker, const float *found_inf, float growth,
                              float backoff, int32_t interval, void *s)
{
    (void)bctx;
    amp_update_args a = {scale, growth_tracker, found_inf, growth, backoff, interval};
    return cpu_stream_enqueue(s, amp_update_task, &a, sizeof a);
}

/* ---- gradient clipping by global L2 norm ---- */

typedef struct clip_task_header {
    float *partials; float max_norm; float *total_norm; float *clip_coef; int64_t count;
} clip_task_header;

static float chunk_sumsq(const gpucore_mt_tensor *t, int64_t chunk)
{
    int64_t lo = chunk * GPUCORE_MT_CHUNK, hi = lo + GPUCORE_MT_CHUNK;
    if (hi > t->numel) hi = t->numel;
    double acc = 0;
    for (int64_t i = lo; i < hi; i++) {
        const void *p = t->dtype == GPUCORE_KDT_F32 ? (const void *)((const float *)t->data + i)
                                                    : (const void *)((const uint16_t *)t->data + i);
        double x = gpucore_load_as_f32(p, t->dtype);
        acc += x * x;
    }
    return (float)acc;
}

static gpucore_status clip_task(void *p)
{
    clip_task_header *h = p;
    const gpucore_mt_tensor *ts = (const gpucore_mt_tensor *)(h + 1);
    /* 1: one partial per chunk, written at the chunk's fixed position */
    int64_t base = 0;
    for (int64_t k = 0; k < h->count; k++) {
        const int64_t chunks = gpucore_mt_chunks(ts[k].numel);
#pragma omp parallel for if (chunks > 1) schedule(static)
        for (int64_t c = 0; c < chunks; c++) h->partials[base + c] = chunk_sumsq(&ts[k], c);
        base += chunks;
    }
    /* 2: the partials in chunk order */
    double total = 0;
    for (int64_t c = 0; c < base; c++) total += h->partials[c];
    const float norm = (float)sqrt(total);
    const float coef = gpucore_clip_coef(norm, h->max_norm);
    *h->total_norm = norm;
    if (h->clip_coef) *h->clip_coef = coef;
    /* 3: scale every gradient */
    for (int64_t k = 0; k < h->count; k++) {
        const gpucore_mt_tensor *t = &ts[k];
        const int64_t n = t->numel;
#pragma omp parallel for if (n > CPU_OPTIM_PARALLEL_THRESHOLD) schedule(static)
        for (int64_t i = 0; i < n; i++) {
            void *q = t->dtype == GPUCORE_KDT_F32 ? (void *)((float *)t->data + i) : (void *)((uint16_t *)t->data + i);
            gpucore_store_from_f32(q, t->dtype, gpucore_load_as_f32(q, t->dtype) * coef);
        }
    }
    return GPUCORE_OK;
}

gpucore_status cpu_clip_grad_norm(void *bctx, const gpucore_mt_tensor *grads, int64_t count, float *partials,
                                  float max_norm, float *total_norm, float *clip_coef, void *s)
{
    (void)bctx;
    clip_task_header h = {partials, max_norm, total_norm, clip_coef, count};
    return enqueue_with_list(s, clip_task, &h, sizeof h, grads, (size_t)count * sizeof *grads);
}
