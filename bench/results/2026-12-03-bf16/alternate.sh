#!/bin/bash
# alternate.sh — how bench_lm-{before,after}-{1,2}.txt were made: the same bench_lm binary (this
# branch's build-release) run with main's library (BEFORE_LIB: a folder holding main's
# libgpucore.so.0, built before any change; LD_LIBRARY_PATH wins over the binary's RUNPATH) and with
# this branch's, in turn, twice; each run 5 rounds of f32 then bf16 (B4 T64, 1 warm-up + 3 steps).
#   usage: BEFORE_LIB=DIR OUT=DIR bench/results/2026-12-03-bf16/alternate.sh
set -u
cd "$(dirname "$0")/../../.."
: "${BEFORE_LIB:?set BEFORE_LIB to the folder holding the libgpucore.so.0 of main}" "${OUT:?set OUT}"
load() { echo "$(cat /proc/loadavg); processes running: $(ps -eo stat= | grep -c '^R')"; }
for i in 1 2; do
  for which in before after; do
    out=$OUT/bench_lm-$which-$i.txt
    { echo "# $which run $i, $(date -u +%FT%TZ)"; echo "# load before: $(load)"; } > "$out"
    if [ $which = before ]; then
      LD_LIBRARY_PATH=$BEFORE_LIB build-release/bench/bench_lm --seq 64 --steps 3 --rounds 5 >> "$out" 2>&1
    else
      build-release/bench/bench_lm --seq 64 --steps 3 --rounds 5 >> "$out" 2>&1
    fi
    echo "# load after: $(load)" >> "$out"
  done
done
