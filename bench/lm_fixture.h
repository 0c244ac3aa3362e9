/*
 * lm_fixture.h — the GPT-2 124M model folder and token stream that the language-model
 * benchmarks (bench_lm: training, bench_generate: generation) and their peers share: a
 * Hugging Face GPT-2 folder (config.json, model.safetensors with GPT-2's initialisation:
 * N(0, 0.02), residual projections scaled by 1/sqrt(2·n_layer), biases 0, norms 1; no
 * dropout) and tokens.i64 (LM_NTOK seeded splitmix64 ids), written once into DIR (--dir,
 * else $GPUCORE_BENCH_LM_DIR, else $TMPDIR/gpucore-bench-lm) and stamped by fixture.txt.
 */
#ifndef GPUCORE_BENCH_LM_FIXTURE_H
#define GPUCORE_BENCH_LM_FIXTURE_H

#include <stddef.h>
#include <stdint.h>
#include "gpucore.h"

enum { LM_VOCAB = 50257, LM_LAYERS = 12, LM_WIDTH = 768, LM_HEADS = 12, LM_POSITIONS = 1024 };
enum { LM_NTOK = 1 << 16 }; /* ids in the token stream (64 steps of B 4, T 256) */
enum { LM_PATH_LEN = 4096 };

/* $GPUCORE_BENCH_LM_DIR, else $TMPDIR/gpucore-bench-lm, in buf. */
const char *lm_fixture_default_dir(char *buf, size_t len);
/* out = dir/leaf (out has LM_PATH_LEN bytes); nonzero (said on stderr) when it does not fit. */
int lm_fixture_path(char *out, const char *dir, const char *leaf);
/* Write the folder unless its stamp says it holds this fixture already; nonzero on failure (said). */
int lm_fixture_ensure(gpucore_context *ctx, const char *dir);
/* The LM_NTOK token ids (malloc'd), or NULL (said). */
int64_t *lm_fixture_tokens(const char *dir);
/* The comma-separated items of s (cut in place) into out[0..max); their count. */
int lm_split_list(char *s, const char **out, int max);
/* Stop the library profiler of ctx and print its per-op table to stderr ("who: cs, what by op:"). */
void lm_print_profile(gpucore_context *ctx, const char *who, const char *cs, const char *what);

#endif
