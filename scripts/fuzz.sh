#!/usr/bin/env bash
# fuzz.sh — build the libFuzzer targets (clang, ASan+UBSan) and run each one for a bounded time
# over its seed corpus in fuzz/corpus/<name>/ (new inputs go to a scratch copy, not the repo).
# Any crash file is left in build-fuzz/ and fails the run; add it to the corpus as a regression.
#   usage: scripts/fuzz.sh [SECONDS_PER_TARGET]   (default 60; FUZZ_SECONDS also works)
# Prints "fuzz: N passed, N failed" at the end.
set -uo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-${FUZZ_SECONDS:-60}}
CC=clang scripts/setup.sh build-fuzz -Dfuzzing=true -Dcuda=disabled -Dopenmp=disabled \
  -Db_sanitize=address,undefined -Db_lundef=false -Dtests=false || exit 1
passed=0 failed=0
for target in build-fuzz/fuzz/fuzz_*; do
  [ -x "$target" ] && [ -f "$target" ] || continue
  name=$(basename "$target")
  seeds="fuzz/corpus/${name#fuzz_}"
  work="build-fuzz/work-$name"
  mkdir -p "$work" "$seeds"
  echo "== $name for ${SECONDS_EACH}s (seeds: $seeds)"
  # allocator_may_return_null: inputs ask for absurd sizes on purpose; the library must get NULL
  # back and return GPUCORE_ERR_OUT_OF_MEMORY, which ASan's default abort would hide.
  ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "$target" -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 -timeout=20 -print_final_stats=1 \
    -artifact_prefix="build-fuzz/$name-" "$work" "$seeds" >"build-fuzz/$name.log" 2>&1
  rc=$?
  execs=$(grep -oE "stat::number_of_executed_units: *[0-9]+" "build-fuzz/$name.log" | grep -oE "[0-9]+$" | tail -1)
  if [ "$rc" = 0 ]; then
    passed=$((passed + 1))
    echo "   ok: ${execs:-?} executions, no crash"
  else
    failed=$((failed + 1))
    echo "   FAILED (exit $rc) after ${execs:-?} executions; log build-fuzz/$name.log:"
    grep -E "ERROR|SUMMARY|Test unit written" "build-fuzz/$name.log" | head -5
  fi
done
echo "fuzz: $passed passed, $failed failed"
[ "$failed" = 0 ]
