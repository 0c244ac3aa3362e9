/*
 * bench_alloc.c — the caching allocator's speed.
 *
 * Cases:
 *   pair_<size>            cache-hit gpucore_device_alloc + gpucore_device_free pair, p50 and p99
 *                          (each sample times 8 consecutive pairs and divides, to keep timer overhead out)
 *   pair_1KiB_live_<N>     the same 1 KiB pair with N live blocks around it, and about N free holes in
 *                          the free tree (2N blocks allocated, every other one freed): flat = O(log n)
 *   random_workload        RMM-style random allocations: uniform sizes in [1, 1 MiB], 73% allocate
 *                          steps (else free a random live block; a free too when live bytes would pass
 *                          1 GiB), ns per step
 *   tensor_pair_1KiB       the whole tensor_create + tensor_destroy pair, for scale
 * Peer, timed in the same run on the same sizes: malloc/free on the CPU backend; on a GPU, the
 * backend's raw allocation through this allocator with caching off (cudaMalloc/cudaFree).
 *
 *   bench_alloc [--json] [--quick | --full] [--device cpu|cuda]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "gpucore.h"

#define KiB ((int64_t)1 << 10)
#define MiB ((int64_t)1 << 20)
#define BATCH 8

static int json;
static const char *device = "cpu";
static int device_is_cpu = 1;

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void die(const char *what)
{
    fprintf(stderr, "bench_alloc: %s: %s\n", what, gpucore_last_error());
    exit(1);
}

static void report(const char *cas, const char *metric, double value, const char *unit, const char *peer,
                   double peer_value)
{
    double speedup = peer_value > 0 && value > 0 ? peer_value / value : 0;
    if (json) {
        printf("{\"bench\":\"alloc\",\"case\":\"%s\",\"device\":\"%s\",\"metric\":\"%s\",\"value\":%.1f,\"unit\":\"%s\"",
               cas, device, metric, value, unit);
        if (peer) printf(",\"peer\":\"%s\",\"peer_value\":%.1f,\"speedup\":%.2f", peer, peer_value, speedup);
        printf("}\n");
    } else {
        printf("%-24s %-5s %12.1f %-3s", cas, metric, value, unit);
        if (peer) printf("   %-18s %12.1f %-3s  speedup %6.2fx", peer, peer_value, unit, speedup);
        printf("\n");
    }
}

/* p50 and p99 of `samples` timed batches of alloc+free pairs, ns per pair. */
typedef struct pair_result { double p50, p99; } pair_result;

static pair_result pair_ours(gpucore_context *ctx, int64_t bytes, int samples)
{
    double *t = malloc(sizeof(double) * (size_t)samples);
    void *p;
    for (int i = 0; i < 1000; i++) { /* warm-up: the block is cached after the first pair */
        if (gpucore_device_alloc(ctx, bytes, NULL, &p)) die("device_alloc");
        gpucore_device_free(ctx, p);
    }
    for (int s = 0; s < samples; s++) {
        double t0 = now_ns();
        for (int k = 0; k < BATCH; k++) {
            if (gpucore_device_alloc(ctx, bytes, NULL, &p)) die("device_alloc");
            gpucore_device_free(ctx, p);
        }
        t[s] = (now_ns() - t0) / BATCH;
    }
    qsort(t, (size_t)samples, sizeof *t, cmp_double);
    pair_result r = {t[samples / 2], t[samples * 99 / 100]};
    free(t);
    return r;
}

static pair_result pair_malloc(int64_t bytes, int samples)
{
    double *t = malloc(sizeof(double) * (size_t)samples);
    for (int i = 0; i < 1000; i++) {
        void *volatile p = malloc((size_t)bytes);
        free(p);
    }
    for (int s = 0; s < samples; s++) {
        double t0 = now_ns();
        for (int k = 0; k < BATCH; k++) {
            void *volatile p = malloc((size_t)bytes);
            free(p);
        }
        t[s] = (now_ns() - t0) / BATCH;
    }
    qsort(t, (size_t)samples, sizeof *t, cmp_double);
    pair_result r = {t[samples / 2], t[samples * 99 / 100]};
    free(t);
    return r;
}

/* The peer: malloc on the CPU; the backend's raw allocation (caching off) elsewhere. */
static pair_result pair_peer(gpucore_context *raw_ctx, int64_t bytes, int samples)
{
    if (device_is_cpu) return pair_malloc(bytes, samples);
    return pair_ours(raw_ctx, bytes, samples < 200 ? samples : 200);
}

static void print_pair(const char *cas, pair_result ours, pair_result peer)
{
    const char *pname = device_is_cpu ? "malloc/free" : "backend raw (no cache)";
    report(cas, "p50", ours.p50, "ns", pname, peer.p50);
    report(cas, "p99", ours.p99, "ns", pname, peer.p99);
}

/* RMM-style random workload; returns ns per step. */
static double random_workload(gpucore_context *ctx, int use_malloc, int steps)
{
    enum { MAX_LIVE = 1 << 16 };
    static void *live[MAX_LIVE];
    static int64_t live_size[MAX_LIVE];
    int nlive = 0;
    int64_t live_bytes = 0, cap = 1024 * MiB;
    rng_state = 0x2545F4914F6CDD1Dull;
    double t0 = now_ns();
    for (int s = 0; s < steps; s++) {
        int64_t size = (int64_t)(rng() % (uint64_t)MiB) + 1;
        int alloc = rng() % 100 < 73 && nlive < MAX_LIVE && live_bytes + size <= cap;
        if (alloc || nlive == 0) {
            void *p;
            if (use_malloc) {
                p = malloc((size_t)size);
                if (!p) die("malloc");
            } else if (gpucore_device_alloc(ctx, size, NULL, &p)) {
                die("device_alloc");
            }
            live[nlive] = p;
            live_size[nlive++] = size;
            live_bytes += size;
        } else {
            int i = (int)(rng() % (uint64_t)nlive);
            if (use_malloc) free(live[i]);
            else gpucore_device_free(ctx, live[i]);
            live_bytes -= live_size[i];
            live[i] = live[--nlive];
            live_size[i] = live_size[nlive];
        }
    }
    for (int i = 0; i < nlive; i++) {
        if (use_malloc) free(live[i]);
        else gpucore_device_free(ctx, live[i]);
    }
    return (now_ns() - t0) / steps;
}

int main(int argc, char **argv)
{
    int full = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--full")) full = 1;
        else if (!strcmp(argv[i], "--quick")) full = 0;
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
        else {
            fprintf(stderr, "usage: bench_alloc [--json] [--quick | --full] [--device cpu|cuda|cuda:N]\n");
            return 2;
        }
    }
    gpucore_context *ctx = NULL, *raw_ctx = NULL;
    if (gpucore_context_create(device, &ctx)) die("context_create");
    device = gpucore_context_device_name(ctx);
    device_is_cpu = !strcmp(device, "cpu");
    if (!device_is_cpu) {
        if (gpucore_context_create(device, &raw_ctx) || gpucore_memory_set_caching(raw_ctx, GPUCORE_MEMORY_DEVICE, 0))
            die("context_create (peer)");
    }
    int samples = full ? 200000 : 20000;
    if (!json) {
        printf("caching allocator on %s: cache-hit alloc+free pair (ns per pair, %d samples of %d pairs)\n", device,
               samples, BATCH);
        printf("%-24s %-5s %12s %-3s   %-18s %12s\n", "case", "stat", "libgpucore", "", "peer", "peer");
    }
    static const struct { const char *name; int64_t bytes; } sizes[] = {
        {"pair_1KiB", KiB}, {"pair_1MiB", MiB}, {"pair_64MiB", 64 * MiB}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        print_pair(sizes[i].name, pair_ours(ctx, sizes[i].bytes, samples), pair_peer(raw_ctx, sizes[i].bytes, samples));

    /* live blocks: allocate 2N of mixed small sizes, free every other one */
    static const int lives[] = {1000, 10000, 100000};
    for (size_t li = 0; li < 3; li++) {
        int n = lives[li];
        void **blocks = malloc(sizeof(void *) * (size_t)(2 * n));
        void **mblocks = malloc(sizeof(void *) * (size_t)(2 * n));
        rng_state = 12345;
        for (int i = 0; i < 2 * n; i++) {
            int64_t sz = (int64_t)(rng() % (8 * KiB)) + 1;
            if (gpucore_device_alloc(ctx, sz, NULL, &blocks[i])) die("device_alloc");
            mblocks[i] = malloc((size_t)sz);
        }
        for (int i = 0; i < 2 * n; i += 2) {
            gpucore_device_free(ctx, blocks[i]);
            free(mblocks[i]);
        }
        char name[64];
        snprintf(name, sizeof name, "pair_1KiB_live_%dk", n / 1000);
        print_pair(name, pair_ours(ctx, KiB, samples), device_is_cpu ? pair_malloc(KiB, samples) : pair_peer(raw_ctx, KiB, samples));
        for (int i = 1; i < 2 * n; i += 2) {
            gpucore_device_free(ctx, blocks[i]);
            free(mblocks[i]);
        }
        free(blocks);
        free(mblocks);
    }

    int steps = full ? 1000000 : 100000;
    random_workload(ctx, 0, steps / 10); /* warm the cache */
    double ours = random_workload(ctx, 0, steps);
    double peer = device_is_cpu ? random_workload(NULL, 1, steps) : random_workload(raw_ctx, 0, steps / 20);
    report("random_workload", "mean", ours, "ns", device_is_cpu ? "malloc/free" : "backend raw (no cache)", peer);

    /* the full tensor path, for scale (no peer) */
    {
        int64_t shape[1] = {256};
        double *t = malloc(sizeof(double) * (size_t)samples);
        for (int s = 0; s < samples; s++) {
            double t0 = now_ns();
            for (int k = 0; k < BATCH; k++) {
                gpucore_tensor *x = NULL;
                if (gpucore_tensor_create(ctx, GPUCORE_F32, 1, shape, &x)) die("tensor_create");
                gpucore_tensor_destroy(x);
            }
            t[s] = (now_ns() - t0) / BATCH;
        }
        qsort(t, (size_t)samples, sizeof *t, cmp_double);
        report("tensor_pair_1KiB", "p50", t[samples / 2], "ns", NULL, 0);
        free(t);
    }
    gpucore_memory_stats st = {.struct_size = sizeof st};
    gpucore_memory_get_stats(ctx, GPUCORE_MEMORY_DEVICE, &st);
    if (!json)
        printf("allocator: %lld raw allocations, peak reserved %.1f MiB, peak allocated %.1f MiB\n",
               (long long)st.num_raw_allocs, (double)st.reserved_bytes_peak / MiB, (double)st.allocated_bytes_peak / MiB);
    gpucore_context_destroy(raw_ctx);
    gpucore_context_destroy(ctx);
    return 0;
}
