#!/usr/bin/env bash
# test.sh — set up, build, and run every test:
#   1. the C tests (meson test) in the normal build (CUDA module included where the toolkit exists),
#   2. the same C tests in an AddressSanitizer + UndefinedBehaviorSanitizer (+LeakSanitizer) build,
#   3. the same C tests in a ThreadSanitizer build (OpenMP off: libgomp is not instrumented),
#   4. bounded libFuzzer runs of the fuzz targets (scripts/fuzz.sh),
#   5. the Python tests (pytest) against the normal build,
#   6. PyTorch's OpInfo samples of our ops through the binding (python/torch_tests, Debian's python3 + torch),
#   7. the install paths (tests/test_install.sh): meson install with CMake and pkg-config consumers, and
#      `pip install .` into a fresh venv (GPUCORE_SKIP_INSTALL_TEST=1 skips this stage).
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

# run_pytest LABEL PYTHON DIR LOG [pytest args...]: run pytest on DIR with PYTHON against the normal
# build and add up its closing line; a non-zero exit other than "no tests" (5) fails the run.
run_pytest() {
  local label=$1 py=$2 dir=$3 log=$4
  shift 4
  echo "== $label"
  set +e
  GPUCORE_LIBRARY="$PWD/$BUILD_DIR/src/libgpucore.so" PYTHONPATH="$PWD/python:$PWD/build-pydeps" \
    "$py" -m pytest -q -p no:cacheprovider "$@" "$dir" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  set -e
  [ "$rc" = 0 ] || [ "$rc" = 5 ] || status=1
  local counts p f s
  counts=$(tail -n 1 "$log")
  p=$(grep -oE '[0-9]+ passed' <<<"$counts" | grep -oE '[0-9]+' || echo 0)
  f=$( (grep -oE '[0-9]+ (failed|errors?)' <<<"$counts" || true) | awk '{s+=$1} END {print s+0}')
  s=$(grep -oE '[0-9]+ skipped' <<<"$counts" | grep -oE '[0-9]+' || echo 0)
  # a crash that leaves no closing line still counts as a failure
  if [ "$rc" != 0 ] && [ "$rc" != 5 ] && [ "${f:-0}" = 0 ]; then f=1; fi
  passed=$((passed + p)); failed=$((failed + ${f:-0})); skipped=$((skipped + s))
}

if [ -d python/tests ] && ls python/tests/test_*.py >/dev/null 2>&1; then
  run_pytest "Python tests" python3 python/tests "$BUILD_DIR/pytest.log" -rs
fi

# PyTorch's own operator samples (OpInfo) through the binding, against torch in float64, under the
# python3 that has torch (Debian's python3-torch; GPUCORE_TORCH_PYTHON chooses another).
if [ -d python/torch_tests ]; then
  TORCH_PY=${GPUCORE_TORCH_PYTHON:-/usr/bin/python3}
  if PYTHONPATH="$PWD/build-pydeps" "$TORCH_PY" -c "import torch, expecttest, pytest, numpy" 2>/dev/null; then
    GPUCORE_OPINFO_REPORT="$PWD/$BUILD_DIR/opinfo.json" \
      run_pytest "PyTorch OpInfo samples ($TORCH_PY)" "$TORCH_PY" python/torch_tests "$BUILD_DIR/pytest-torch.log" -s
  else
    echo "SKIP PyTorch OpInfo samples: $TORCH_PY cannot import torch, expecttest, pytest and numpy (scripts/setup.sh installs them)"
    skipped=$((skipped + 1))
  fi
fi

# The install paths a user takes: meson install + CMake/pkg-config consumers, the wheel in a fresh venv.
if [ "${GPUCORE_SKIP_INSTALL_TEST:-0}" != 1 ]; then
  start=$SECONDS
  echo "== install paths (tests/test_install.sh)"
  set +e
  tests/test_install.sh 2>&1 | tee "$BUILD_DIR/install-test.log"
  rc=${PIPESTATUS[0]}
  set -e
  [ "$rc" = 0 ] || status=1
  line=$(grep -E "^install: [0-9]+ passed, [0-9]+ failed" "$BUILD_DIR/install-test.log" | tail -1 || true)
  ip=$(grep -oE '[0-9]+ passed' <<<"$line" | grep -oE '[0-9]+' || echo 0)
  if [ -n "$line" ]; then if_=$(grep -oE '[0-9]+ failed' <<<"$line" | grep -oE '[0-9]+'); else if_=1; fi
  is=$(grep -oE '[0-9]+ skipped' <<<"$line" | grep -oE '[0-9]+' || echo 0)
  # a non-zero exit with no failure counted (a crash before the closing line) is still a failure
  if [ "$rc" != 0 ] && [ "$if_" = 0 ]; then if_=1; fi
  passed=$((passed + ip)); failed=$((failed + if_)); skipped=$((skipped + is))
  echo "== install paths: $ip passed, $if_ failed, $is skipped in $((SECONDS - start)) s"
fi

echo "tests: $passed passed, $failed failed, $skipped skipped"
exit $status
