#!/bin/bash
# More alternations of the f32 and bf16 decode of SmolLM2-135M-Instruct's f32 copy against llama.cpp
# (tg64 with 64 tokens in its context, -d 64): ours then llama-bench, ROUNDS times (default 4).
#   LLAMA_BENCH=path/to/llama-bench [BUILD=build-release] [ROUNDS=4] bench/results/2026-12-07-decode2/rounds.sh
set -u
BUILD=${BUILD:-build-release}
F32=${F32:-/tmp/smollm2-f32.gguf}
export OMP_NUM_THREADS=2
for r in $(seq "${ROUNDS:-4}"); do
  echo "== round $r; load: $(cut -d' ' -f1-3 /proc/loadavg)"
  "$BUILD/bench/bench_generate" --model "$F32" --batch 1 --dtype f32,bf16 --repeats 5 2>&1 | grep -E '^B1|bandwidth'
  "$LLAMA_BENCH" -m "$F32" -p 0 -n 64 -d 64 -t 2 -r 5 2>/dev/null | grep -E 'tg64'
done
