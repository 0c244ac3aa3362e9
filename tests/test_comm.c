/*
 * test_comm.c — communicators and collectives.
 *
 *   test_comm local        no MPI needed: a 1-rank communicator on every backend
 *                          present (CPU; CUDA = a 1-rank NCCL communicator) runs every
 *                          collective, plus bad-input checks.
 *   test_comm mpi          under mpirun -np N (CPU backend, MPI transport): every
 *                          collective x dtype x op x size (1, odd, non-power-of-two,
 *                          multi-MiB) x in/out of place against a host reference on
 *                          integer-valued data, exactly; every rank holds identical bits.
 *   test_comm stall|exit   failure injection under mpirun: the last rank stalls (or
 *                          exits) instead of joining a collective; the others must end
 *                          with GPUCORE_ERR_COMM within the timeout (then MPI_Abort).
 *                          tests/comm_failure.sh bounds the job's time.
 */
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include "check.h"
#include "numeric.h"
#ifdef TEST_HAVE_MPI
#include <mpi.h>
#endif

static const gpucore_dtype dtypes[] = {GPUCORE_F32, GPUCORE_F64, GPUCORE_F16, GPUCORE_BF16, GPUCORE_I32};
static const char *op_names[] = {"sum", "avg", "max", "min"};
static int g_rank, g_size;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Integer-valued test data in -8..8: exact in every dtype, sums of <= 16 ranks too. */
static int value(int rank, int64_t i, int salt) { return (int)((i * 7 + rank * 13 + salt * 5) % 17) - 8; }

static void put(void *buf, gpucore_dtype dt, int64_t i, double v)
{
    switch (dt) {
    case GPUCORE_F32: ((float *)buf)[i] = (float)v; break;
    case GPUCORE_F64: ((double *)buf)[i] = v; break;
    case GPUCORE_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case GPUCORE_F16: ((uint16_t *)buf)[i] = gpucore_f32_to_f16((float)v); break;
    case GPUCORE_BF16: ((uint16_t *)buf)[i] = gpucore_f32_to_bf16((float)v); break;
    default: break;
    }
}

static double get(const void *buf, gpucore_dtype dt, int64_t i)
{
    switch (dt) {
    case GPUCORE_F32: return ((const float *)buf)[i];
    case GPUCORE_F64: return ((const double *)buf)[i];
    case GPUCORE_I32: return ((const int32_t *)buf)[i];
    case GPUCORE_F16: return gpucore_f16_to_f32(((const uint16_t *)buf)[i]);
    case GPUCORE_BF16: return gpucore_bf16_to_f32(((const uint16_t *)buf)[i]);
    default: return 0;
    }
}

/* The reference reduction of value(r, i, salt) over ranks, in the dtype's arithmetic
 * (AVG: the exact integer sum divided in f32 / f64 / integer division, then rounded). */
static double reduce_ref(gpucore_dtype dt, int op, int64_t i, int salt, int size)
{
    int sum = 0, mx = -1000, mn = 1000;
    for (int r = 0; r < size; r++) {
        int v = value(r, i, salt);
        sum += v;
        mx = v > mx ? v : mx;
        mn = v < mn ? v : mn;
    }
    if (op == 2) return mx;
    if (op == 3) return mn;
    if (op == 0) return sum;
    switch (dt) {
    case GPUCORE_F64: return (double)sum / size;
    case GPUCORE_I32: return sum / size;
    case GPUCORE_F32: return (float)sum / (float)size;
    case GPUCORE_F16: return gpucore_f16_to_f32(gpucore_f32_to_f16((float)sum / (float)size));
    default: return gpucore_bf16_to_f32(gpucore_f32_to_bf16((float)sum / (float)size));
    }
}

static uint64_t fnv(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

/* Every rank holds the same bytes (checked with MPI directly, not with the code under test). */
static int same_on_all_ranks(const void *p, size_t n)
{
#ifdef TEST_HAVE_MPI
    if (g_size > 1) {
        uint64_t h = fnv(p, n), lo = 0, hi = 0;
        MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
        return lo == hi;
    }
#endif
    (void)fnv(p, n);
    return 1;
}

static gpucore_tensor *make(gpucore_context *ctx, gpucore_dtype dt, int64_t n)
{
    gpucore_tensor *t = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, dt, 1, &n, &t));
    return t;
}

/* Fill t (n elements) with value(rank, base + i, salt). */
static void upload(gpucore_tensor *t, gpucore_dtype dt, int64_t n, int rank, int64_t base, int salt, void *host)
{
    for (int64_t i = 0; i < n; i++) put(host, dt, i, value(rank, base + i, salt));
    CHECK_OK(gpucore_copy_from_host(t, host, n * gpucore_dtype_size(dt)));
}

static void poison(gpucore_tensor *t) { CHECK_OK(gpucore_fill(t, 99, NULL)); }

static int64_t mismatches;
static void expect(const void *host, gpucore_dtype dt, int64_t i, double want)
{
    double got = get(host, dt, i);
    if (got != want) {
        if (mismatches++ < 5)
            fprintf(stderr, "rank %d: element %lld is %g, want %g\n", g_rank, (long long)i, got, want);
    }
}

/* Run every collective on comm for one dtype and per-rank count. */
static void run_collectives(gpucore_comm *comm, gpucore_context *ctx, gpucore_dtype dt, int64_t n)
{
    int rank = gpucore_comm_rank(comm), size = gpucore_comm_size(comm);
    int64_t es = gpucore_dtype_size(dt), big = n * size;
    void *host = malloc((size_t)(big * es)), *out_host = malloc((size_t)(big * es));
    gpucore_tensor *in = make(ctx, dt, big), *out = make(ctx, dt, big), *in_n = NULL, *out_n = NULL;
    CHECK_OK(gpucore_tensor_slice(in, 0, 0, n, 1, &in_n));
    CHECK_OK(gpucore_tensor_slice(out, 0, 0, n, 1, &out_n));
    const int64_t before = check_failed;
    mismatches = 0;

    for (int op = 0; op < 4; op++) {
        for (int in_place = 0; in_place < 2; in_place++) {
            int salt = op * 2 + in_place;
            /* allreduce */
            upload(in_n, dt, n, rank, 0, salt, host);
            gpucore_tensor *dst = in_place ? in_n : out_n;
            if (!in_place) poison(out_n);
            CHECK_OK(gpucore_comm_allreduce(comm, dst, in_n, (gpucore_reduce_op)op, NULL));
            CHECK_OK(gpucore_copy_to_host(out_host, n * es, dst));
            for (int64_t i = 0; i < n; i++) expect(out_host, dt, i, reduce_ref(dt, op, i, salt, size));
            CHECK(same_on_all_ranks(out_host, (size_t)(n * es)));
            /* reduce-scatter: in holds size*n; out is this rank's n */
            upload(in, dt, big, rank, 0, salt, host);
            gpucore_tensor *slice = NULL;
            if (in_place) CHECK_OK(gpucore_tensor_slice(in, 0, rank * n, (rank + 1) * n, 1, &slice));
            else poison(out_n);
            dst = in_place ? slice : out_n;
            CHECK_OK(gpucore_comm_reduce_scatter(comm, dst, in, (gpucore_reduce_op)op, NULL));
            CHECK_OK(gpucore_copy_to_host(out_host, n * es, dst));
            for (int64_t i = 0; i < n; i++) expect(out_host, dt, i, reduce_ref(dt, op, rank * n + i, salt, size));
            gpucore_tensor_destroy(slice);
        }
    }
    for (int in_place = 0; in_place < 2; in_place++) {
        /* all-gather: out holds size*n */
        poison(out);
        gpucore_tensor *src = NULL;
        if (in_place) {
            CHECK_OK(gpucore_tensor_slice(out, 0, rank * n, (rank + 1) * n, 1, &src));
            upload(src, dt, n, rank, 0, 20, host);
        } else {
            upload(in_n, dt, n, rank, 0, 20, host);
        }
        CHECK_OK(gpucore_comm_all_gather(comm, out, in_place ? src : in_n, NULL));
        CHECK_OK(gpucore_copy_to_host(out_host, big * es, out));
        for (int r = 0; r < size; r++)
            for (int64_t i = 0; i < n; i++) expect(out_host, dt, r * n + i, value(r, i, 20));
        CHECK(same_on_all_ranks(out_host, (size_t)(big * es)));
        gpucore_tensor_destroy(src);
        /* broadcast from the last rank and from rank 0; non-roots pass NULL or in place */
        for (int root = size - 1; root >= 0; root -= (size > 1 ? size - 1 : 1)) {
            upload(in_n, dt, n, rank, 0, 21 + root, host);
            if (in_place) {
                CHECK_OK(gpucore_comm_broadcast(comm, in_n, in_n, root, NULL));
                CHECK_OK(gpucore_copy_to_host(out_host, n * es, in_n));
            } else {
                poison(out_n);
                CHECK_OK(gpucore_comm_broadcast(comm, out_n, rank == root ? in_n : NULL, root, NULL));
                CHECK_OK(gpucore_copy_to_host(out_host, n * es, out_n));
            }
            for (int64_t i = 0; i < n; i++) expect(out_host, dt, i, value(root, i, 21 + root));
            if (root == 0) break;
        }
    }
    CHECK_OK(gpucore_comm_barrier(comm, NULL));
    CHECK(mismatches == 0);
    if (check_failed != before)
        fprintf(stderr, "rank %d: failures in %s count %lld\n", rank, gpucore_dtype_name(dt), (long long)n);
    gpucore_tensor_destroy(in_n);
    gpucore_tensor_destroy(out_n);
    gpucore_tensor_destroy(in);
    gpucore_tensor_destroy(out);
    free(host);
    free(out_host);
}

static void run_matrix(gpucore_comm *comm, gpucore_context *ctx, int with_big)
{
    for (size_t d = 0; d < sizeof dtypes / sizeof *dtypes; d++) {
        int64_t es = gpucore_dtype_size(dtypes[d]);
        /* 1, odd, non-power-of-two, 2 ranks' ring of eager halves (f32 1500, f64 1000), multi-MiB (odd) */
        int64_t sizes[] = {1, 7, 1000, 1500, (3 << 20) / es + 5};
        int nsizes = with_big ? 5 : 4;
        for (int s = 0; s < nsizes; s++) {
            double t0 = now_s();
            run_collectives(comm, ctx, dtypes[d], sizes[s]);
            if (g_rank == 0)
                printf("  %-4s count %8lld: 4 ops x allreduce/reduce_scatter, all_gather, broadcast, in and out of "
                       "place: %.3f s\n", gpucore_dtype_name(dtypes[d]), (long long)sizes[s], now_s() - t0);
        }
    }
    (void)op_names;
}

/* Bad input: each returns a documented status with a message. */
/* Collectives issued from two streams must start in issue order on every rank, also
 * where they run on the caller's stream (the CPU backend): rank 0's first collective
 * waits behind slow work on stream a while its second, on stream b, is ready at once;
 * the other ranks have no slow work. Started out of order, rank 0 would pair its
 * second collective with the others' first (different counts: wrong sums, or MPI's
 * truncation error). Also the comm stream, asked for afterwards, follows both. */
static void order_across_streams(gpucore_comm *comm, gpucore_context *ctx)
{
    const int64_t nx = 1000, ny = 5003, gate_n = (int64_t)1 << 22;
    gpucore_stream *a = NULL, *b = NULL, *cs = NULL;
    gpucore_tensor *x = NULL, *y = NULL, *z = NULL, *gate = NULL;
    CHECK_OK(gpucore_stream_create(ctx, 0, &a));
    CHECK_OK(gpucore_stream_create(ctx, 0, &b));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &nx, &x));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &ny, &y));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &ny, &z));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &gate_n, &gate));
    if (!a || !b || !x || !y || !z || !gate) return;
    float *h = malloc(sizeof(float) * (size_t)ny);
    for (int round = 0; round < 3; round++) {
        for (int64_t i = 0; i < ny; i++) h[i] = (float)value(g_rank, i, round);
        CHECK_OK(gpucore_copy_from_host(x, h, nx * 4));
        CHECK_OK(gpucore_copy_from_host(y, h, ny * 4));
        if (g_rank == 0 && g_size > 1)
            for (int k = 0; k < 3; k++) CHECK_OK(gpucore_random(gate, GPUCORE_NORMAL, 0, 1, 5, (uint64_t)k, a));
        CHECK_OK(gpucore_comm_allreduce(comm, x, x, GPUCORE_REDUCE_SUM, a));
        CHECK_OK(gpucore_comm_allreduce(comm, y, y, GPUCORE_REDUCE_SUM, b));
        CHECK_OK(gpucore_comm_stream(comm, &cs));
        CHECK_OK(gpucore_copy(z, y, cs)); /* ordered after both collectives */
        CHECK_OK(gpucore_stream_synchronize(cs));
        CHECK_OK(gpucore_stream_synchronize(a));
        CHECK_OK(gpucore_stream_synchronize(b));
        int ok = 1;
        CHECK_OK(gpucore_copy_to_host(h, nx * 4, x));
        for (int64_t i = 0; i < nx && ok; i++) ok = h[i] == (float)reduce_ref(GPUCORE_F32, 0, i, round, g_size);
        CHECK_OK(gpucore_copy_to_host(h, ny * 4, y));
        for (int64_t i = 0; i < ny && ok; i++) ok = h[i] == (float)reduce_ref(GPUCORE_F32, 0, i, round, g_size);
        CHECK_OK(gpucore_copy_to_host(h, ny * 4, z));
        for (int64_t i = 0; i < ny && ok; i++) ok = h[i] == (float)reduce_ref(GPUCORE_F32, 0, i, round, g_size);
        CHECK(ok);
    }
    free(h);
    gpucore_tensor_destroy(x);
    gpucore_tensor_destroy(y);
    gpucore_tensor_destroy(z);
    gpucore_tensor_destroy(gate);
    CHECK_OK(gpucore_stream_destroy(a));
    CHECK_OK(gpucore_stream_destroy(b));
}

/* Collectives on the caller's stream are left for a synchronizing caller to run (CPU
 * backend: cpu_stream_enqueue_for_caller); stream order, events and progress stay as for
 * any task; out of place, so a 1-rank collective run too early reads stale input. (1)
 * Behind slow work on the same stream: the collective sees the fill queued before it. (2) Behind an event from another stream, and waited for only through an
 * event on a third stream (no synchronize of its own stream). (3) Queued and never
 * waited for: it still completes on its own (the worker takes it after its window), so
 * a first query long after finds the stream idle. */
static void left_for_caller(gpucore_comm *comm, gpucore_context *ctx)
{
    const int64_t n = 4099, gate_n = (int64_t)1 << 21;
    gpucore_stream *a = NULL, *b = NULL, *c = NULL;
    gpucore_tensor *x = NULL, *xo = NULL, *y = NULL, *yo = NULL, *z = NULL, *gate = NULL, *gate2 = NULL;
    gpucore_event *eb = NULL, *ea = NULL;
    CHECK_OK(gpucore_stream_create(ctx, 0, &a));
    CHECK_OK(gpucore_stream_create(ctx, 0, &b));
    CHECK_OK(gpucore_stream_create(ctx, 0, &c));
    CHECK_OK(gpucore_event_create(ctx, &ea));
    CHECK_OK(gpucore_event_create(ctx, &eb));
    x = make(ctx, GPUCORE_F32, n);
    xo = make(ctx, GPUCORE_F32, n);
    y = make(ctx, GPUCORE_F32, n);
    yo = make(ctx, GPUCORE_F32, n);
    z = make(ctx, GPUCORE_F32, n);
    gate = make(ctx, GPUCORE_F32, gate_n);
    gate2 = make(ctx, GPUCORE_F32, gate_n);
    if (!a || !b || !c || !ea || !eb || !x || !xo || !y || !yo || !z || !gate || !gate2) return;
    float *h = malloc(sizeof(float) * (size_t)n);
    for (int round = 0; round < 3; round++) {
        CHECK_OK(gpucore_fill(x, 99, a)); /* poison, each on the stream that writes it next */
        CHECK_OK(gpucore_fill(xo, 99, a));
        CHECK_OK(gpucore_fill(y, 99, b));
        CHECK_OK(gpucore_fill(yo, 99, a));
        CHECK_OK(gpucore_fill(z, 99, c));
        /* (1) slow work, then the fill the collective must see, on one stream */
        for (int k = 0; k < 3; k++) CHECK_OK(gpucore_random(gate, GPUCORE_NORMAL, 0, 1, 7, (uint64_t)k, a));
        CHECK_OK(gpucore_fill(x, 3 + round, a));
        CHECK_OK(gpucore_comm_allreduce(comm, xo, x, GPUCORE_REDUCE_SUM, a));
        CHECK_OK(gpucore_stream_synchronize(a));
        CHECK_OK(gpucore_copy_to_host(h, n * 4, xo));
        int ok = 1;
        for (int64_t i = 0; i < n && ok; i++) ok = h[i] == (float)((3 + round) * g_size);
        CHECK(ok);
        /* (2) the input comes from stream b through an event; the result leaves through one */
        for (int k = 0; k < 3; k++) CHECK_OK(gpucore_random(gate2, GPUCORE_NORMAL, 0, 1, 9, (uint64_t)k, b));
        CHECK_OK(gpucore_fill(y, 5 + round, b));
        CHECK_OK(gpucore_event_record(eb, b));
        CHECK_OK(gpucore_stream_wait_event(a, eb));
        CHECK_OK(gpucore_comm_allreduce(comm, yo, y, GPUCORE_REDUCE_SUM, a));
        CHECK_OK(gpucore_event_record(ea, a));
        CHECK_OK(gpucore_stream_wait_event(c, ea));
        CHECK_OK(gpucore_copy(z, yo, c));
        CHECK_OK(gpucore_stream_synchronize(c));
        CHECK_OK(gpucore_copy_to_host(h, n * 4, z));
        ok = 1;
        for (int64_t i = 0; i < n && ok; i++) ok = h[i] == (float)((5 + round) * g_size);
        CHECK(ok);
        CHECK_OK(gpucore_stream_synchronize(a));
        CHECK_OK(gpucore_stream_synchronize(b));
        /* (3) never waited for: done on its own well within 200 ms */
        CHECK_OK(gpucore_comm_allreduce(comm, xo, x, GPUCORE_REDUCE_SUM, a));
        struct timespec nap = {0, 200000000L};
        nanosleep(&nap, NULL);
        CHECK_OK(gpucore_stream_query(a));
        CHECK_OK(gpucore_stream_synchronize(a));
    }
    free(h);
    gpucore_tensor_destroy(x);
    gpucore_tensor_destroy(xo);
    gpucore_tensor_destroy(y);
    gpucore_tensor_destroy(yo);
    gpucore_tensor_destroy(z);
    gpucore_tensor_destroy(gate);
    gpucore_tensor_destroy(gate2);
    gpucore_event_destroy(ea);
    gpucore_event_destroy(eb);
    CHECK_OK(gpucore_stream_destroy(a));
    CHECK_OK(gpucore_stream_destroy(b));
    CHECK_OK(gpucore_stream_destroy(c));
}

static void bad_input(gpucore_comm *comm, gpucore_context *ctx)
{
    gpucore_tensor *a = make(ctx, GPUCORE_F32, 8), *b = make(ctx, GPUCORE_F32, 9), *c = make(ctx, GPUCORE_I64, 8);
    gpucore_tensor *t2 = NULL, *strided = NULL;
    int64_t shape2[2] = {4, 2};
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, shape2, &t2));
    CHECK_OK(gpucore_tensor_transpose(t2, 0, 1, &strided));
    CHECK_STATUS(gpucore_comm_allreduce(NULL, a, a, GPUCORE_REDUCE_SUM, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_comm_allreduce(comm, NULL, a, GPUCORE_REDUCE_SUM, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_comm_allreduce(comm, a, b, GPUCORE_REDUCE_SUM, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_comm_allreduce(comm, c, c, GPUCORE_REDUCE_SUM, NULL), GPUCORE_ERR_DTYPE_MISMATCH);
    CHECK_STATUS(gpucore_comm_allreduce(comm, a, a, (gpucore_reduce_op)7, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_comm_allreduce(comm, strided, strided, GPUCORE_REDUCE_SUM, NULL), GPUCORE_ERR_NOT_CONTIGUOUS);
    CHECK_STATUS(gpucore_comm_broadcast(comm, a, a, 99, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_comm_all_gather(comm, a, a, NULL),
                 gpucore_comm_size(comm) == 1 ? GPUCORE_OK : GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_comm_set_timeout(comm, -1), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_comm_wait(comm, gpucore_comm_last_sequence(comm) + 5, 1), GPUCORE_ERR_INVALID_ARGUMENT);
    gpucore_tensor *over = NULL;
    CHECK_OK(gpucore_tensor_slice(b, 0, 1, 9, 1, &over)); /* overlaps b's first 8 elements shifted by one */
    gpucore_tensor *b8 = NULL;
    CHECK_OK(gpucore_tensor_slice(b, 0, 0, 8, 1, &b8));
    CHECK_STATUS(gpucore_comm_allreduce(comm, over, b8, GPUCORE_REDUCE_SUM, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK(gpucore_comm_rank(NULL) == -1);
    char id[GPUCORE_COMM_ID_BYTES];
    memset(id, 0, sizeof id);
    gpucore_comm *dummy = NULL;
    gpucore_context *cctx = NULL;
    CHECK_OK(gpucore_comm_context(comm, &cctx));
    if (cctx && gpucore_context_device_name(cctx)[0] == 'c' && gpucore_context_device_name(cctx)[1] == 'p') {
        CHECK_STATUS(gpucore_comm_unique_id(ctx, id, sizeof id), GPUCORE_ERR_NOT_SUPPORTED);
        CHECK_STATUS(gpucore_comm_create(ctx, id, sizeof id, 0, 1, &dummy), GPUCORE_ERR_NOT_SUPPORTED);
        gpucore_context *two[2] = {ctx, ctx};
        gpucore_comm *cs[2];
        CHECK_STATUS(gpucore_comm_create_local(two, 2, cs), GPUCORE_ERR_INVALID_ARGUMENT); /* same device twice */
    }
    CHECK_STATUS(gpucore_comm_create(ctx, id, sizeof id, 3, 2, &dummy), GPUCORE_ERR_INVALID_ARGUMENT);
    gpucore_tensor_destroy(over);
    gpucore_tensor_destroy(b8);
    gpucore_tensor_destroy(a);
    gpucore_tensor_destroy(b);
    gpucore_tensor_destroy(c);
    gpucore_tensor_destroy(strided);
    gpucore_tensor_destroy(t2);
}

/* The communicator's own scratch is allocated on the caller's current stream, whose
 * blocks may still have queued work when handed out again (stream-ordered reuse).
 * Here a freed I32 block's last write waits behind slow matmuls on the context's
 * stream while the communicator takes that block: its first use (on the comm stream)
 * must wait for that write. Without the ordering, ThreadSanitizer reports the two
 * writes as a race (the race it found once in test_pipeline). */
static void scratch_after_reuse(const char *dev)
{
    gpucore_context *ctx = NULL;
    CHECK_OK(gpucore_context_create(dev, &ctx));
    if (!ctx) return;
    int64_t one = 1, sq[2] = {768, 768};
    gpucore_tensor *t = NULL, *a = NULL, *d = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_I32, 1, &one, &t));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, sq, &a));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, sq, &d));
    CHECK_OK(gpucore_fill(a, 0.5, NULL));
    for (int i = 0; i < 4; i++) CHECK_OK(gpucore_matmul(a, a, d, NULL, NULL)); /* keeps the stream busy */
    CHECK_OK(gpucore_fill(t, 7, NULL)); /* the block's last write, queued behind them */
    gpucore_tensor_destroy(t);          /* back to the pool with that write still queued */
    gpucore_event *done = NULL;
    CHECK_OK(gpucore_event_create(ctx, &done));
    CHECK_OK(gpucore_event_record(done, NULL));
    gpucore_comm *comm = NULL;
    CHECK_OK(gpucore_comm_create_local(&ctx, 1, &comm)); /* its scratch takes the block */
    /* an event wait, not a stream synchronize (that could run the queued write on this
     * thread after joining the comm stream): the context's worker does the write */
    CHECK_OK(gpucore_event_synchronize(done));
    CHECK_OK(gpucore_event_destroy(done));
    CHECK_OK(gpucore_comm_destroy(comm));
    gpucore_tensor_destroy(a);
    gpucore_tensor_destroy(d);
    CHECK_OK(gpucore_context_destroy(ctx));
}

static int64_t allocated_bytes(gpucore_context *ctx)
{
    gpucore_memory_stats ms;
    memset(&ms, 0, sizeof ms);
    ms.struct_size = sizeof ms;
    CHECK_OK(gpucore_memory_get_stats(ctx, GPUCORE_MEMORY_DEVICE, &ms));
    return ms.allocated_bytes;
}

/* One thread drives n local ranks inside a comm group. NCCL starts a group's collectives only at ncclGroupEnd
 * (nccl.h:555, 565), so until then (on every backend alike): a wait for them is refused, the communicator
 * cannot be destroyed, and a freed input stays allocated (a new tensor filled meanwhile must not be handed its
 * memory: the held allreduce would read the fill; before the fix the allocator's event, recorded on a held
 * stream, read as complete and the block came back at once). On CUDA, a kernel, copy or host synchronize on
 * the stream that waits for the collective is refused with a message (it would run first). */
static void grouped_rules(const char *const *devs, int n)
{
    enum { N = 4099, MAXR = 2 };
    gpucore_context *ctx[MAXR] = {NULL, NULL};
    gpucore_comm *comm[MAXR] = {NULL, NULL};
    gpucore_stream *a[MAXR] = {NULL, NULL};
    gpucore_tensor *t[MAXR] = {NULL, NULL}, *o[MAXR] = {NULL, NULL}, *u[MAXR] = {NULL, NULL};
    for (int r = 0; r < n; r++)
        if (gpucore_context_create(devs[r], &ctx[r])) {
            printf("SKIP grouped rules on %d ranks (%s): %s\n", n, devs[r], gpucore_last_error());
            check_skipped++;
            gpucore_clear_error();
            for (int q = 0; q < r; q++) gpucore_context_destroy(ctx[q]);
            return;
        }
    CHECK_OK(gpucore_comm_create_local(ctx, n, comm));
    if (!comm[0]) { for (int r = 0; r < n; r++) gpucore_context_destroy(ctx[r]); return; }
    const int cuda = !strncmp(devs[0], "cuda", 4);
    int64_t len = N;
    float *h = malloc(sizeof(float) * N);
    uint64_t seed = 0x5eed0001u;
    float *want = calloc(N, sizeof(float));
    for (int r = 0; r < n; r++) {
        CHECK_OK(gpucore_stream_create(ctx[r], 0, &a[r]));
        CHECK_OK(gpucore_tensor_create(ctx[r], GPUCORE_F32, 1, &len, &t[r]));
        CHECK_OK(gpucore_tensor_create(ctx[r], GPUCORE_F32, 1, &len, &o[r]));
        for (int i = 0; i < N; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            h[i] = (float)((int)(seed >> 40) % 2001 - 1000) / 8.0f; /* exact in f32 sums */
            want[i] += h[i];
        }
        CHECK_OK(gpucore_copy_from_host(t[r], h, sizeof(float) * N));
    }
    CHECK_STATUS(gpucore_comm_group_end(), GPUCORE_ERR_INVALID_ARGUMENT); /* no group is open */
    CHECK_OK(gpucore_comm_group_start());
    int64_t before[MAXR];
    for (int r = 0; r < n; r++) {
        CHECK_OK(gpucore_comm_allreduce(comm[r], o[r], t[r], GPUCORE_REDUCE_SUM, a[r]));
        CHECK_OK(gpucore_tensor_record_stream(t[r], a[r]));
        before[r] = allocated_bytes(ctx[r]);
        gpucore_tensor_destroy(t[r]);
        CHECK(allocated_bytes(ctx[r]) == before[r]); /* held until the group ends */
        CHECK_OK(gpucore_tensor_create(ctx[r], GPUCORE_F32, 1, &len, &u[r]));
        CHECK_OK(gpucore_fill(u[r], -777.0, NULL)); /* the current stream: not held */
    }
    CHECK_STATUS(gpucore_comm_wait(comm[0], 0, 1.0), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_comm_destroy(comm[0]), GPUCORE_ERR_INVALID_ARGUMENT);
    if (cuda) {
        CHECK_STATUS(gpucore_fill(o[0], 0.0, a[0]), GPUCORE_ERR_INVALID_ARGUMENT);
        CHECK(strstr(gpucore_last_error(), "comm_group_end") != NULL);
        CHECK_STATUS(gpucore_copy(o[0], u[0], a[0]), GPUCORE_ERR_INVALID_ARGUMENT);
        CHECK_STATUS(gpucore_stream_synchronize(a[0]), GPUCORE_ERR_INVALID_ARGUMENT);
        /* a query would call the held stream idle before its collective has even started */
        CHECK_STATUS(gpucore_stream_query(a[0]), GPUCORE_ERR_INVALID_ARGUMENT);
        CHECK(strstr(gpucore_last_error(), "stream_query") != NULL);
    }
    CHECK_OK(gpucore_comm_group_end());
    for (int r = 0; r < n; r++) {
        CHECK(allocated_bytes(ctx[r]) < before[r] + (int64_t)sizeof(float) * N); /* t's block is free now */
        CHECK_OK(gpucore_stream_synchronize(a[r]));
        CHECK_OK(gpucore_copy_to_host(h, sizeof(float) * N, o[r]));
        int bad = 0;
        for (int i = 0; i < N; i++) bad += h[i] != want[i];
        CHECK(bad == 0);
        if (bad) fprintf(stderr, "  grouped allreduce on %s, %d rank(s): rank %d has %d wrong sums ([0] = %g, want %g)\n",
                         devs[0], n, r, bad, h[0], want[0]);
        CHECK_OK(gpucore_comm_wait(comm[r], 0, 30));
    }
    printf("%s: %d rank(s): a comm group's rules checked\n", devs[0], n);
    free(h);
    free(want);
    for (int r = 0; r < n; r++) {
        gpucore_tensor_destroy(o[r]);
        gpucore_tensor_destroy(u[r]);
        CHECK_OK(gpucore_stream_destroy(a[r]));
        CHECK_OK(gpucore_comm_destroy(comm[r]));
    }
    for (int r = 0; r < n; r++) CHECK_OK(gpucore_context_destroy(ctx[r]));
}

static int run_local(void)
{
    const char *devs[4];
    int nd = test_devices(devs, 4);
    for (int d = 0; d < nd; d++) {
        if (!strcmp(devs[d], "cuda-emulated")) continue; /* no NCCL in the emulation layer */
        gpucore_context *ctx = NULL;
        CHECK_OK(gpucore_context_create(devs[d], &ctx));
        if (!ctx) continue;
        gpucore_comm *comm = NULL;
        gpucore_status st = gpucore_comm_create_local(&ctx, 1, &comm);
        if (st == GPUCORE_ERR_NOT_SUPPORTED) {
            printf("SKIP %s: %s\n", devs[d], gpucore_last_error());
            check_skipped++;
            gpucore_context_destroy(ctx);
            continue;
        }
        CHECK_OK(st);
        if (!comm) { gpucore_context_destroy(ctx); continue; }
        CHECK(gpucore_comm_rank(comm) == 0 && gpucore_comm_size(comm) == 1);
        printf("%s: 1-rank communicator\n", devs[d]);
        g_rank = 0;
        g_size = 1;
        run_matrix(comm, ctx, 1);
        order_across_streams(comm, ctx);
        left_for_caller(comm, ctx);
        bad_input(comm, ctx);
        CHECK(gpucore_comm_last_sequence(comm) > 0);
        CHECK_OK(gpucore_comm_wait(comm, 0, 30));
        CHECK_OK(gpucore_comm_destroy(comm));
        CHECK_STATUS(gpucore_comm_barrier(comm, NULL), GPUCORE_ERR_INVALID_HANDLE);
        CHECK_OK(gpucore_context_destroy(ctx));
        if (!strcmp(devs[d], "cpu")) scratch_after_reuse(devs[d]);
        grouped_rules(&devs[d], 1);
        if (!strcmp(devs[d], "cuda")) {
            const char *two[2] = {"cuda:0", "cuda:1"};
            grouped_rules(two, 2);
        }
    }
#ifndef TEST_HAVE_MPI
    gpucore_context *ctx = NULL;
    gpucore_comm *comm = NULL;
    CHECK_OK(gpucore_context_create("cpu", &ctx));
    CHECK_STATUS(gpucore_comm_create_mpi(ctx, &comm), GPUCORE_ERR_NOT_SUPPORTED);
    printf("  without MPI: %s\n", gpucore_last_error());
    gpucore_context_destroy(ctx);
#endif
    return check_finish("test_comm local");
}

#ifdef TEST_HAVE_MPI
static int run_mpi(void)
{
    gpucore_context *ctx = NULL;
    CHECK_OK(gpucore_context_create("cpu", &ctx));
    gpucore_comm *comm = NULL;
    CHECK_OK(gpucore_comm_create_mpi(ctx, &comm));
    if (!comm) return check_finish("test_comm mpi");
    g_rank = gpucore_comm_rank(comm);
    g_size = gpucore_comm_size(comm);
    int wr = -1, ws = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &wr);
    MPI_Comm_size(MPI_COMM_WORLD, &ws);
    CHECK(wr == g_rank && ws == g_size);
    if (g_rank == 0) printf("cpu over MPI: %d ranks\n", g_size);
    double t0 = now_s();
    run_matrix(comm, ctx, 1);
    order_across_streams(comm, ctx);
    left_for_caller(comm, ctx);
    bad_input(comm, ctx);
    CHECK_OK(gpucore_comm_wait(comm, 0, 60));
    CHECK_OK(gpucore_comm_destroy(comm));
    CHECK_OK(gpucore_context_destroy(ctx));
    /* every rank's verdict, so rank 0's summary speaks for the job */
    int failed = check_failed, any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (g_rank == 0) printf("all ranks: %d failed checks, %.2f s\n", any, now_s() - t0);
    char name[64];
    snprintf(name, sizeof name, "test_comm mpi rank %d/%d", g_rank, g_size);
    int rc = check_finish(name);
    return any ? 1 : rc;
}

static int run_failure(int exit_mode)
{
    gpucore_context *ctx = NULL;
    CHECK_OK(gpucore_context_create("cpu", &ctx));
    gpucore_comm *comm = NULL;
    CHECK_OK(gpucore_comm_create_mpi(ctx, &comm));
    if (!comm) return 1;
    int rank = gpucore_comm_rank(comm), size = gpucore_comm_size(comm);
    const double timeout = 3.0;
    CHECK_OK(gpucore_comm_set_timeout(comm, timeout));
    gpucore_tensor *t = make(ctx, GPUCORE_F32, 1 << 16);
    CHECK_OK(gpucore_fill(t, 1, NULL));
    CHECK_OK(gpucore_comm_allreduce(comm, t, t, GPUCORE_REDUCE_SUM, NULL)); /* a healthy one first */
    CHECK_OK(gpucore_comm_wait(comm, 0, 30));
    if (rank == size - 1) {
        fflush(stdout);
        if (exit_mode) _exit(5);      /* dies mid-job without a word to MPI */
        sleep(120);                   /* stalls: never joins the next collective */
        _exit(6);
    }
    double t0 = now_s();
    CHECK_OK(gpucore_comm_allreduce(comm, t, t, GPUCORE_REDUCE_SUM, NULL));
    gpucore_status st = gpucore_comm_wait(comm, 0, -1);
    double dt = now_s() - t0;
    printf("rank %d: collective with a dead/stalled peer ended after %.2f s with %s: %s\n", rank, dt,
           gpucore_status_string(st), gpucore_last_error());
    fflush(stdout);
    CHECK(st == GPUCORE_ERR_COMM);
    CHECK(dt < timeout + 5);
    /* the communicator stays failed, the library stays usable */
    CHECK_STATUS(gpucore_comm_allreduce(comm, t, t, GPUCORE_REDUCE_SUM, NULL), GPUCORE_ERR_COMM);
    CHECK_OK(gpucore_fill(t, 2, NULL));
    check_finish("test_comm failure");
    fflush(stdout);
    fflush(stderr);
    /* A dead MPI job cannot recover: end it, as the header says to. */
    MPI_Abort(MPI_COMM_WORLD, check_failed ? 1 : 3);
    return 1;
}
#endif

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "local";
    if (!strcmp(mode, "local")) return run_local();
#ifdef TEST_HAVE_MPI
    if (!strcmp(mode, "mpi")) return run_mpi();
    if (!strcmp(mode, "stall")) return run_failure(0);
    if (!strcmp(mode, "exit")) return run_failure(1);
#endif
    printf("SKIP test_comm %s: this build has no MPI\n", mode);
    return 77;
}
