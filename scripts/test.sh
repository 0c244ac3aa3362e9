#!/usr/bin/env bash
# test.sh — set up, build, and run every test:
#   1. the C tests (meson test) in the normal build (CUDA module included where the toolkit exists),
#   2. the same C tests in an AddressSanitizer + UndefinedBehaviorSanitizer (+LeakSanitizer) build,
#   3. the same C tests in a ThreadSanitizer build (OpenMP off: libgomp is not instrumented),
#   4. bounded libFuzzer runs of the fuzz targets (scripts/fuzz.sh),
#   5. the Python tests (pytest) against the normal build.
# Prints one closing line "tests: N passed, N failed, N skipped" and exits non-zero on any failure.
# GPUCORE_SKIP_SANITIZERS=1 skips 2, 3 and 4 (used by the GPU run script); GPUCORE_SKIP_FUZZ=1 skips 4.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
scripts/setup.sh "$BUILD_DIR"

MESON="meson"
command -v meson >/dev/null 2>&1 || MESON="python3 -m mesonbuild.mesonmain"
status=0 passed=0 failed=0 skipped=0

# run_c_tests LABEL BUILD_DIR [meson test args...]: run and add up meson's per-test results.
run_c_tests() {
  local label=$1 dir=$2
  shift 2
  local start=$SECONDS
  echo "== C tests: $label ($dir)"
  $MESON test -C "$dir" --print-errorlogs --num-processes 2 "$@" || status=1
  grep -h "^SKIP" "$dir"/meson-logs/testlog.txt | sort -u || true
  local counts
  counts=$(python3 - "$dir" <<'PY'
import json, sys
ok = fail = skip = 0
for line in open(sys.argv[1] + "/meson-logs/testlog.json"):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if r["result"] == "OK": ok += 1
    elif r["result"] == "SKIP": skip += 1
    else: fail += 1
print(ok, fail, skip)
PY
)
  local p f s
  read -r p f s <<<"$counts"
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
  echo "== $label: $p passed, $f failed, $s skipped in $((SECONDS - start)) s"
}

run_c_tests "normal build" "$BUILD_DIR"

if [ "${GPUCORE_SKIP_SANITIZERS:-0}" != 1 ]; then
  scripts/setup.sh build-asan -Dcuda=disabled -Db_sanitize=address,undefined -Db_lundef=false
  # allocator_may_return_null: tests ask for 2^60 bytes to check the out-of-memory status; a real
  # malloc returns NULL there, ASan's default would abort instead.
  ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1 \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    run_c_tests "ASan+UBSan+LSan" build-asan --no-suite mpi
  # Tests launched by mpirun: LeakSanitizer off. Open MPI 4.1 leaks what MPI_Init allocates in
  # components it dlopens and unloads, so LSan cannot even name the frames to suppress them.
  # ASan and UBSan stay on; libgpucore's own objects are leak-checked by the same code paths
  # in the 1-rank tests above.
  ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=0 \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    run_c_tests "ASan+UBSan (MPI tests)" build-asan --suite mpi
  scripts/setup.sh build-tsan -Dcuda=disabled -Db_sanitize=thread -Db_lundef=false -Dopenmp=disabled
  # Not the tests launched by mpirun: Open MPI's own threads are not instrumented, so TSan would
  # report races inside it; the communicator's threading is exercised by the 1-rank tests.
  # OpenBLAS single-threaded here: with more than one thread it runs GEMM on its own pool
  # (blas_thread_init), an uninstrumented library whose synchronisation TSan cannot see, and
  # whether it does depends on the core type and thread count it detects on the machine at hand
  # (seen: Cooperlake kernels on 2 threads reported races, Prescott did not). Our own threads
  # (streams, the comm watchdog, the tests' worker threads) stay fully checked; nothing of ours
  # is suppressed.
  OPENBLAS_NUM_THREADS=1 TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    run_c_tests "TSan" build-tsan --no-suite mpi
fi

# Bounded libFuzzer runs (clang, ASan+UBSan) over fuzz/corpus/: API sequences, configuration
# strings, the safetensors parser. GPUCORE_FUZZ_SECONDS per target (default 60).
if [ "${GPUCORE_SKIP_SANITIZERS:-0}" != 1 ] && [ "${GPUCORE_SKIP_FUZZ:-0}" != 1 ]; then
  start=$SECONDS
  echo "== fuzzing"
  scripts/fuzz.sh "${GPUCORE_FUZZ_SECONDS:-60}" | tee "$BUILD_DIR/fuzz-summary.log" || status=1
  line=$(grep -E "^fuzz: [0-9]+ passed, [0-9]+ failed" "$BUILD_DIR/fuzz-summary.log" | tail -1 || true)
  fp=$(grep -oE '[0-9]+ passed' <<<"$line" | grep -oE '[0-9]+' || echo 0)
  ff=$(grep -oE '[0-9]+ failed' <<<"$line" | grep -oE '[0-9]+' || echo 1)
  passed=$((passed + fp)); failed=$((failed + ff))
  rm -f "$BUILD_DIR/fuzz-summary.log"
  echo "== fuzzing: $fp passed, $ff failed in $((SECONDS - start)) s"
fi

if [ -d python/tests ] && ls python/tests/test_*.py >/dev/null 2>&1; then
  echo "== Python tests"
  set +e
  GPUCORE_LIBRARY="$PWD/$BUILD_DIR/src/libgpucore.so" PYTHONPATH="$PWD/python" \
    python3 -m pytest -q python/tests -rs 2>&1 | tee "$BUILD_DIR/pytest.log"
  py=${PIPESTATUS[0]}
  set -e
  [ "$py" = 0 ] || [ "$py" = 5 ] || status=1
  counts=$(tail -n 1 "$BUILD_DIR/pytest.log")
  p=$(grep -oE '[0-9]+ passed' <<<"$counts" | grep -oE '[0-9]+' || echo 0)
  f=$( (grep -oE '[0-9]+ (failed|errors?)' <<<"$counts" || true) | awk '{s+=$1} END {print s+0}')
  s=$(grep -oE '[0-9]+ skipped' <<<"$counts" | grep -oE '[0-9]+' || echo 0)
  passed=$((passed + p)); failed=$((failed + ${f:-0})); skipped=$((skipped + s))
fi

echo "tests: $passed passed, $failed failed, $skipped skipped"
exit $status
