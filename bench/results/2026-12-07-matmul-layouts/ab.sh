#!/bin/bash
# ab.sh — runs bench_matmul (BENCH, arguments passed on) against two builds' libgpucore.so, alternated:
# OLD and NEW are the folders holding each build's libgpucore.so.0; ROUNDS (default 2) rounds of old, new.
#   OLD=/path/old/src NEW=build/src BENCH=build/bench/bench_matmul ROUNDS=2 ./ab.sh --gpt2 --only "f32 "
for round in $(seq ${ROUNDS:-2}); do for v in old new; do
  if [ $v = old ]; then L=$OLD; else L=$NEW; fi
  echo "== $v round $round load $(cut -d' ' -f1-3 /proc/loadavg)"
  LD_LIBRARY_PATH=$L "$BENCH" "$@" | grep -v "FMA peak\|bf16 peak (\|^bench_matmul"
done; done
