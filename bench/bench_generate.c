/*
 * bench_generate.c — greedy generation with the KV cache through the model layer
 * (gpucore_lm_generate) on GPT-2 124M (lm_fixture.h's folder, shared with bench_lm), the
 * way a user evaluates a fine-tuned model: batch 1 and 4, a 64-token prompt (--prompt),
 * 64 new tokens (--new), f32 and bf16 weights. Per case: the prefill time (the prompt's
 * forward and the first token), the decode time per step (one token per sequence, from
 * the cache), new tokens/s end to end, the allocator's peak, and the first generated ids,
 * which also go to DIR/ours_generate.jsonl for the peer (bench/peers/torch_generate.py:
 * transformers' generate on the same folder and prompts) to compare with its own.
 * Prefill and decode come from two calls: max_new 1 (prefill) and max_new N (all); decode
 * per step = (all - prefill) / (N - 1). Each figure is the median over --repeats runs.
 *
 *   bench_generate [--json] [--quick|--full] [--device cpu|cuda] [--dir DIR] [--model PATH] [--llama-bench BIN]
 *                  [--dtype f32,bf16] [--batch 1,4] [--prompt 64] [--new 64] [--repeats R] [--profile]
 * --quick (default): 3 repeats after one warm-up; --full: 7. --profile prints the library
 * profiler's per-op table of the last run to stderr.
 *
 * --model PATH runs a given model instead (a Hugging Face folder or a GGUF file, e.g. a
 * published one and its f32 copy from bench/peers/gguf_widen.py; prompt ids spread over
 * its first 1000 tokens). Every run measures the machine's read bandwidth (bench_read_bw.h)
 * first and after each case, the best so far counting, and prints each decode step's weight
 * stream (the base weights' bytes a step reads: gpucore_lm_decode_bytes)
 * as GB/s and as a fraction of it.
 * --llama-bench BIN (a benchmark-only peer: llama.cpp's llama-bench, with a GGUF --model)
 * runs the same file, prompt and new-token counts and thread count through llama.cpp
 * (`-o jsonl`) right after ours and prints its prefill (from an empty context) and decode (with
 * the prompt's tokens already in its context, -d, as ours) tokens/s beside ours.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gpucore.h"
#include "bench_time.h"
#include "lm_fixture.h"
#include "bench_read_bw.h"

enum { MAX_REPEATS = 32, SHOWN_IDS = 16 };

static int json;
static const char *device_name;
static FILE *ours_file; /* DIR/ours_generate.jsonl */
static double read_gbs;  /* the machine's measured read bandwidth, GB/s (<= 0: unknown) */
enum { MAX_CASES = 16 };
static struct { char name[64]; double prefill_tps, decode_tps; } b1_cases[MAX_CASES]; /* ours at batch 1 */
static int n_b1_cases;

static void row(const char *cs, const char *metric, double value, const char *unit)
{
    char line[512];
    snprintf(line, sizeof line, "{\"bench\":\"generate\",\"case\":\"%s\",\"device\":\"%s\",\"metric\":\"%s\","
             "\"value\":%.10g,\"unit\":\"%s\"}\n", cs, device_name, metric, value, unit);
    if (json) fputs(line, stdout);
}

/* The number after "key": in a JSON line, or -1. */
static double json_number(const char *line, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    return p ? strtod(p + strlen(pat), NULL) : -1.0;
}

/* One llama-bench run (jsonl out): the avg_ts of its test with n_prompt np and n_gen ng, or -1. */
static double llama_bench_ts(const char *cmd, double np, double ng)
{
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    char line[16384];
    double ts = -1;
    while (fgets(line, sizeof line, f))
        if (json_number(line, "n_prompt") == np && json_number(line, "n_gen") == ng) ts = json_number(line, "avg_ts");
    const int rc = pclose(f);
    if (ts <= 0) fprintf(stderr, "bench_generate: %s gave no figure (exit status %d)\n", cmd, rc);
    return ts;
}

/* llama.cpp's llama-bench on the same GGUF file, prompt and new-token counts and threads; its figures
 * beside ours. Its prefill is pp<prompt> from an empty context, its decode tg<new> after <prompt>
 * tokens in the context (-d, as ours decodes after the prompt). Returns 0, or 1 when it did not run
 * or said nothing we read (said). */
static int run_llama_bench(const char *bin, const char *model, int64_t plen, int64_t nnew, int repeats)
{
    if (strchr(bin, '\'') || strchr(model, '\'')) {
        fprintf(stderr, "bench_generate: --llama-bench: paths with a quote are not passed to a shell\n");
        return 1;
    }
    const char *omp = getenv("OMP_NUM_THREADS");
    const int threads = omp && atoi(omp) > 0 ? atoi(omp) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    char cmd[2 * LM_PATH_LEN + 160];
    snprintf(cmd, sizeof cmd, "'%s' -m '%s' -p %" PRId64 " -n 0 -t %d -r %d -o jsonl 2>/dev/null", bin, model, plen,
             threads, repeats);
    const double pp = llama_bench_ts(cmd, (double)plen, 0);
    snprintf(cmd, sizeof cmd, "'%s' -m '%s' -p 0 -n %" PRId64 " -d %" PRId64 " -t %d -r %d -o jsonl 2>/dev/null", bin,
             model, nnew, plen, threads, repeats);
    const double tg = pp > 0 ? llama_bench_ts(cmd, 0, (double)nnew) : -1;
    if (pp <= 0 || tg <= 0) return 1;
    row("llama.cpp B1", "prefill_tokens_per_s", pp, "tokens/s");
    row("llama.cpp B1", "decode_tokens_per_s", tg, "tokens/s");
    if (!json) {
        printf("llama.cpp (llama-bench, same file, %d threads, %d runs): prefill %.1f tokens/s, decode %.1f tokens/s "
               "(its context holding %" PRId64 " tokens, -d)\n", threads, repeats, pp, tg, plen);
        for (int i = 0; i < n_b1_cases; i++)
            printf("  ours %-18s prefill %.2fx, decode %.2fx llama.cpp's (ours / peer, > 1: we are faster)\n",
                   b1_cases[i].name, b1_cases[i].prefill_tps / pp, b1_cases[i].decode_tps / tg);
    }
    return 0;
}


static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* One greedy generate of max_new tokens; its wall time in ms, < 0 on failure (said). */
static double timed_generate(gpucore_lm *lm, const int64_t *prompt, int64_t batch, int64_t plen, int64_t max_new,
                             int64_t *out)
{
    int64_t out_len = 0;
    double t0 = now_ms();
    /* no eos: every run makes max_new tokens, as the peer's min_new_tokens does */
    if (gpucore_lm_generate(lm, prompt, batch, plen, max_new, 0, 1.0, 0, 1.0, 0, -1, -1, out, &out_len)) {
        fprintf(stderr, "bench_generate: gpucore_lm_generate: %s\n", gpucore_last_error());
        return -1.0;
    }
    double ms = now_ms() - t0;
    if (out_len != plen + max_new) {
        fprintf(stderr, "bench_generate: %" PRId64 " ids came back, %" PRId64 " expected\n", out_len, plen + max_new);
        return -1.0;
    }
    return ms;
}

static int run_case(gpucore_context *ctx, const char *dir, const int64_t *tokens, const char *dt_name, int dt,
                    int64_t batch, int64_t plen, int64_t nnew, int repeats, int profile)
{
    char cs[64];
    snprintf(cs, sizeof cs, "B%" PRId64 " P%" PRId64 " N%" PRId64 " %s", batch, plen, nnew, dt_name);
    gpucore_lm *lm = NULL;
    int64_t *prompt = malloc((size_t)(batch * plen) * sizeof *prompt);
    int64_t *out = malloc((size_t)(batch * (plen + nnew)) * sizeof *out);
    int rc = 1;
    if (!prompt || !out) { fprintf(stderr, "bench_generate: out of host memory\n"); goto done; }
    for (int64_t i = 0; i < batch * plen; i++) prompt[i] = tokens[i % LM_NTOK];
    gpucore_memory_empty_cache(ctx, GPUCORE_MEMORY_DEVICE);
    gpucore_memory_reset_peak_stats(ctx, GPUCORE_MEMORY_DEVICE);
    if (gpucore_lm_create(ctx, dir, dt, &lm)) {
        fprintf(stderr, "bench_generate: gpucore_lm_create(%s): %s\n", dir, gpucore_last_error());
        goto done;
    }
    double pre[MAX_REPEATS], all[MAX_REPEATS];
    if (timed_generate(lm, prompt, batch, plen, nnew, out) < 0) goto done; /* warm-up */
    for (int r = 0; r < repeats; r++) {
        pre[r] = timed_generate(lm, prompt, batch, plen, 1, out);
        if (profile && r == repeats - 1) {
            gpucore_profiler_reset(ctx);
            gpucore_profiler_enable(ctx, 1);
        }
        all[r] = pre[r] < 0 ? -1 : timed_generate(lm, prompt, batch, plen, nnew, out);
        if (all[r] < 0) goto done;
        if (!json) fprintf(stderr, "bench_generate: %s run %d: prefill %.1f ms, all %.1f ms\n", cs, r, pre[r], all[r]);
    }
    if (profile) lm_print_profile(ctx, "bench_generate", cs, "last run");
    const double p = median(pre, repeats), a = median(all, repeats);
    const double step = nnew > 1 ? (a - p) / (double)(nnew - 1) : 0.0;
    const double tps = (double)(batch * nnew) / (a * 1e-3);
    gpucore_memory_stats mst;
    mst.struct_size = sizeof mst;
    gpucore_memory_get_stats(ctx, GPUCORE_MEMORY_DEVICE, &mst);
    row(cs, "new_tokens_per_s", tps, "tokens/s");
    row(cs, "prefill_ms", p, "ms");
    if (nnew > 1) {
        row(cs, "decode_step_ms", step, "ms");
        row(cs, "decode_tokens_per_s", (double)batch / (step * 1e-3), "tokens/s");
    }
    row(cs, "peak_allocated_bytes", (double)mst.allocated_bytes_peak, "bytes");
    if (batch == 1 && n_b1_cases < MAX_CASES) {
        snprintf(b1_cases[n_b1_cases].name, sizeof b1_cases[n_b1_cases].name, "%s", cs);
        b1_cases[n_b1_cases].prefill_tps = (double)plen / (p * 1e-3);
        b1_cases[n_b1_cases++].decode_tps = step > 0 ? 1.0 / (step * 1e-3) : 0.0;
    }
    const double bw = read_bandwidth_gbs((size_t)1 << 30, 0); /* again after each case: the best seen counts */
    if (bw > read_gbs) read_gbs = bw;
    int64_t wbytes = 0;
    gpucore_lm_decode_bytes(lm, &wbytes);
    const double stream_gbs = step > 0 ? (double)wbytes / (step * 1e-3) / 1e9 : 0.0;
    if (nnew > 1) {
        row(cs, "decode_weight_stream", stream_gbs, "GB/s");
        if (read_gbs > 0) row(cs, "decode_fraction_of_read_bandwidth", stream_gbs / read_gbs, "ratio");
    }
    const int64_t shown = nnew < SHOWN_IDS ? nnew : SHOWN_IDS;
    if (ours_file) { /* row 0's new ids, for the peer's agreement check */
        fprintf(ours_file, "{\"bench\":\"generate\",\"case\":\"%s\",\"metric\":\"ids\",\"values\":[", cs);
        for (int64_t i = 0; i < nnew; i++) fprintf(ours_file, "%s%" PRId64, i ? "," : "", out[plen + i]);
        fprintf(ours_file, "]}\n");
        fflush(ours_file);
    }
    if (!json) {
        printf("%-20s %9.1f %10.1f %9.2f %9.1f %6.1f %4.0f%% %9.2f GB  ", cs, tps, p, step,
               step > 0 ? (double)batch / (step * 1e-3) : 0, stream_gbs, read_gbs > 0 ? 100 * stream_gbs / read_gbs : 0,
               (double)mst.allocated_bytes_peak / 1e9);
        for (int64_t i = 0; i < shown; i++) printf("%s%" PRId64, i ? " " : "", out[plen + i]);
        printf("\n");
        fflush(stdout);
    }
    rc = 0;
done:
    gpucore_lm_destroy(lm);
    free(prompt);
    free(out);
    return rc;
}

int main(int argc, char **argv)
{
    const char *dev = NULL, *dir = NULL, *model = NULL, *llama_bench = NULL;
    char dtypes[64] = "f32,bf16", batches[64] = "1,4", dirbuf[LM_PATH_LEN];
    int full = 0, repeats = -1, profile = 0;
    int64_t plen = 64, nnew = 64;
    const char *usage = "usage: bench_generate [--json] [--quick|--full] [--device cpu|cuda] [--dir DIR] [--model PATH] [--llama-bench BIN] "
                        "[--dtype f32,bf16] [--batch 1,4] [--prompt 64] [--new 64] [--repeats R] [--profile]\n";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--quick")) full = 0;
        else if (!strcmp(a, "--full")) full = 1;
        else if (!strcmp(a, "--profile")) profile = 1;
        else if (v && !strcmp(a, "--device")) dev = v, i++;
        else if (v && !strcmp(a, "--dir")) dir = v, i++;
        else if (v && !strcmp(a, "--model")) model = v, i++;
        else if (v && !strcmp(a, "--llama-bench")) llama_bench = v, i++;
        else if (v && !strcmp(a, "--dtype")) snprintf(dtypes, sizeof dtypes, "%s", v), i++;
        else if (v && !strcmp(a, "--batch")) snprintf(batches, sizeof batches, "%s", v), i++;
        else if (v && !strcmp(a, "--prompt")) plen = atoll(v), i++;
        else if (v && !strcmp(a, "--new")) nnew = atoll(v), i++;
        else if (v && !strcmp(a, "--repeats")) repeats = atoi(v), i++;
        else { fputs(usage, stderr); return 2; }
    }
    if (repeats < 0) repeats = full ? 7 : 3;
    if (repeats < 1 || repeats > MAX_REPEATS || plen < 1 || nnew < 1 || plen + nnew > LM_POSITIONS) {
        fprintf(stderr, "bench_generate: --repeats 1..%d, --prompt >= 1, --new >= 1, prompt + new <= %d\n", MAX_REPEATS,
                LM_POSITIONS);
        return 2;
    }
    if (!dir) dir = lm_fixture_default_dir(dirbuf, sizeof dirbuf);
    const char *dtv[4], *bv[8];
    int ndt = lm_split_list(dtypes, dtv, 4), nb = lm_split_list(batches, bv, 8);
    for (int d = 0; d < ndt; d++)
        if (strcmp(dtv[d], "f32") && strcmp(dtv[d], "bf16")) {
            fprintf(stderr, "bench_generate: --dtype %s: f32 or bf16\n", dtv[d]);
            return 2;
        }
    for (int b = 0; b < nb; b++)
        if (atoll(bv[b]) < 1) { fprintf(stderr, "bench_generate: --batch %s: >= 1\n", bv[b]); return 2; }
    gpucore_context *ctx = NULL;
    if (gpucore_context_create(dev, &ctx)) {
        fprintf(stderr, "bench_generate: %s\n", gpucore_last_error());
        return 1;
    }
    device_name = gpucore_context_device_name(ctx);
    int64_t *tokens = NULL;
    if (model) { /* a user's model: prompt ids spread over the first 1000 of its vocabulary */
        tokens = malloc(LM_NTOK * sizeof *tokens);
        for (int64_t i = 0; tokens && i < LM_NTOK; i++) tokens[i] = 3 + (int64_t)(((uint64_t)i * 2654435761u) % 997u);
        if (!tokens) fprintf(stderr, "bench_generate: out of host memory\n");
    } else if (!lm_fixture_ensure(ctx, dir)) {
        tokens = lm_fixture_tokens(dir);
    }
    if (!tokens) { gpucore_context_destroy(ctx); return 1; }
    read_gbs = read_bandwidth_gbs((size_t)1 << 30, 0);
    char path[LM_PATH_LEN];
    ours_file = model || lm_fixture_path(path, dir, "ours_generate.jsonl") ? NULL : fopen(path, "w");
    if (!ours_file && !model) fprintf(stderr, "bench_generate: cannot write %s (the peer will not compare ids)\n", path);
    if (!json) {
        printf("bench_generate on %s: %s greedy generation with the KV cache, %d runs after a warm-up, model "
               "in %s\n", device_name, model ? "a given model's" : "GPT-2 124M", repeats, model ? model : dir);
        printf("machine read bandwidth (a streaming read, %s threads): %.1f GB/s\n",
               getenv("OMP_NUM_THREADS") ? getenv("OMP_NUM_THREADS") : "all", read_gbs);
        printf("%-20s %9s %10s %9s %9s %6s %5s %12s  %s\n", "case", "tokens/s", "prefill ms", "step ms", "decode/s", "GB/s",
               "of bw", "peak alloc", "first new ids of row 0");
    }
    int rc = 0;
    for (int d = 0; d < ndt; d++)
        for (int b = 0; b < nb; b++)
            rc |= run_case(ctx, model ? model : dir, tokens, dtv[d], !strcmp(dtv[d], "f32") ? GPUCORE_F32 : GPUCORE_BF16, atoll(bv[b]),
                           plen, nnew, repeats, profile);
    if (!json)
        printf("tokens/s: new tokens of all sequences over the whole call; decode/s: sequences / step time; GB/s: the "
               "base weights' bytes per decode step; of bw: of the best read bandwidth measured so far (last: %.1f GB/s)\n",
               read_gbs);
    row("machine", "read_bandwidth", read_gbs, "GB/s");
    if (llama_bench && !model) {
        fprintf(stderr, "bench_generate: --llama-bench needs --model FILE.gguf (the file both run)\n");
        rc = 1;
    } else if (llama_bench) {
        rc |= run_llama_bench(llama_bench, model, plen, nnew, repeats);
    }
    if (ours_file) fclose(ours_file);
    free(tokens);
    gpucore_context_destroy(ctx);
    return rc;
}
