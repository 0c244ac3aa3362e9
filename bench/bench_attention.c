/*
 * bench_attention.c — fused scaled dot-product attention: forward, backward and
 * forward+backward TFLOP/s and the allocator's peak memory beyond the inputs,
 * causal and not, head_dim 64/128, over sequence lengths (CPU: 128–1024; GPU: up
 * to 8192 with --full; --seqs picks them). FLOPs counted as the matmuls a dense
 * implementation does: forward 4·B·H·S²·D, backward 2.5× that (halved when
 * causal), forward+backward the sum over the two medians: the convention of
 * FlashAttention's and PyTorch's benchmarks. Times are event-timed medians after
 * warm-up. The peer is PyTorch's scaled_dot_product_attention
 * (bench/peers/torch_attention.py, same case names).
 *
 * Each figure names the path that ran it, read from gpucore_attention_stats, not
 * guessed from dtype or head size: "cudnn" (every call ran cuDNN's SDPA), "kernel"
 * (the hand-written kernel: f32, the CPU, or f16/bf16 with the kernel requested),
 * "kernel (cuDNN declined: <reason>)", or "mixed". With f16/bf16 on a GPU each
 * case runs twice: on the library's choice (cuDNN where it takes the problem; the
 * case name PyTorch's rows share) and on the kernel alone (the case name + " kernel").
 * --json prints DESIGN.md's one-object-per-line contract with a "path" field.
 *
 * --probe: the cuDNN acceptance probe of the GPU run. bf16 MHA graphs that
 * cudnn-frontend's SDPA pattern covers (causal; kv_lengths with a 0; additive f32
 * [Sq, Sk] and [B, 1, 1, Sk] masks; Sk not a multiple of 128), each forward and
 * backward, once on the library's choice and once on the kernel; prints one line
 * saying for each graph whether cuDNN ran it or why it declined, and the largest
 * difference between the two paths' outputs and gradients. Exits 1 when a graph
 * was declined and GPUCORE_EXPECT_CUDNN=1, or when the paths disagree.
 *
 *   bench_attention [--json] [--quick|--full] [--device cpu|cuda] [--dtype f32|f16|bf16]
 *                   [--seqs S1,S2,...] [--batch B] [--heads H]
 *   bench_attention --probe [--device cuda]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gpucore.h"

static int json;
static const char *device_name;

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static void die(const char *what)
{
    fprintf(stderr, "bench_attention: %s: %s\n", what, gpucore_last_error());
    exit(1);
}

typedef struct att_state {
    gpucore_tensor *q, *k, *v, *out, *lse, *dout, *dq, *dk, *dv, *mask, *lens;
    gpucore_attention_options opts;
    int backward;
} att_state;

static gpucore_status run(att_state *s)
{
    if (!s->backward)
        return gpucore_attention_forward(s->out, s->lse, s->q, s->k, s->v, s->mask, s->lens, &s->opts, NULL);
    return gpucore_attention_backward(s->dq, s->dk, s->dv, s->dout, s->q, s->k, s->v, s->out, s->lse, s->mask, s->lens,
                                      &s->opts, NULL);
}

/* Median milliseconds over reps event-timed runs after one warm-up. */
static float time_op(gpucore_context *ctx, att_state *st, int reps)
{
    gpucore_stream *s = NULL;
    gpucore_event *e0 = NULL, *e1 = NULL;
    gpucore_context_current_stream(ctx, &s);
    gpucore_event_create(ctx, &e0);
    gpucore_event_create(ctx, &e1);
    float ms[16];
    if (run(st)) die("warm-up");
    for (int r = 0; r < reps; r++) {
        gpucore_event_record(e0, s);
        if (run(st)) die("run");
        gpucore_event_record(e1, s);
        gpucore_event_synchronize(e1);
        gpucore_event_elapsed_ms(e0, e1, &ms[r]);
    }
    gpucore_event_destroy(e0);
    gpucore_event_destroy(e1);
    qsort(ms, (size_t)reps, sizeof ms[0], cmp_float);
    return ms[reps / 2];
}

static gpucore_tensor *make(gpucore_context *ctx, gpucore_dtype dt, int nd, const int64_t *shape, uint64_t seed)
{
    gpucore_tensor *t = NULL;
    if (gpucore_tensor_create(ctx, dt, nd, shape, &t)) die("tensor_create");
    if (gpucore_random(t, GPUCORE_UNIFORM, -1, 1, seed, 0, NULL)) die("random");
    return t;
}

/* The path the calls since the last reset ran, from the engine statistics (see the top of the file). */
static void path_of(gpucore_context *ctx, int kernel_asked, char *buf, size_t n)
{
    gpucore_attention_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    if (gpucore_attention_get_stats(ctx, &st)) die("attention_get_stats");
    if (st.cudnn_calls > 0 && st.fallback_calls == 0) { snprintf(buf, n, "cudnn"); return; }
    if (st.cudnn_calls > 0) { snprintf(buf, n, "mixed"); return; }
    int reason = -1;
    for (int i = 0; i < GPUCORE_ATTN_FALLBACK_REASONS; i++)
        if (st.fallback_by_reason[i]) reason = i;
    if (reason < 0 || kernel_asked) { snprintf(buf, n, "kernel"); return; }
    snprintf(buf, n, "kernel (cuDNN declined: %s)", gpucore_attention_fallback_reason_text(reason));
}

static void report(const char *cs, const char *path, const char *metric, double value, const char *unit)
{
    if (json)
        printf("{\"bench\":\"attention\",\"case\":\"%s\",\"device\":\"%s\",\"path\":\"%s\",\"metric\":\"%s\","
               "\"value\":%.6g,\"unit\":\"%s\"}\n", cs, device_name, path, metric, value, unit);
    else printf("%-46s %-10s %12.4f %-8s %s\n", cs, metric, value, unit, path);
}

static void destroy_state(att_state *st)
{
    gpucore_tensor *ts[11] = {st->q, st->k, st->v, st->out, st->lse, st->dout, st->dq, st->dk, st->dv, st->mask, st->lens};
    for (int i = 0; i < 11; i++) gpucore_tensor_destroy(ts[i]);
}

/* q, k, v, dout (random) and out, lse, dq, dk, dv for [B, H, Sq, D] queries over Sk keys. */
static void make_state(gpucore_context *ctx, gpucore_dtype dt, int64_t B, int64_t H, int64_t Sq, int64_t Sk, int64_t D,
                       att_state *st)
{
    const int64_t qs[4] = {B, H, Sq, D}, ks[4] = {B, H, Sk, D}, ln = B * H * Sq;
    memset(st, 0, sizeof *st);
    st->q = make(ctx, dt, 4, qs, 1);
    st->k = make(ctx, dt, 4, ks, 2);
    st->v = make(ctx, dt, 4, ks, 3);
    st->dout = make(ctx, dt, 4, qs, 4);
    st->out = make(ctx, dt, 4, qs, 5);
    st->dq = make(ctx, dt, 4, qs, 6);
    st->dk = make(ctx, dt, 4, ks, 7);
    st->dv = make(ctx, dt, 4, ks, 8);
    if (gpucore_tensor_create(ctx, GPUCORE_F32, 1, &ln, &st->lse)) die("tensor_create");
    gpucore_attention_options_init(&st->opts);
}

/* ---- the cuDNN acceptance probe ---- */

/* The tensor's values as float64 (n elements). */
static double *values(gpucore_tensor *t, int64_t n)
{
    gpucore_tensor *f = NULL, *flat = NULL;
    gpucore_context *ctx = NULL;
    const int64_t shape[1] = {n};
    float *h = malloc(sizeof(float) * (size_t)n);
    double *d = malloc(sizeof(double) * (size_t)n);
    if (!h || !d || gpucore_tensor_context(t, &ctx) || gpucore_tensor_create(ctx, GPUCORE_F32, 1, shape, &f))
        die("probe buffers");
    if (gpucore_tensor_reshape(t, 1, shape, &flat) || gpucore_cast(f, flat, NULL) ||
        gpucore_copy_to_host(h, (int64_t)sizeof(float) * n, f))
        die("probe read-back");
    for (int64_t i = 0; i < n; i++) d[i] = h[i];
    gpucore_tensor_destroy(flat);
    gpucore_tensor_destroy(f);
    free(h);
    return d;
}

/* Largest |a - b| over n values where both are finite or both equal (0 when equal), infinite otherwise. */
static double max_diff(const double *a, const double *b, int64_t n)
{
    double w = 0;
    for (int64_t i = 0; i < n; i++) {
        if (a[i] == b[i]) continue;
        double d = fabs(a[i] - b[i]);
        if (!(d <= w)) w = d; /* NaN makes it NaN */
    }
    return w;
}

static int probe(gpucore_context *ctx)
{
    const int64_t B = 2, H = 2, Sq = 77, Sk = 133, D = 64; /* Sk % 128 != 0: a partial second key tile */
    static const char *const names[4] = {"causal", "kv_len{Sk-40,0}", "mask[Sq,Sk]", "mask[B,1,1,Sk]"};
    const char *e = getenv("GPUCORE_EXPECT_CUDNN");
    const int expect = e && !strcmp(e, "1");
    char line[2048];
    int at = snprintf(line, sizeof line, "attention probe (bf16 MHA, B %lld H %lld Sq %lld Sk %lld D %lld):",
                      (long long)B, (long long)H, (long long)Sq, (long long)Sk, (long long)D);
    int on_cudnn = 0, graphs = 0, disagree = 0;
    double worst = 0;
    for (int g = 0; g < 4; g++) {
        att_state st;
        make_state(ctx, GPUCORE_BF16, B, H, Sq, Sk, D, &st);
        st.opts.is_causal = g == 0;
        if (g == 1) {
            const int32_t lens[2] = {(int32_t)(Sk - 40), 0};
            const int64_t n = B;
            if (gpucore_tensor_create(ctx, GPUCORE_I32, 1, &n, &st.lens) ||
                gpucore_copy_from_host(st.lens, lens, sizeof lens))
                die("kv_lengths");
        } else if (g >= 2) {
            const int64_t ms2[2] = {Sq, Sk}, ms4[4] = {B, 1, 1, Sk};
            st.mask = g == 2 ? make(ctx, GPUCORE_F32, 2, ms2, 9) : make(ctx, GPUCORE_F32, 4, ms4, 9);
        }
        const int64_t nq = B * H * Sq * D, nk = B * H * Sk * D;
        gpucore_tensor *outs[2][4] = {{st.out, st.lse, NULL, NULL}, {st.dq, st.dk, st.dv, NULL}};
        const int64_t counts[2][3] = {{nq, B * H * Sq, 0}, {nq, nk, nk}};
        for (int bwd = 0; bwd < 2; bwd++) {
            double *got[2][3] = {{NULL}};
            char path[160] = "";
            for (int kernel = 1; kernel >= 0; kernel--) { /* the kernel first: its out/lse feed both backwards */
                st.backward = bwd;
                st.opts.algo = kernel ? GPUCORE_ATTN_ALGO_KERNEL : GPUCORE_ATTN_ALGO_HEURISTIC;
                if (gpucore_attention_reset_stats(ctx)) die("attention_reset_stats");
                if (run(&st)) die(bwd ? "probe backward" : "probe forward");
                if (!kernel) path_of(ctx, 0, path, sizeof path);
                for (int i = 0; i < 3 && outs[bwd][i]; i++) got[kernel][i] = values(outs[bwd][i], counts[bwd][i]);
                if (!bwd && !kernel) { /* the backward reads the kernel's out and lse again */
                    st.opts.algo = GPUCORE_ATTN_ALGO_KERNEL;
                    if (run(&st)) die("probe forward");
                }
            }
            double d = 0;
            for (int i = 0; i < 3 && outs[bwd][i]; i++) {
                const double m = max_diff(got[0][i], got[1][i], counts[bwd][i]);
                if (!(m <= d)) d = m;
                free(got[0][i]);
                free(got[1][i]);
            }
            if (!(d <= 0.25)) disagree++; /* bf16 outputs and gradients of values in [-1, 1] */
            if (!(d <= worst)) worst = d;
            graphs++;
            on_cudnn += !strcmp(path, "cudnn");
            at += snprintf(line + at, sizeof line - (size_t)at, "%s %s %s %s", graphs > 1 ? "," : "", names[g],
                           bwd ? "bwd" : "fwd", path);
            if (at >= (int)sizeof line) at = (int)sizeof line - 1;
        }
        destroy_state(&st);
    }
    printf("%s; %d of %d on cuDNN; max |cuDNN - kernel| %.3g%s\n", line, on_cudnn, graphs, worst,
           disagree ? " (the paths disagree)" : "");
    if (expect && on_cudnn < graphs) printf("FAIL cuDNN declined %d of the %d graphs (GPUCORE_EXPECT_CUDNN=1)\n",
                                            graphs - on_cudnn, graphs);
    if (disagree) printf("FAIL %d graphs differ between cuDNN and the kernel by more than 0.25\n", disagree);
    return (expect && on_cudnn < graphs) || disagree;
}

/* "a,b,c" into seqs (at most max); the count, or 0 when malformed. */
static int parse_seqs(const char *s, int64_t *seqs, int max)
{
    int n = 0;
    while (*s && n < max) {
        char *end = NULL;
        long long v = strtoll(s, &end, 10);
        if (end == s || v < 1 || v > (1 << 20) || (*end && *end != ',')) return 0;
        seqs[n++] = v;
        s = *end ? end + 1 : end;
    }
    return *s ? 0 : n;
}

int main(int argc, char **argv)
{
    const char *dev = NULL, *dts = "f32";
    int full = 0, probing = 0, nseq = 0;
    int64_t seqs[16], B = 0, H = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--quick")) full = 0;
        else if (!strcmp(argv[i], "--full")) full = 1;
        else if (!strcmp(argv[i], "--probe")) probing = 1;
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) dev = argv[++i];
        else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) dts = argv[++i];
        else if (!strcmp(argv[i], "--seqs") && i + 1 < argc && (nseq = parse_seqs(argv[++i], seqs, 16)) > 0) continue;
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc && (B = atoll(argv[++i])) > 0) continue;
        else if (!strcmp(argv[i], "--heads") && i + 1 < argc && (H = atoll(argv[++i])) > 0) continue;
        else {
            fprintf(stderr, "usage: bench_attention [--json] [--quick|--full] [--device cpu|cuda] [--dtype f32|f16|bf16] "
                            "[--seqs S1,S2,...] [--batch B] [--heads H]\n       bench_attention --probe [--device cuda]\n");
            return 2;
        }
    }
    const gpucore_dtype dt = !strcmp(dts, "bf16") ? GPUCORE_BF16 : !strcmp(dts, "f16") ? GPUCORE_F16 : GPUCORE_F32;
    gpucore_context *ctx = NULL;
    if (gpucore_context_create(dev, &ctx)) die("context_create");
    device_name = gpucore_context_device_name(ctx);
    if (probing) {
        int rc = probe(ctx);
        gpucore_context_destroy(ctx);
        return rc;
    }
    gpucore_device_type type;
    int idx;
    gpucore_context_device(ctx, &type, &idx);
    const int cpu = type == GPUCORE_DEVICE_CPU;
    static const int64_t seqs_cpu[] = {128, 256, 512, 1024}, seqs_gpu[] = {512, 1024, 2048, 4096, 8192};
    if (!nseq) {
        nseq = cpu ? (full ? 4 : 3) : (full ? 5 : 3);
        memcpy(seqs, cpu ? seqs_cpu : seqs_gpu, sizeof(int64_t) * (size_t)nseq);
    }
    if (!B) B = cpu ? 1 : 4;
    if (!H) H = cpu ? 4 : 16;
    const int reps = cpu ? 3 : 10;
    const int paths = !cpu && dt != GPUCORE_F32 ? 2 : 1; /* the library's choice, then the kernel alone */
    if (!json)
        printf("bench_attention on %s, %s, batch %lld, heads %lld; TFLOP/s = dense-equivalent matmul FLOPs / median time\n",
               device_name, dts, (long long)B, (long long)H);
    for (int si = 0; si < nseq; si++)
        for (int64_t D = 64; D <= 128; D *= 2)
            for (int causal = 0; causal < 2; causal++)
                for (int kernel = 0; kernel < paths; kernel++) {
                    const int64_t S = seqs[si];
                    att_state st;
                    make_state(ctx, dt, B, H, S, S, D, &st);
                    st.opts.is_causal = causal;
                    if (kernel) st.opts.algo = GPUCORE_ATTN_ALGO_KERNEL;
                    char cs[112], fpath[160], bpath[160];
                    snprintf(cs, sizeof cs, "b%lld h%lld s%lld d%lld %s %s%s", (long long)B, (long long)H, (long long)S,
                             (long long)D, causal ? "causal" : "full", dts, kernel ? " kernel" : "");
                    const double fwd_flops = 4.0 * (double)(B * H * S * S * D) * (causal ? 0.5 : 1.0);
                    gpucore_context_synchronize(ctx);
                    gpucore_memory_stats m0 = {.struct_size = sizeof m0}, m1 = {.struct_size = sizeof m1};
                    gpucore_memory_reset_peak_stats(ctx, GPUCORE_MEMORY_DEVICE);
                    gpucore_memory_get_stats(ctx, GPUCORE_MEMORY_DEVICE, &m0);
                    gpucore_attention_reset_stats(ctx);
                    st.backward = 0;
                    float fms = time_op(ctx, &st, reps);
                    path_of(ctx, kernel, fpath, sizeof fpath);
                    gpucore_attention_reset_stats(ctx);
                    st.backward = 1;
                    float bms = time_op(ctx, &st, reps);
                    path_of(ctx, kernel, bpath, sizeof bpath);
                    gpucore_memory_get_stats(ctx, GPUCORE_MEMORY_DEVICE, &m1);
                    report(cs, fpath, "fwd", fms > 0 ? fwd_flops / (fms * 1e-3) / 1e12 : 0, "TFLOP/s");
                    report(cs, bpath, "bwd", bms > 0 ? 2.5 * fwd_flops / (bms * 1e-3) / 1e12 : 0, "TFLOP/s");
                    report(cs, strcmp(fpath, bpath) ? "mixed" : fpath, "fwd+bwd",
                           fms + bms > 0 ? 3.5 * fwd_flops / ((fms + bms) * 1e-3) / 1e12 : 0, "TFLOP/s");
                    report(cs, bpath, "peak_extra", (double)(m1.allocated_bytes_peak - m0.allocated_bytes) / (1 << 20),
                           "MiB");
                    destroy_state(&st);
                }
    gpucore_context_destroy(ctx);
    return 0;
}
