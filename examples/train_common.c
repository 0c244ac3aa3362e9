/*
 * train_common.c — the training examples' shared helpers (see train_common.h).
 */
#include "train_common.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t train_splitmix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

uint64_t train_draw(uint64_t seed, int64_t step, int64_t sample, uint64_t i)
{
    return train_splitmix64(train_splitmix64(train_splitmix64(seed) ^ (uint64_t)step) ^ ((uint64_t)sample << 20 | i));
}

int train_parse_policy(const char *s, train_policy *p)
{
    char *end = NULL;
    p->param = 0;
    if (!strcmp(s, "none")) p->kind = GPUCORE_CKPT_KEEP_ALL;
    else if (!strcmp(s, "all")) p->kind = GPUCORE_CKPT_RECOMPUTE_ALL;
    else if (!strcmp(s, "sqrt")) p->kind = GPUCORE_CKPT_SQRT_N;
    else if (!strncmp(s, "every:", 6) && (p->param = strtoll(s + 6, &end, 10)) >= 1 && !*end) p->kind = GPUCORE_CKPT_EVERY_K;
    else if (!strncmp(s, "budget:", 7) && (p->param = strtoll(s + 7, &end, 10)) > 0 && !*end) p->kind = GPUCORE_CKPT_BUDGET;
    else return 1;
    return 0;
}

int train_format_policy(gpucore_ckpt_policy kind, int64_t param, char *buf, size_t size)
{
    switch (kind) {
    case GPUCORE_CKPT_KEEP_ALL: snprintf(buf, size, "none"); return 0;
    case GPUCORE_CKPT_RECOMPUTE_ALL: snprintf(buf, size, "all"); return 0;
    case GPUCORE_CKPT_SQRT_N: snprintf(buf, size, "sqrt"); return 0;
    case GPUCORE_CKPT_EVERY_K: if (param < 1) return 1; snprintf(buf, size, "every:%lld", (long long)param); return 0;
    case GPUCORE_CKPT_BUDGET: if (param < 1) return 1; snprintf(buf, size, "budget:%lld", (long long)param); return 0;
    }
    return 1;
}

gpucore_status train_update_budget(gpucore_context *ctx, gpucore_ckpt *ck, const train_policy *p)
{
    if (p->kind != GPUCORE_CKPT_BUDGET) return GPUCORE_OK;
    gpucore_memory_stats ms;
    ms.struct_size = sizeof ms;
    gpucore_status st = gpucore_memory_get_stats(ctx, GPUCORE_MEMORY_DEVICE, &ms);
    return st ? st : gpucore_ckpt_set_policy(ck, GPUCORE_CKPT_BUDGET, ms.allocated_bytes + p->param);
}

double train_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

gpucore_status train_on_grad_ready(void *user, int64_t segment, const char *name, int32_t param, gpucore_tensor *grad,
                                   gpucore_stream *stream)
{
    (void)segment, (void)param;
    train_grad_router *r = user;
    for (int i = 0; i < r->count; i++)
        if (r->grads[i] == grad) return gpucore_ddp_mark_ready(r->ddp, i, stream);
    fprintf(stderr, "segment '%s' announced a gradient that is not the model's\n", name);
    return GPUCORE_ERR_INVALID_ARGUMENT;
}

gpucore_status train_track_peak(gpucore_context *ctx, gpucore_ckpt *ck, int64_t *peak_alloc, int64_t *peak_reserved)
{
    gpucore_ckpt_stats cs;
    cs.struct_size = sizeof cs;
    gpucore_memory_stats ms;
    ms.struct_size = sizeof ms;
    gpucore_status st = gpucore_ckpt_get_stats(ck, &cs);
    if (!st) st = gpucore_memory_get_stats(ctx, GPUCORE_MEMORY_DEVICE, &ms);
    if (st) return st;
    int64_t peak = cs.peak_allocated_bytes > ms.allocated_bytes_peak ? cs.peak_allocated_bytes : ms.allocated_bytes_peak;
    if (peak > *peak_alloc) *peak_alloc = peak;
    if (ms.reserved_bytes_peak > *peak_reserved) *peak_reserved = ms.reserved_bytes_peak;
    return GPUCORE_OK;
}

void train_print_profile(gpucore_context *ctx, int json)
{
    int64_t need = 0;
    if (gpucore_profiler_summary(ctx, json ? 1 : 0, NULL, 0, &need) != GPUCORE_OK) return;
    char *buf = malloc((size_t)need + 256);
    if (buf && gpucore_profiler_summary(ctx, json ? 1 : 0, buf, need + 256, NULL) == GPUCORE_OK) {
        if (json) printf("{\"profile\":%.*s}\n", (int)strcspn(buf, "\n"), buf);
        else printf("per-op profile (device time):\n%s", buf);
    }
    free(buf);
}

int train_open_world(const char *prog, const char *device, int ddp, int profile, int64_t batch, train_world *w)
{
    char dev[64];
    gpucore_status st;
    w->ctx = NULL, w->comm = NULL, w->rank = 0, w->size = 1;
    snprintf(dev, sizeof dev, "%s", device);
    const char *local_rank = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (ddp && local_rank && (!strcmp(dev, "cuda") || !strcmp(dev, "auto"))) {
        char why[512];
        if (gpucore_backend_available(GPUCORE_DEVICE_CUDA, why, sizeof why) == GPUCORE_OK)
            snprintf(dev, sizeof dev, "cuda:%s", local_rank);
    }
    if ((st = gpucore_context_create(dev, &w->ctx)) || (profile && (st = gpucore_profiler_enable(w->ctx, 1))) ||
        (ddp && (st = gpucore_comm_create_mpi(w->ctx, &w->comm)))) {
        fprintf(stderr, "%s: setting up device %s failed: %s: %s\n", prog, dev, gpucore_status_string(st),
                gpucore_last_error());
        return 1;
    }
    if (w->comm) {
        w->rank = gpucore_comm_rank(w->comm);
        w->size = gpucore_comm_size(w->comm);
        if (batch % w->size) {
            if (w->rank == 0) fprintf(stderr, "%s: --batch %lld does not split over %d ranks\n", prog, (long long)batch, w->size);
            return 2;
        }
    }
    return 0;
}
