/*
 * bench_lm.c — one full fine-tuning step of a GPT-2-124M-shaped model through the
 * model layer (gpucore_lm_*: causal-LM loss, forward and backward, then the fused
 * AdamW step), at (B 4, T 64) and (B 4, T 256), in f32 and in bf16 (bf16 weights,
 * activations and gradients, the optimizer's f32 master weights). Per case: tokens/s,
 * the step time (median, min and max over the measured steps after warm-up steps), the
 * step's CPU time per core (this process's CPU-seconds over the core count, median: on a
 * machine other processes load, the wall time grows with their share, this much less; it
 * counts OpenMP's spinning threads too),
 * MFU = 6·N_params·tokens/s over the CPU's f32 FMA peak measured here
 * (bench_fma_peak.h), the process's RSS high-water mark and the allocator's peak
 * allocated and reserved bytes during the case, and the loss of every step.
 *
 * The model and the token ids are lm_fixture.h's folder DIR (written on first use), which
 * transformers loads: the peer bench/peers/torch_lm.py trains GPT2LMHeadModel with
 * torch.optim.AdamW from the same folder on the same batches.
 * Step s of a (B, T) case reads the B·T ids from offset s·B·T of the stream (wrapping).
 * This program also writes its rows to DIR/ours.jsonl (with the FMA peak and every
 * step's loss), which the peer reads to report MFU against the same peak and the
 * largest relative difference between its losses and ours.
 *
 *   bench_lm [--json] [--quick|--full] [--device cpu|cuda] [--dir DIR] [--dtype f32,bf16]
 *            [--seq 64,256] [--batch 4] [--warmup W] [--steps N] [--lr LR] [--profile] [--rounds R]
 * --quick (default): 1 warm-up + 3 measured steps; --full: 2 + 10. --profile prints the
 * library profiler's per-op table of the last measured step to stderr. --rounds R runs the
 * whole case list R times in turn (f32, bf16, f32, bf16, ...: on a shared machine both dtypes
 * see the same load), then prints per case the median of its rounds' tokens/s and, per
 * (B, T) with both dtypes, the median over rounds of bf16's tokens/s over the f32 run just
 * before it (rows "tokens_per_s_rounds_median" and "bf16_over_f32"), both also from the CPU
 * time ("..._cpu"); DIR/ours.jsonl keeps the first round's rows only, as the peer expects one
 * row set per case.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "gpucore.h"
#include "bench_fma_peak.h"
#include "bench_time.h"
#include "lm_fixture.h"

#define MAX_STEPS 256
#define MAX_ROUNDS 64

static int json;
static const char *device_name;
static double peak_gflops; /* 0: not measured (not a CPU, or no AVX2) */
static FILE *ours_file;    /* DIR/ours.jsonl */

#define CHECK(x)                                                                   \
    do {                                                                           \
        if ((st = (x)) != GPUCORE_OK) {                                            \
            fprintf(stderr, "bench_lm: %s: %s\n", #x, gpucore_last_error());       \
            goto done;                                                             \
        }                                                                          \
    } while (0)

/* ---- process memory: the RSS high-water mark, reset per case where Linux allows it ---- */

static int64_t peak_rss_bytes(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int64_t kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) kb = strtoll(line + 6, NULL, 10);
    if (f) fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

static int reset_peak_rss(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return 0;
    int ok = fputs("5", f) >= 0;
    ok &= fclose(f) == 0;
    return ok;
}

/* ---- one case ---- */

typedef struct lm_case {
    const char *dtype_name;
    int dtype;
    int64_t batch, seq;
} lm_case;

static void row(const char *cs, const char *metric, double value, const char *unit)
{
    char line[512];
    snprintf(line, sizeof line, "{\"bench\":\"lm\",\"case\":\"%s\",\"device\":\"%s\",\"metric\":\"%s\",\"value\":%.10g,"
             "\"unit\":\"%s\"}\n", cs, device_name, metric, value, unit);
    if (json) fputs(line, stdout);
    if (ours_file) fputs(line, ours_file);
}

/* The median of v[0..n) (sorts v). */
static double median_of(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* One case: warm-up and measured steps, its rows and line; tokens_per_s[0] (if not NULL) gets the
 * median step's tokens/s, tokens_per_s[1] the same from the median CPU time per core. Returns
 * nonzero on failure. */
static int run_case(gpucore_context *ctx, const char *dir, const int64_t *tokens, const lm_case *c, int warmup,
                    int steps, double lr, int profile, double tokens_per_s[2])
{
    gpucore_lm *lm = NULL;
    gpucore_optimizer *opt = NULL;
    gpucore_tensor **params = NULL, **grads = NULL;
    int64_t *ids = NULL, count = 0, nparams = 0;
    double ms[MAX_STEPS], cpu_ms[MAX_STEPS], losses[MAX_STEPS];
    char cs[64];
    snprintf(cs, sizeof cs, "B%" PRId64 " T%" PRId64 " %s", c->batch, c->seq, c->dtype_name);
    gpucore_status st = GPUCORE_OK;
    /* the previous case's cached blocks back to the system first, so the RSS peak is this case's */
    CHECK(gpucore_memory_empty_cache(ctx, GPUCORE_MEMORY_DEVICE));
    int rss_reset = reset_peak_rss();
    CHECK(gpucore_memory_reset_peak_stats(ctx, GPUCORE_MEMORY_DEVICE));
    CHECK(gpucore_lm_create(ctx, dir, c->dtype, &lm));
    CHECK(gpucore_lm_set_full_finetune(lm, 1));
    count = gpucore_lm_trainable_count(lm);
    params = calloc((size_t)count, sizeof *params);
    grads = calloc((size_t)count, sizeof *grads);
    ids = malloc((size_t)(c->batch * c->seq) * sizeof *ids);
    if (!params || !grads || !ids) { fprintf(stderr, "bench_lm: out of host memory\n"); st = GPUCORE_ERR_OUT_OF_MEMORY; goto done; }
    for (int64_t i = 0; i < count; i++) {
        const char *name;
        CHECK(gpucore_lm_trainable(lm, i, &name, &params[i], &grads[i]));
        nparams += gpucore_tensor_numel(params[i]);
    }
    gpucore_optimizer_config cfg;
    CHECK(gpucore_optimizer_config_default(GPUCORE_OPTIMIZER_ADAMW, &cfg));
    cfg.lr = lr;
    cfg.weight_decay = 0.01; /* torch.optim.AdamW's default, the peer's */
    CHECK(gpucore_optimizer_create(ctx, &cfg, params, count, &opt));
    const int64_t n = c->batch * c->seq;
    for (int s = 0; s < warmup + steps; s++) {
        for (int64_t i = 0; i < n; i++) ids[i] = tokens[((int64_t)s * n + i) % LM_NTOK];
        if (profile && s == warmup + steps - 1) {
            CHECK(gpucore_profiler_reset(ctx));
            CHECK(gpucore_profiler_enable(ctx, 1));
        }
        double t0 = now_ms(), c0 = cpu_s();
        CHECK(gpucore_lm_forward_backward_host(lm, ids, NULL, c->batch, c->seq, &losses[s]));
        CHECK(gpucore_optimizer_step(opt, grads, count, NULL, NULL));
        CHECK(gpucore_context_synchronize(ctx));
        ms[s] = now_ms() - t0;
        cpu_ms[s] = (cpu_s() - c0) * 1e3 / (double)online_cpus;
        if (!json) fprintf(stderr, "bench_lm: %s step %d%s: %.1f ms, loss %.6f\n", cs, s, s < warmup ? " (warm-up)" : "",
                           ms[s], losses[s]);
    }
    if (profile) lm_print_profile(ctx, "bench_lm", cs, "last step");
    double sorted[MAX_STEPS];
    memcpy(sorted, cpu_ms + warmup, (size_t)steps * sizeof *sorted);
    const double cpu_med = median_of(sorted, steps);
    memcpy(sorted, ms + warmup, (size_t)steps * sizeof *sorted);
    const double med = median_of(sorted, steps); /* sorted stays sorted: min and max below */
    const double tps = (double)n / (med * 1e-3);
    if (tokens_per_s) {
        tokens_per_s[0] = tps;
        tokens_per_s[1] = (double)n / (cpu_med * 1e-3);
    }
    const double mfu = peak_gflops > 0 ? 6.0 * (double)nparams * tps / (peak_gflops * 1e9) : 0;
    gpucore_memory_stats mst;
    mst.struct_size = sizeof mst;
    CHECK(gpucore_memory_get_stats(ctx, GPUCORE_MEMORY_DEVICE, &mst));
    const int64_t rss = peak_rss_bytes();
    row(cs, "tokens_per_s", tps, "tokens/s");
    row(cs, "step_ms_median", med, "ms");
    row(cs, "step_ms_min", sorted[0], "ms");
    row(cs, "step_ms_max", sorted[steps - 1], "ms");
    row(cs, "step_cpu_ms_per_core_median", cpu_med, "ms");
    if (mfu > 0) row(cs, "mfu", mfu, "ratio");
    if (rss > 0) row(cs, rss_reset ? "peak_rss_bytes" : "peak_rss_bytes_process", (double)rss, "bytes");
    row(cs, "peak_allocated_bytes", (double)mst.allocated_bytes_peak, "bytes");
    row(cs, "peak_reserved_bytes", (double)mst.reserved_bytes_peak, "bytes"); /* allocated + cached segments */
    const int shown = warmup + steps < 5 ? warmup + steps : 5;
    for (int s = 0; s < shown; s++) {
        char metric[32];
        snprintf(metric, sizeof metric, "loss_step_%d", s);
        row(cs, metric, losses[s], "nats");
    }
    if (ours_file) { /* every step's loss, for the peer's agreement check */
        fprintf(ours_file, "{\"bench\":\"lm\",\"case\":\"%s\",\"metric\":\"losses\",\"params\":%" PRId64 ",\"values\":[", cs,
                nparams);
        for (int s = 0; s < warmup + steps; s++) fprintf(ours_file, "%s%.9g", s ? "," : "", losses[s]);
        fprintf(ours_file, "]}\n");
        fflush(ours_file);
    }
    if (!json) {
        char mfu_s[32] = "-", rss_s[32] = "-";
        if (mfu > 0) snprintf(mfu_s, sizeof mfu_s, "%.1f%%", 100 * mfu);
        if (rss > 0) snprintf(rss_s, sizeof rss_s, "%.2f GB%s", (double)rss / 1e9, rss_reset ? "" : "*");
        printf("%-15s %9.1f %9.1f [%7.1f, %7.1f] %7.1f %7s %11s %9.2f GB  ", cs, tps, med, sorted[0], sorted[steps - 1],
               cpu_med, mfu_s, rss_s, (double)mst.allocated_bytes_peak / 1e9);
        for (int s = 0; s < shown; s++) printf("%s%.5f", s ? " " : "", losses[s]);
        printf("\n");
        fflush(stdout);
    }
done:
    gpucore_optimizer_destroy(opt);
    gpucore_lm_destroy(lm);
    free(params);
    free(grads);
    free(ids);
    return st != GPUCORE_OK;
}

/* After --rounds, for one measure (wall or CPU time: suffix "" or "_cpu"): per case the median of
 * its rounds' tokens/s, and per (B, T) measured in both dtypes the median over rounds of
 * bf16 / f32 (each round's f32 run paired with its bf16 run). */
static void rounds_summary(const lm_case *cases, int nc, int rounds, double tps[][MAX_ROUNDS][2], int which)
{
    const char *suffix = which ? "_cpu" : "";
    double v[MAX_ROUNDS];
    char cs[64], metric[64];
    if (!json) printf("over %d rounds, from the %s (median of the rounds):\n", rounds, which ? "CPU time per core" : "wall time");
    for (int i = 0; i < nc; i++) {
        for (int r = 0; r < rounds; r++) v[r] = tps[i][r][which];
        const double med = median_of(v, rounds);
        snprintf(cs, sizeof cs, "B%" PRId64 " T%" PRId64 " %s", cases[i].batch, cases[i].seq, cases[i].dtype_name);
        snprintf(metric, sizeof metric, "tokens_per_s_rounds_median%s", suffix);
        row(cs, metric, med, "tokens/s");
        if (!json) {
            printf("%-15s %9.1f tokens/s  rounds:", cs, med);
            for (int r = 0; r < rounds; r++) printf(" %.1f", tps[i][r][which]);
            printf("\n");
        }
    }
    for (int i = 0; i < nc; i++) {
        if (cases[i].dtype != GPUCORE_BF16) continue;
        for (int j = 0; j < nc; j++) {
            if (cases[j].dtype != GPUCORE_F32 || cases[j].batch != cases[i].batch || cases[j].seq != cases[i].seq) continue;
            for (int r = 0; r < rounds; r++) v[r] = tps[j][r][which] > 0 ? tps[i][r][which] / tps[j][r][which] : 0;
            const double med = median_of(v, rounds);
            snprintf(cs, sizeof cs, "B%" PRId64 " T%" PRId64, cases[i].batch, cases[i].seq);
            snprintf(metric, sizeof metric, "bf16_over_f32%s", suffix);
            row(cs, metric, med, "ratio");
            if (!json) {
                printf("%-15s bf16/f32 %.3fx (median of %d paired rounds; sorted:", cs, med, rounds);
                for (int r = 0; r < rounds; r++) printf(" %.3f", v[r]);
                printf(")\n");
            }
            break;
        }
    }
}

int main(int argc, char **argv)
{
    const char *dev = NULL, *dir = NULL;
    char dtypes[64] = "f32,bf16", seqs[64] = "64,256", dirbuf[4096];
    int full = 0, warmup = -1, steps = -1, profile = 0, rounds = 1;
    int64_t batch = 4;
    double lr = 1e-4;
    const char *usage = "usage: bench_lm [--json] [--quick|--full] [--device cpu|cuda] [--dir DIR] [--dtype f32,bf16] "
                        "[--seq 64,256] [--batch B] [--warmup W] [--steps N] [--lr LR] [--profile] [--rounds R]\n";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--quick")) full = 0;
        else if (!strcmp(a, "--full")) full = 1;
        else if (!strcmp(a, "--profile")) profile = 1;
        else if (v && !strcmp(a, "--device")) dev = v, i++;
        else if (v && !strcmp(a, "--dir")) dir = v, i++;
        else if (v && !strcmp(a, "--dtype")) snprintf(dtypes, sizeof dtypes, "%s", v), i++;
        else if (v && !strcmp(a, "--seq")) snprintf(seqs, sizeof seqs, "%s", v), i++;
        else if (v && !strcmp(a, "--batch")) batch = atoll(v), i++;
        else if (v && !strcmp(a, "--warmup")) warmup = atoi(v), i++;
        else if (v && !strcmp(a, "--steps")) steps = atoi(v), i++;
        else if (v && !strcmp(a, "--lr")) lr = atof(v), i++;
        else if (v && !strcmp(a, "--rounds")) rounds = atoi(v), i++;
        else { fputs(usage, stderr); return 2; }
    }
    if (warmup < 0) warmup = full ? 2 : 1;
    if (steps < 0) steps = full ? 10 : 3;
    if (steps < 1 || warmup + steps > MAX_STEPS || batch < 1 || rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "bench_lm: --steps must be >= 1, --warmup >= 0, together <= %d, --batch >= 1, --rounds 1..%d\n",
                MAX_STEPS, MAX_ROUNDS);
        return 2;
    }
    if (!dir) dir = lm_fixture_default_dir(dirbuf, sizeof dirbuf);
    const char *dtv[4], *sqv[8];
    int ndt = lm_split_list(dtypes, dtv, 4), nsq = lm_split_list(seqs, sqv, 8);
    lm_case cases[32];
    int nc = 0;
    for (int d = 0; d < ndt; d++) {
        int dt = !strcmp(dtv[d], "f32") ? GPUCORE_F32 : !strcmp(dtv[d], "bf16") ? GPUCORE_BF16 : -1;
        if (dt < 0) { fprintf(stderr, "bench_lm: --dtype %s: f32 or bf16\n", dtv[d]); return 2; }
        for (int q = 0; q < nsq; q++) {
            int64_t T = atoll(sqv[q]);
            if (T < 2 || T > LM_POSITIONS) { fprintf(stderr, "bench_lm: --seq %s: 2..%d\n", sqv[q], LM_POSITIONS); return 2; }
            if (batch * T > LM_NTOK) { fprintf(stderr, "bench_lm: batch x seq over the %d-id token stream\n", LM_NTOK); return 2; }
            cases[nc++] = (lm_case){dtv[d], dt, batch, T};
        }
    }
    gpucore_context *ctx = NULL;
    if (gpucore_context_create(dev, &ctx)) {
        fprintf(stderr, "bench_lm: %s\n", gpucore_last_error());
        return 1;
    }
    device_name = gpucore_context_device_name(ctx);
    gpucore_device_type type;
    int index;
    gpucore_context_device(ctx, &type, &index);
    int rc = 0;
    if (lm_fixture_ensure(ctx, dir)) { gpucore_context_destroy(ctx); return 1; }
    int64_t *tokens = lm_fixture_tokens(dir);
    if (!tokens) { gpucore_context_destroy(ctx); return 1; }
    char path[LM_PATH_LEN];
    ours_file = lm_fixture_path(path, dir, "ours.jsonl") ? NULL : fopen(path, "w");
    if (!ours_file) fprintf(stderr, "bench_lm: cannot write %s (the peer will not find our losses)\n", path);
    online_cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (online_cpus < 1) online_cpus = 1;
    int threads = 0;
    if (type == GPUCORE_DEVICE_CPU) peak_gflops = measure_fma_peak(&threads);
    if (peak_gflops > 0) {
        char cs[64];
        snprintf(cs, sizeof cs, "f32 fma peak %s x%d", peak_width == 16 ? "avx512" : "avx2", threads);
        row(cs, "GFLOP/s", peak_gflops, "GFLOP/s");
    }
    if (!json) {
        printf("bench_lm on %s: GPT-2 124M full fine-tuning (AdamW lr %g, weight decay 0.01), %d warm-up + %d measured "
               "steps, model in %s\n", device_name, lr, warmup, steps, dir);
        if (peak_gflops > 0)
            printf("f32 FMA peak (%s, %d threads, per cpu-s x cores): %.1f GFLOP/s; MFU = 6 N tokens/s / peak\n",
                   peak_width == 16 ? "AVX-512" : "AVX2", threads, peak_gflops);
        printf("%-15s %9s %9s %18s %7s %7s %11s %12s  %s\n", "case", "tokens/s", "step ms", "[min, max]", "cpu ms",
               "MFU", "peak RSS", "peak alloc", "losses of the first steps");
    }
    static double tps[32][MAX_ROUNDS][2];
    FILE *first_round_file = ours_file;
    for (int r = 0; r < rounds && !rc; r++) {
        if (r == 1) ours_file = NULL; /* the peer reads one row set per case: the first round's */
        for (int i = 0; i < nc && !rc; i++) rc |= run_case(ctx, dir, tokens, &cases[i], warmup, steps, lr, profile, tps[i][r]);
    }
    if (!rc && rounds > 1)
        for (int which = 0; which < 2; which++) rounds_summary(cases, nc, rounds, tps, which);
    ours_file = first_round_file;
    if (!json) printf("bf16: bf16 weights, activations and gradients, f32 master weights and moments in AdamW\n");
    if (ours_file) fclose(ours_file);
    free(tokens);
    gpucore_context_destroy(ctx);
    return rc;
}
