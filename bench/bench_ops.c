/*
 * bench_ops.c — achieved memory bandwidth of the tensor ops (elementwise,
 * fused bias+GELU, casts, reductions) against the measured device-to-device
 * copy of the same context (a memcpy on the CPU backend): the ceiling a
 * memory-bound op is judged against. Bytes counted = each input read once +
 * each output written once. Sizes: 256 MiB per f32 tensor on a GPU, 64 MiB on
 * the CPU (far past its caches). Times are medians of event-timed runs after
 * warm-up. Human table by default; --json prints one object per line
 * (DESIGN.md's contract) with peer "memcpy".
 *
 *   bench_ops [--json] [--device cpu|cuda] [--mib N]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gpucore.h"

#define REPS 7

static int json;
static const char *device_name;

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

typedef gpucore_status (*op_fn)(void *state);

/* Median milliseconds of fn over REPS event-timed runs after 2 warm-ups; <0 on error. */
static float time_op(gpucore_context *ctx, op_fn fn, void *state)
{
    gpucore_stream *s = NULL;
    gpucore_event *e0 = NULL, *e1 = NULL;
    gpucore_context_current_stream(ctx, &s);
    gpucore_event_create(ctx, &e0);
    gpucore_event_create(ctx, &e1);
    float ms[REPS];
    for (int i = 0; i < 2; i++)
        if (fn(state)) { fprintf(stderr, "bench_ops: %s\n", gpucore_last_error()); return -1; }
    for (int r = 0; r < REPS; r++) {
        gpucore_event_record(e0, s);
        fn(state);
        gpucore_event_record(e1, s);
        gpucore_event_synchronize(e1);
        gpucore_event_elapsed_ms(e0, e1, &ms[r]);
    }
    gpucore_event_destroy(e0);
    gpucore_event_destroy(e1);
    qsort(ms, REPS, sizeof ms[0], cmp_float);
    return ms[REPS / 2];
}

typedef struct st { int kind; gpucore_tensor *out, *a, *b; } st;
static gpucore_tensor *row_c, *row_d; /* row-family cases: saved stats / loss tensors */

static gpucore_status run(void *p)
{
    st *s = p;
    switch (s->kind) {
    case 0: return gpucore_copy(s->out, s->a, NULL);
    case 1: return gpucore_binary(GPUCORE_ADD, s->out, s->a, s->b, NULL);
    case 2: return gpucore_binary_act(GPUCORE_ADD, GPUCORE_ACT_GELU_TANH, s->out, s->a, s->b, NULL);
    case 3: return gpucore_activation_forward(GPUCORE_ACT_SILU, s->out, s->a, NULL);
    case 4: return gpucore_activation_backward(GPUCORE_ACT_GELU_ERF, s->out, s->a, s->b, NULL);
    case 5: return gpucore_cast(s->out, s->a, NULL);
    case 6: return gpucore_reduce(GPUCORE_REDUCTION_SUM, s->out, s->a, -1, NULL);
    case 7: return gpucore_bias_grad(s->out, s->a, NULL);
    case 8: return gpucore_dropout(s->out, s->a, 0.1, 1, 0, NULL);
    /* row family: forward + backward pairs, timed together */
    case 10: return gpucore_softmax(s->out, s->a, 0, NULL);
    case 11: return gpucore_softmax_backward(s->out, s->a, s->b, 0, NULL);
    case 12: { /* layer norm forward (gamma/beta f32 [cols]; mean/rstd saved) */
        gpucore_status r = gpucore_layer_norm(s->out, row_c, row_d, s->a, s->b, s->b, 1e-5, NULL);
        return r;
    }
    case 13: return gpucore_layer_norm_backward(s->out, NULL, NULL, s->a, s->b, row_c, row_d, NULL, NULL);
    case 14: return gpucore_cross_entropy(row_c, s->a, s->b, -100, GPUCORE_LOSS_MEAN, NULL);
    case 15: return gpucore_cross_entropy_backward(s->out, row_d, s->a, s->b, -100, GPUCORE_LOSS_MEAN, NULL);
    default: return gpucore_scale(s->out, s->a, 2.0, 1.0, NULL);
    }
}

static gpucore_tensor *make(gpucore_context *ctx, gpucore_dtype dt, int nd, const int64_t *shape)
{
    gpucore_tensor *t = NULL;
    if (gpucore_tensor_create(ctx, dt, nd, shape, &t)) { fprintf(stderr, "bench_ops: %s\n", gpucore_last_error()); exit(1); }
    if (gpucore_random(t, GPUCORE_UNIFORM, -1, 1, 7, 0, NULL)) { fprintf(stderr, "bench_ops: %s\n", gpucore_last_error()); exit(1); }
    return t;
}

static void report(const char *name, double bytes, float ms, double peer_gbs)
{
    double gbs = ms > 0 ? bytes / (ms * 1e-3) / 1e9 : 0;
    if (json)
        printf("{\"bench\":\"ops\",\"case\":\"%s\",\"device\":\"%s\",\"metric\":\"GB/s\",\"value\":%.2f,\"unit\":\"GB/s\","
               "\"peer\":\"memcpy\",\"peer_value\":%.2f,\"speedup\":%.3f}\n", name, device_name, gbs, peer_gbs,
               peer_gbs > 0 ? gbs / peer_gbs : 0);
    else printf("%-28s %10.3f ms %9.1f GB/s %6.1f%% of copy\n", name, ms, gbs, peer_gbs > 0 ? 100 * gbs / peer_gbs : 0);
}

int main(int argc, char **argv)
{
    const char *dev = NULL;
    long mib = 0;
    int full = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--quick")) full = 0;
        else if (!strcmp(argv[i], "--full")) full = 1;
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) dev = argv[++i];
        else if (!strcmp(argv[i], "--mib") && i + 1 < argc) mib = atol(argv[++i]);
        else { fprintf(stderr, "usage: bench_ops [--json] [--quick|--full] [--device cpu|cuda] [--mib N]\n"); return 2; }
    }
    gpucore_context *ctx = NULL;
    if (gpucore_context_create(dev, &ctx)) { fprintf(stderr, "bench_ops: %s\n", gpucore_last_error()); return 1; }
    device_name = gpucore_context_device_name(ctx);
    gpucore_device_type type;
    int idx;
    gpucore_context_device(ctx, &type, &idx);
    /* Sizes past every cache: --quick 64 MiB per tensor on a CPU, 256 MiB on a GPU; --full 4x that. */
    if (mib <= 0) mib = (type == GPUCORE_DEVICE_CPU ? 64 : 256) * (full ? 4 : 1);
    const int64_t n = mib * 1024 * 1024 / 4, cols = 4096, rows = n / cols;
    int64_t shape[2] = {rows, cols}, bshape[1] = {cols}, rshape[1] = {rows};
    gpucore_tensor *x = make(ctx, GPUCORE_F32, 2, shape), *y = make(ctx, GPUCORE_F32, 2, shape);
    gpucore_tensor *out = make(ctx, GPUCORE_F32, 2, shape), *bias = make(ctx, GPUCORE_F32, 1, bshape);
    gpucore_tensor *h = make(ctx, GPUCORE_BF16, 2, shape), *hx = make(ctx, GPUCORE_BF16, 2, shape);
    gpucore_tensor *hy = make(ctx, GPUCORE_BF16, 2, shape), *rsum = make(ctx, GPUCORE_F32, 1, rshape);
    gpucore_tensor *db = make(ctx, GPUCORE_F32, 1, bshape);
    const double B = 4.0 * (double)n, H = 2.0 * (double)n;
    if (!json) printf("bench_ops on %s: %lld elements (%ld MiB per f32 tensor), median of %d runs\n", device_name,
                      (long long)n, mib, REPS);
    st copy = {0, out, x, NULL};
    float copy_ms = time_op(ctx, run, &copy);
    double peer = copy_ms > 0 ? 2 * B / (copy_ms * 1e-3) / 1e9 : 0;
    report("copy f32 (peer)", 2 * B, copy_ms, peer);
    struct { const char *name; st s; double bytes; } cases[] = {
        {"add f32", {1, out, x, y}, 3 * B},
        {"add bf16", {1, h, hx, hy}, 3 * H},
        {"bias+gelu_tanh f32", {2, out, x, bias}, 2 * B},
        {"silu f32", {3, out, x, NULL}, 2 * B},
        {"gelu_erf backward bf16", {4, h, hx, hy}, 3 * H},
        {"scale f32", {9, out, x, NULL}, 2 * B},
        {"dropout f32", {8, out, x, NULL}, 2 * B},
        {"cast f32->bf16", {5, h, x, NULL}, B + H},
        {"cast bf16->f32", {5, out, hx, NULL}, B + H},
        {"sum rows f32", {6, rsum, x, NULL}, B},
        {"bias_grad f32", {7, db, x, NULL}, B},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float ms = time_op(ctx, run, &cases[i].s);
        if (ms < 0) return 1;
        report(cases[i].name, cases[i].bytes, ms, peer);
    }
    /* row family: rows of 4096 (norms, softmax) and a 32000-class cross-entropy; bytes
     * = each tensor read once + written once (the floor; re-reads from L2 are not counted) */
    {
        int64_t ce_cols = 32000, ce_rows = n / ce_cols, ce_shape[2] = {ce_rows, ce_cols}, one = 1;
        gpucore_tensor *mean = make(ctx, GPUCORE_F32, 1, rshape), *rstd = make(ctx, GPUCORE_F32, 1, rshape);
        gpucore_tensor *logits = NULL, *dlogits = NULL, *tg = NULL, *loss = make(ctx, GPUCORE_F32, 1, &one);
        gpucore_tensor *dloss = make(ctx, GPUCORE_F32, 1, &one);
        if (gpucore_tensor_create(ctx, GPUCORE_F32, 2, ce_shape, &logits) || gpucore_tensor_create(ctx, GPUCORE_F32, 2, ce_shape, &dlogits) ||
            gpucore_tensor_create(ctx, GPUCORE_I64, 1, &ce_rows, &tg)) { fprintf(stderr, "bench_ops: %s\n", gpucore_last_error()); return 1; }
        gpucore_random(logits, GPUCORE_UNIFORM, -5, 5, 9, 0, NULL);
        gpucore_fill(tg, 3, NULL);
        gpucore_softmax(y, x, 0, NULL); /* y: a real softmax output for the backward */
        gpucore_layer_norm(out, mean, rstd, x, bias, bias, 1e-5, NULL);
        const double CE = 4.0 * (double)(ce_rows * ce_cols);
        struct { const char *name; st s; double bytes; } rcases[] = {
            {"softmax f32", {10, out, x, NULL}, 2 * B},
            {"softmax backward f32", {11, out, x, y}, 3 * B},
            {"layer_norm f32", {12, out, x, bias}, 2 * B},
            {"layer_norm backward dx f32", {13, out, y, x}, 3 * B},
            {"cross_entropy fwd f32 V=32000", {14, NULL, logits, tg}, CE},
            {"cross_entropy bwd f32 V=32000", {15, dlogits, logits, tg}, 2 * CE},
        };
        for (size_t i = 0; i < sizeof rcases / sizeof rcases[0]; i++) {
            row_c = rcases[i].s.kind >= 14 ? loss : mean;
            row_d = rcases[i].s.kind >= 14 ? dloss : rstd;
            float ms = time_op(ctx, run, &rcases[i].s);
            if (ms < 0) return 1;
            report(rcases[i].name, rcases[i].bytes, ms, peer);
        }
    }
    /* strided views (dims merged on the host, multiply-high index math),
     * f16 data (hardware conversions in the CUDA kernels) and rows of 768 / 1024 columns (a warp
     * per row). Same byte counting as above. */
    {
        const int64_t T = n / (8 * 16 * 64), s4[4] = {8, 16, T, 64}, p4[4] = {8, T, 16, 64};
        const int64_t tshape[2] = {cols, rows}, r768 = n / 768, s768[2] = {r768, 768}, s1024[2] = {n / 1024, 1024};
        const int64_t c768 = 768;
        const int perm[4] = {0, 2, 1, 3};
        gpucore_tensor *x4 = NULL, *xp = NULL, *o4 = NULL, *xt = NULL, *yt = NULL, *ot = NULL, *x768 = NULL;
        gpucore_tensor *o768 = NULL, *x1024 = NULL, *o1024 = NULL;
        if (gpucore_tensor_reshape(x, 4, s4, &x4) || gpucore_tensor_permute(x4, perm, &xp) ||
            gpucore_tensor_reshape(out, 4, p4, &o4) || gpucore_tensor_transpose(x, 0, 1, &xt) ||
            gpucore_tensor_transpose(y, 0, 1, &yt) || gpucore_tensor_reshape(out, 2, tshape, &ot) ||
            gpucore_tensor_reshape(x, 2, s1024, &x1024) || gpucore_tensor_reshape(out, 2, s1024, &o1024)) {
            fprintf(stderr, "bench_ops: %s\n", gpucore_last_error());
            return 1;
        }
        gpucore_tensor *f16a = make(ctx, GPUCORE_F16, 2, shape), *f16b = make(ctx, GPUCORE_F16, 2, shape);
        gpucore_tensor *f16o = make(ctx, GPUCORE_F16, 2, shape), *g768 = make(ctx, GPUCORE_F32, 1, &c768);
        gpucore_tensor *m768 = make(ctx, GPUCORE_F32, 1, &r768), *rs768 = make(ctx, GPUCORE_F32, 1, &r768);
        x768 = make(ctx, GPUCORE_F32, 2, s768); /* 768 does not divide n: tensors of their own */
        o768 = make(ctx, GPUCORE_F32, 2, s768);
        const double B768 = 4.0 * (double)(r768 * 768);
        struct { const char *name; st s; double bytes; } icases[] = {
            {"permute 0213 copy f32", {0, o4, xp, NULL}, 2 * B},
            {"transpose copy f32", {0, ot, xt, NULL}, 2 * B},
            {"add transposed f32", {1, ot, xt, yt}, 3 * B},
            {"add f16", {1, f16o, f16a, f16b}, 3 * H},
            {"cast f32->f16", {5, f16o, x, NULL}, B + H},
            {"cast f16->f32", {5, out, f16a, NULL}, B + H},
            {"softmax f16 cols=4096", {10, f16o, f16a, NULL}, 2 * H},
            {"softmax f32 cols=768", {10, o768, x768, NULL}, 2 * B768},
            {"softmax f32 cols=1024", {10, o1024, x1024, NULL}, 2 * B},
            {"layer_norm f32 cols=768", {12, o768, x768, g768}, 2 * B768},
        };
        row_c = m768;
        row_d = rs768;
        for (size_t i = 0; i < sizeof icases / sizeof icases[0]; i++) {
            float ms = time_op(ctx, run, &icases[i].s);
            if (ms < 0) return 1;
            report(icases[i].name, icases[i].bytes, ms, peer);
        }
        gpucore_tensor *ts[] = {x4, xp, o4, xt, yt, ot, x768, o768, x1024, o1024, f16a, f16b, f16o, g768, m768, rs768};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) gpucore_tensor_destroy(ts[i]);
    }
    gpucore_context_destroy(ctx);
    return 0;
}
