#!/usr/bin/env bash
# gpu-run.sh — everything a lent GPU machine should check, in one call (~8 minutes):
# build for sm_90 with the cuDNN/NCCL of the Python wheels, gpucore-info, the whole test suite
# on the CUDA backend, compute-sanitizer (memcheck, racecheck, initcheck) on a representative
# subset, the benchmarks with the PyTorch peers, and the examples.
# All logs and JSON go under $OUT; a short table is printed last.
#   usage: OUT=/some/dir bench/gpu-run.sh      (the device tool sets OUT)
#   GPU_RUN_DRY=1 stops after the build (checks this script on machines without a GPU).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to the folder for logs and results}
mkdir -p "$OUT"
BUILD=${GPU_RUN_BUILD:-build-gpu}
SUMMARY=()

# step NAME COMMAND...: run it, log to $OUT/NAME.log, record exit code and seconds.
step() {
  local name=$1
  shift
  local t0=$SECONDS
  echo "== $name"
  "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  SUMMARY+=("$(printf '%-24s rc=%-3s %4ss' "$name" "$rc" "$((SECONDS - t0))")")
  tail -n 3 "$OUT/$name.log"
  return $rc
}

finish() {
  echo
  echo "== summary (logs under $OUT)"
  printf '%s\n' "${SUMMARY[@]}" | tee "$OUT/summary.txt"
  grep -h "^tests:" "$OUT/tests.log" 2>/dev/null | tail -1
}

{
  date -u +"date %Y-%m-%dT%H:%M:%SZ"
  echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi: not found"
} | tee "$OUT/machine.txt"

# cuDNN and NCCL come from the Python wheels there. Their lib folders hold only versioned
# names (libcudnn.so.9), so make a folder with the unversioned link names the linker wants.
WHEELS=$(mktemp -d /tmp/gpucore-wheels.XXXX)
wheel_dir() {
  python3 -c "import importlib, os; m = importlib.import_module('$1'); print(list(m.__path__)[0])" 2>/dev/null
}
MESON_ARGS=(-Dgpu_archs=90 -Dgpu_ptx_archs=90 -Dbuildtype=release)
for lib in cudnn nccl; do
  d=$(wheel_dir "nvidia.$lib")
  if [ -n "$d" ] && [ -d "$d/lib" ]; then
    mkdir -p "$WHEELS/$lib/lib"
    ln -sfn "$d/include" "$WHEELS/$lib/include"
    for so in "$d"/lib/lib*.so*; do
      [ -e "$so" ] || continue
      base=$(basename "$so")
      ln -sfn "$so" "$WHEELS/$lib/lib/$base"
      ln -sfn "$so" "$WHEELS/$lib/lib/${base%%.so*}.so"
    done
    MESON_ARGS+=("-D${lib}_dir=$WHEELS/$lib")
  fi
done
echo "meson options: ${MESON_ARGS[*]}" | tee -a "$OUT/machine.txt"

export GPUCORE_SKIP_INSTALL=1
if ! step build scripts/setup.sh "$BUILD" "${MESON_ARGS[@]}"; then
  finish
  exit 1
fi
if [ "${GPU_RUN_DRY:-0}" = 1 ]; then
  finish
  exit 0
fi

step info "$BUILD"/src/tools/gpucore-info
"$BUILD"/src/tools/gpucore-info --json >"$OUT/info.json" 2>/dev/null

# The whole suite: every op test runs on every backend present, so CUDA is exercised here.
GPUCORE_SKIP_SANITIZERS=1 BUILD_DIR=$BUILD step tests scripts/test.sh
cp "$BUILD"/meson-logs/testlog.txt "$OUT/meson-testlog.txt" 2>/dev/null

CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ -x "$CS" ]; then
  for t in test_tensor test_ops test_matmul test_allocator; do
    [ -x "$BUILD/tests/$t" ] || continue
    step "memcheck_$t" "$CS" --tool memcheck --leak-check full --error-exitcode 9 "$BUILD/tests/$t"
  done
  for t in test_ops test_tensor; do
    [ -x "$BUILD/tests/$t" ] || continue
    step "racecheck_$t" "$CS" --tool racecheck --error-exitcode 9 "$BUILD/tests/$t"
    step "initcheck_$t" "$CS" --tool initcheck --error-exitcode 9 "$BUILD/tests/$t"
    break
  done
else
  SUMMARY+=("compute-sanitizer not found")
fi

if [ -x "$BUILD/bench/gpucore-bench" ]; then
  step bench "$BUILD"/bench/gpucore-bench --quick --json --out "$OUT/bench.jsonl"
else
  for b in "$BUILD"/bench/bench_*; do
    [ -x "$b" ] || continue
    n=$(basename "$b")
    step "$n" sh -c "GPUCORE_DEVICE=cuda '$b' --json > '$OUT/$n.jsonl'"
  done
fi
for p in bench/peers/torch_*.py; do
  [ -f "$p" ] || continue
  n=$(basename "$p" .py)
  step "$n" sh -c "python3 '$p' --json > '$OUT/$n.jsonl'"
done
if [ -x "$BUILD/examples/train_cnn" ]; then
  step train_cnn env GPUCORE_DEVICE=cuda "$BUILD"/examples/train_cnn --steps 200
fi
step quickstart env GPUCORE_DEVICE=cuda "$BUILD"/examples/quickstart
finish
