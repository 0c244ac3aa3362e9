/*
 * bench_comm.c — allreduce bandwidth: libgpucore's collective and its DDP reducer,
 * side by side with MPI_Allreduce called directly on the same data, in one run.
 *
 *   mpirun --allow-run-as-root --oversubscribe -np 2 build/bench/bench_comm [--json] [--quick|--full] [--bytes N]
 *
 * algbw = bytes / time; busbw = algbw * 2(n-1)/n (nccl-tests' definition). Each
 * figure is the median over batches (after warm-up) of the wall time per call, the
 * ranks aligned by a barrier before each batch; ours and MPI take turns batch by
 * batch, so both see the same load on a shared machine. CPU backend (MPI transport); the
 * ncclAllReduce peer for CUDA is not written yet (the GPU machine has no MPI).
 * The reducer case registers 4 gradients that split the buffer, marks them ready and
 * finishes each iteration: copy in + pre-division + allreduce + copy back (finish
 * does not wait on the host: the synchronize of the caller's stream does). The
 * "ddp_view" case is the same reducer with the gradients as views into the buckets
 * (gpucore_ddp_grad_view): pre-division in place + allreduce, no copies.
 * The peer ("mpi" in the JSON rows) is a raw blocking MPI_Allreduce, in place, on
 * MPI_COMM_WORLD: the same ranks, measured in the same run. "mpi@t" is that call on
 * the tensor's own memory (the lib case's buffer), which tells a cost of the buffer
 * (its pages) from a cost of our path. Buffers hold zeros (sums stay finite), in
 * touched pages on both sides.
 * A second table times reduce-scatter (in: size x bytes, out: bytes) and all-gather
 * (in: bytes, out: size x bytes), ZeRO's two collectives, beside MPI_Reduce_scatter_block
 * and MPI_Allgather on the same buffers ("bytes" is one rank's share). --bytes N times
 * that size alone (a multiple of 4; for a profiler or a size between the rows).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "gpucore.h"

static int rank, size, json;
static int64_t only_bytes; /* --bytes N: that size alone */

/* The sizes timed: 8 B, x8 up to 4 KiB, then x4; or only_bytes alone. */
static int64_t first_size(void) { return only_bytes ? only_bytes : 8; }
static int64_t next_size(int64_t bytes) { return only_bytes ? INT64_MAX : bytes * (bytes < 4096 ? 8 : 4); }

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* n zero floats in pages of their own: calloc's untouched pages all map the one zero
 * page, which a peer that only reads them (MPI_Allgather's send buffer) would read from
 * cache instead of memory. explicit_bzero is not folded into the calloc. */
static float *host_zeros(int64_t n)
{
    float *p = malloc(sizeof(float) * (size_t)(n ? n : 1));
    if (!p) {
        fprintf(stderr, "bench_comm: out of host memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    explicit_bzero(p, sizeof(float) * (size_t)n);
    return p;
}

typedef void (*bench_fn)(void *arg);

/* Median seconds per call over `batches` batches of `iters` calls of each of the nf
 * functions (all ranks agree: max over ranks), into t[f]. The functions take turns
 * batch by batch, so ours and the peer see the same load on a shared machine. */
static void time_all(const bench_fn *fns, int nf, void *arg, int iters, int batches, double *t)
{
    double *all = malloc(sizeof(double) * (size_t)(batches * nf));
    for (int f = 0; f < nf; f++) fns[f](arg); /* warm-up */
    for (int b = 0; b < batches; b++)
        for (int f = 0; f < nf; f++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = now_s();
            for (int i = 0; i < iters; i++) fns[f](arg);
            double dt = (now_s() - t0) / iters, worst = 0;
            MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            all[f * batches + b] = worst;
        }
    for (int f = 0; f < nf; f++) {
        qsort(all + f * batches, (size_t)batches, sizeof *all, cmp_double);
        t[f] = all[f * batches + batches / 2];
    }
    free(all);
}

typedef struct state {
    gpucore_comm *comm;
    gpucore_tensor *t;
    gpucore_stream *stream;
    gpucore_ddp *ddp, *ddp_view;
    float *host;
    int64_t n;
    gpucore_tensor *big; /* size x n (the collectives table) */
    float *host_big;
} state;

static void run_lib(void *p)
{
    state *s = p;
    gpucore_comm_allreduce(s->comm, s->t, s->t, GPUCORE_REDUCE_SUM, s->stream);
    gpucore_stream_synchronize(s->stream);
}

static void run_ddp(void *p)
{
    state *s = p;
    for (int g = 3; g >= 0; g--) gpucore_ddp_mark_ready(s->ddp, g, s->stream);
    gpucore_ddp_finish(s->ddp, s->stream);
    gpucore_stream_synchronize(s->stream);
}

static void run_ddp_view(void *p)
{
    state *s = p;
    for (int g = 3; g >= 0; g--) gpucore_ddp_mark_ready(s->ddp_view, g, s->stream);
    gpucore_ddp_finish(s->ddp_view, s->stream);
    gpucore_stream_synchronize(s->stream);
}

static void run_mpi(void *p)
{
    state *s = p;
    MPI_Allreduce(MPI_IN_PLACE, s->host, (int)s->n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

static void run_mpi_t(void *p)
{
    state *s = p;
    void *d = NULL;
    gpucore_tensor_data(s->t, &d);
    MPI_Allreduce(MPI_IN_PLACE, d, (int)s->n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

static void emit(const char *cs, int64_t bytes, const char *metric, double v, const char *unit, double peer_v);

static void run_rs(void *p)
{
    state *s = p;
    gpucore_comm_reduce_scatter(s->comm, s->t, s->big, GPUCORE_REDUCE_SUM, s->stream);
    gpucore_stream_synchronize(s->stream);
}

static void run_ag(void *p)
{
    state *s = p;
    gpucore_comm_all_gather(s->comm, s->big, s->t, s->stream);
    gpucore_stream_synchronize(s->stream);
}

static void run_mpi_rs(void *p)
{
    state *s = p;
    MPI_Reduce_scatter_block(s->host_big, s->host, (int)s->n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

static void run_mpi_ag(void *p)
{
    state *s = p;
    MPI_Allgather(s->host, (int)s->n, MPI_FLOAT, s->host_big, (int)s->n, MPI_FLOAT, MPI_COMM_WORLD);
}

/* ZeRO's collectives beside MPI's blocking ones: time per call for each size. */
static void collectives_table(gpucore_context *ctx, gpucore_comm *comm, gpucore_stream *stream, int64_t max_bytes)
{
    if (!rank && !json)
        printf("\nreduce-scatter / all-gather f32, %d ranks, bytes per rank, median us per call\n"
               "%10s | %9s %9s %7s | %9s %9s %7s\n", size, "bytes", "rs us", "mpi us", "rs/mpi", "ag us", "mpi us",
               "ag/mpi");
    for (int64_t bytes = first_size(); bytes <= max_bytes / size; bytes = next_size(bytes)) {
        state s = {.comm = comm, .stream = stream, .n = bytes / 4};
        int64_t nb = s.n * size;
        gpucore_tensor_create(ctx, GPUCORE_F32, 1, &s.n, &s.t);
        gpucore_tensor_create(ctx, GPUCORE_F32, 1, &nb, &s.big);
        gpucore_fill(s.t, 0, stream);
        gpucore_fill(s.big, 0, stream);
        gpucore_stream_synchronize(stream);
        s.host = host_zeros(s.n);
        s.host_big = host_zeros(nb);
        int iters = bytes <= (1 << 16) ? 100 : bytes <= (4 << 20) ? 10 : 2;
        int batches = bytes <= (4 << 20) ? 15 : 5;
        const bench_fn fns[4] = {run_rs, run_mpi_rs, run_ag, run_mpi_ag};
        double t[4];
        time_all(fns, 4, &s, iters, batches, t);
        double t_rs = t[0], t_mrs = t[1], t_ag = t[2], t_mag = t[3];
        if (!rank && !json)
            printf("%10lld | %9.1f %9.1f %7.2f | %9.1f %9.1f %7.2f\n", (long long)bytes, t_rs * 1e6, t_mrs * 1e6,
                   t_mrs / t_rs, t_ag * 1e6, t_mag * 1e6, t_mag / t_ag);
        emit("reduce_scatter", bytes, "time_us", t_rs * 1e6, "us", t_mrs * 1e6);
        emit("all_gather", bytes, "time_us", t_ag * 1e6, "us", t_mag * 1e6);
        gpucore_tensor_destroy(s.t);
        gpucore_tensor_destroy(s.big);
        free(s.host);
        free(s.host_big);
    }
}

static void emit(const char *cs, int64_t bytes, const char *metric, double v, const char *unit, double peer_v)
{
    if (rank || !json) return;
    double speedup = !strcmp(metric, "time_us") ? peer_v / v : v / peer_v;
    printf("{\"bench\":\"comm\",\"case\":\"%s_%lldB_np%d\",\"device\":\"cpu\",\"metric\":\"%s\",\"value\":%.6g,"
           "\"unit\":\"%s\",\"peer\":\"mpi\",\"peer_value\":%.6g,\"speedup\":%.4f}\n",
           cs, (long long)bytes, size, metric, v, unit, peer_v, speedup);
}

int main(int argc, char **argv)
{
    int full = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--full")) full = 1;
        else if (!strcmp(argv[i], "--bytes") && i + 1 < argc) only_bytes = strtoll(argv[++i], NULL, 10) / 4 * 4;
    }
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    gpucore_context *ctx = NULL;
    gpucore_comm *comm = NULL;
    if (gpucore_context_create("cpu", &ctx) || gpucore_comm_create_mpi(ctx, &comm)) {
        fprintf(stderr, "bench_comm: %s\n", gpucore_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    gpucore_stream *stream = NULL;
    gpucore_stream_create(ctx, 0, &stream);
    int64_t max_bytes = full ? (int64_t)256 << 20 : (int64_t)64 << 20;
    double bus = size > 1 ? 2.0 * (size - 1) / size : 1.0;
    if (!rank && !json)
        printf("allreduce f32 sum, %d ranks (busbw = algbw x %.2f), median of batches, GB/s\n"
               "%10s | %9s %9s %9s %9s %9s | %9s %9s | %9s %9s | %7s %7s %7s\n", size, bus, "bytes", "lib us", "ddp us",
               "view us", "mpi us", "mpi@t us", "lib algbw", "lib busbw", "ddp busbw", "mpi busbw", "lib/mpi", "ddp/mpi",
               "view/mpi");
    for (int64_t bytes = first_size(); bytes <= max_bytes; bytes = next_size(bytes)) {
        state s = {.comm = comm, .stream = stream, .n = bytes / 4};
        gpucore_tensor_create(ctx, GPUCORE_F32, 1, &s.n, &s.t);
        gpucore_fill(s.t, 0, stream);
        s.host = host_zeros(s.n);
        /* the reducer over 4 gradients that split the buffer (sizes differ by at most one element) */
        gpucore_tensor *grads[4], *vgrads[4], *views[4];
        for (int g = 0; g < 4; g++) {
            int64_t gn = s.n / 4 + (g < s.n % 4);
            if (gn == 0) gn = 1;
            gpucore_tensor_create(ctx, GPUCORE_F32, 1, &gn, &grads[g]);
            gpucore_tensor_create(ctx, GPUCORE_F32, 1, &gn, &vgrads[g]);
            gpucore_fill(grads[g], 1, stream);
            gpucore_fill(vgrads[g], 1, stream);
        }
        gpucore_stream_synchronize(stream);
        gpucore_ddp_create(comm, grads, 4, NULL, &s.ddp);
        gpucore_ddp_create(comm, vgrads, 4, NULL, &s.ddp_view);
        for (int g = 0; g < 4; g++) gpucore_ddp_grad_view(s.ddp_view, g, &views[g]);
        int iters = bytes <= (1 << 16) ? 100 : bytes <= (4 << 20) ? 10 : 2;
        int batches = bytes <= (4 << 20) ? 15 : 5;
        const bench_fn fns[5] = {run_lib, run_ddp, run_ddp_view, run_mpi, run_mpi_t};
        double t[5];
        time_all(fns, 5, &s, iters, batches, t);
        double t_lib = t[0], t_ddp = t[1], t_view = t[2], t_mpi = t[3], t_mpi_t = t[4];
        double alg_lib = bytes / t_lib * 1e-9, alg_ddp = bytes / t_ddp * 1e-9, alg_mpi = bytes / t_mpi * 1e-9;
        double alg_view = bytes / t_view * 1e-9;
        if (!rank && !json)
            printf("%10lld | %9.1f %9.1f %9.1f %9.1f %9.1f | %9.3f %9.3f | %9.3f %9.3f | %7.2f %7.2f %7.2f\n",
                   (long long)bytes, t_lib * 1e6, t_ddp * 1e6, t_view * 1e6, t_mpi * 1e6, t_mpi_t * 1e6, alg_lib, alg_lib * bus,
                   alg_ddp * bus, alg_mpi * bus, t_mpi / t_lib, t_mpi / t_ddp, t_mpi / t_view);
        emit("allreduce", bytes, "busbw", alg_lib * bus, "GB/s", alg_mpi * bus);
        emit("allreduce", bytes, "time_us", t_lib * 1e6, "us", t_mpi * 1e6);
        emit("ddp_reducer", bytes, "busbw", alg_ddp * bus, "GB/s", alg_mpi * bus);
        emit("ddp_reducer", bytes, "time_us", t_ddp * 1e6, "us", t_mpi * 1e6);
        emit("ddp_view", bytes, "busbw", alg_view * bus, "GB/s", alg_mpi * bus);
        emit("ddp_view", bytes, "time_us", t_view * 1e6, "us", t_mpi * 1e6);
        gpucore_ddp_destroy(s.ddp);
        for (int g = 0; g < 4; g++) gpucore_tensor_destroy(views[g]);
        gpucore_ddp_destroy(s.ddp_view);
        for (int g = 0; g < 4; g++) {
            gpucore_tensor_destroy(grads[g]);
            gpucore_tensor_destroy(vgrads[g]);
        }
        gpucore_tensor_destroy(s.t);
        free(s.host);
    }
    collectives_table(ctx, comm, stream, max_bytes);
    if (!rank && !json) fflush(stdout);
    gpucore_stream_destroy(stream);
    gpucore_comm_destroy(comm);
    gpucore_context_destroy(ctx);
    MPI_Finalize();
    return 0;
}
