#!/usr/bin/env bash
# gpu-run.sh — what a lent GPU machine should check, in stages sized for its real window: one command
# may run at most 10 minutes and the whole window is about 15 minutes, the machine's start included.
# Nothing is compiled there: the sm_90 build is made HERE and travels with the working tree.
#
#   bench/gpu-run.sh --build-here         here: configure and build for sm_90 (cuDNN/NCCL linked by the
#                                         sonames the wheels ship: libcudnn.so.9, libnccl.so.2), then prune
#                                         the build folder to what runs (< 64 MiB) so the device tool can
#                                         carry it (carry: ["build-gpu"])
#   OUT=dir bench/gpu-run.sh --stage N    on the device: stage N, or a range "1-3", each bounded by
#                                         GPU_RUN_STAGE_S (default 470 s, under 8 minutes):
#                                           1 doctor (gpucore-info) + smoke (quickstart, test_core)
#                                           2 contract-sensitive tests with GPUCORE_LOG=info: matmul (every
#                                             epilogue, misaligned bias), conv (fused and unfused), attention
#                                             (cuDNN SDPA engine, tensor-core kernels), comm and DDP (grouped),
#                                             and counts of fallback-GEMM and fallback-attention uses
#                                           3 the rest of the test executables
#                                           4 compute-sanitizer memcheck on two tests
#                                           5 benchmarks and the PyTorch peers
#   GPU_RUN_DRY=1 OUT=dir bench/gpu-run.sh --stage 1-5
#                                         here, without a GPU: the stages on the contract module (tests/
#                                         cuda_contract, build folder GPU_RUN_BUILD, default build), which
#                                         checks this script and gives the stage timings
# Results: $OUT/stageN/*.log, $OUT/stageN/summary.txt (rc and seconds per step), $OUT/summary.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
DRY=${GPU_RUN_DRY:-0}
if [ "$DRY" = 1 ]; then BUILD=${GPU_RUN_BUILD:-build}; else BUILD=${GPU_RUN_BUILD:-build-gpu}; fi
STAGE_S=${GPU_RUN_STAGE_S:-470}

build_here() {
  local t0=$SECONDS
  meson setup "$BUILD" -Dcuda=enabled -Dgpu_archs=90 -Dgpu_ptx_archs=90 -Dbuildtype=release -Demulated=disabled \
    --reconfigure >/dev/null 2>&1 || meson setup "$BUILD" -Dcuda=enabled -Dgpu_archs=90 -Dgpu_ptx_archs=90 \
    -Dbuildtype=release -Demulated=disabled || return 1
  ninja -C "$BUILD" || return 1
  [ -f "$BUILD/src/backend/cuda/libgpucore_cuda.so" ] || { echo "no CUDA module was built (is nvcc found?)"; return 1; }
  # What runs there: executables and shared objects. Objects, static archives and dependency files stay here.
  find "$BUILD" \( -name '*.o' -o -name '*.a' -o -name '*.d' -o -name '*.gcno' \) -delete
  rm -rf "$BUILD/meson-logs" "$BUILD/fuzz"
  echo "build-here: $(du -sh "$BUILD" | cut -f1) in $BUILD after $((SECONDS - t0)) s (the device tool carries up to 64 MiB)"
  ldd "$BUILD/src/backend/cuda/libgpucore_cuda.so" | grep -E "cudnn|nccl|cublas" || true
}

# The CUDA libraries on the device come from the Python wheels (nvidia.*): put their lib folders on the
# loader path (the module is linked by soname).
wheel_libs() {
  local d p=""
  for m in cudnn nccl cublas cuda_runtime cuda_nvrtc; do
    d=$(python3 -c "import importlib; print(list(importlib.import_module('nvidia.$m').__path__)[0])" 2>/dev/null)
    [ -n "$d" ] && [ -d "$d/lib" ] && p="$p:$d/lib"
  done
  export LD_LIBRARY_PATH="${p#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

# step NAME COMMAND...: log to $DIR/NAME.log, bounded by what is left of the stage; record rc and seconds.
step() {
  local name=$1 left=$((DEADLINE - SECONDS))
  shift
  if [ "$left" -le 5 ]; then
    echo "$(printf '%-28s skipped: the stage ran out of time' "$name")" >>"$DIR/summary.txt"
    return 124
  fi
  local t0=$SECONDS
  timeout -k 5 "$left" "$@" >"$DIR/$name.log" 2>&1
  local rc=$?
  printf '%-28s rc=%-3s %4ss\n' "$name" "$rc" "$((SECONDS - t0))" | tee -a "$DIR/summary.txt"
  return $rc
}

T="$BUILD/tests"
test_exe() { [ -x "$T/$1" ] && echo "$T/$1"; }

stage1() {
  step info "$BUILD/src/tools/gpucore-info"
  "$BUILD/src/tools/gpucore-info" --json >"$DIR/info.json" 2>/dev/null
  [ -x "$BUILD/examples/quickstart" ] && step quickstart env GPUCORE_DEVICE=cuda "$BUILD/examples/quickstart"
  step test_core "$T/test_core"
}

stage2() {
  local t
  for t in test_matmul test_conv test_attention; do
    test_exe $t >/dev/null && step $t env GPUCORE_LOG=info "$T/$t"
  done
  for t in test_comm test_ddp; do
    test_exe $t >/dev/null && step ${t}_local env GPUCORE_LOG=info "$T/$t" local
  done
  [ "$DRY" = 1 ] && test_exe cuda_contract/test_cuda_contract >/dev/null &&
    step test_cuda_contract env GPUCORE_LOG=info "$T/cuda_contract/test_cuda_contract"
  # the fallback GEMM kernel is far slower than cuBLASLt: every use is worth a look
  grep -h "fallback GEMM kernel" "$DIR"/*.log 2>/dev/null | sed 's/^.*matmul: //' | sort | uniq -c | sort -rn \
    >"$DIR/fallback_gemm.txt"
  echo "fallback GEMM plans: $(wc -l <"$DIR/fallback_gemm.txt") (listed in fallback_gemm.txt)" | tee -a "$DIR/summary.txt"
  # attention keys cuDNN's SDPA declined (each logged once at WARN with its reason) ran on our kernels
  grep -h "attention: .*the attention kernel" "$DIR"/*.log 2>/dev/null | sort | uniq -c | sort -rn >"$DIR/fallback_attention.txt"
  echo "attention keys on the kernel fallback: $(wc -l <"$DIR/fallback_attention.txt") (fallback_attention.txt)" | tee -a "$DIR/summary.txt"
}

stage3() {
  local t n
  for t in "$T"/test_*; do
    n=$(basename "$t")
    [ -x "$t" ] || continue
    case $n in test_matmul | test_conv | test_attention | test_core | test_comm | test_ddp | *.p) continue ;; esac
    step "$n" "$t"
  done
}

stage4() {
  local cs t
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  if [ "$DRY" = 1 ] || [ ! -x "$cs" ]; then
    echo "memcheck: skipped ($([ "$DRY" = 1 ] && echo 'a dry run has no GPU' || echo "no compute-sanitizer at $cs"))" |
      tee -a "$DIR/summary.txt"
    return 0
  fi
  for t in test_matmul test_ops_elementwise; do
    test_exe $t >/dev/null && step memcheck_$t "$cs" --tool memcheck --leak-check full --error-exitcode 9 "$T/$t"
  done
}

stage5() {
  local b n p
  # a dry run computes every GEMM and convolution on the host: only check that the benchmarks start
  [ "$DRY" = 1 ] && DEADLINE=$((SECONDS + 60))
  if [ -x "$BUILD/bench/gpucore-bench" ]; then
    step bench "$BUILD/bench/gpucore-bench" --quick --json --out "$DIR/bench.jsonl"
  else
    for b in "$BUILD"/bench/bench_*; do
      [ -x "$b" ] || continue
      n=$(basename "$b")
      step "$n" sh -c "GPUCORE_DEVICE=cuda '$b' --json > '$DIR/$n.jsonl'"
    done
  fi
  [ "$DRY" = 1 ] && return 0 # the peers need a GPU PyTorch
  for p in bench/peers/torch_*.py; do
    [ -f "$p" ] || continue
    n=$(basename "$p" .py)
    step "$n" sh -c "python3 '$p' --json > '$DIR/$n.jsonl'"
  done
}

case "${1:-}" in
--build-here) build_here; exit $? ;;
--stage) RANGE=${2:?--stage N or N-M} ;;
*) sed -n '2,27p' "$0"; exit 2 ;;
esac
OUT=${OUT:?set OUT to the folder for logs and results}
mkdir -p "$OUT"
FIRST=${RANGE%-*}
LAST=${RANGE#*-}
if [ "$DRY" = 1 ]; then
  export GPUCORE_CUDA_PLUGIN=$PWD/$BUILD/tests/cuda_contract/libgpucore_cuda_contract.so
  # the module opens cuDNN and NCCL with dlopen; their stand-ins are inside it
  export GPUCORE_CUDNN_LIBRARY=$GPUCORE_CUDA_PLUGIN GPUCORE_NCCL_LIBRARY=$GPUCORE_CUDA_PLUGIN
  [ -f "$GPUCORE_CUDA_PLUGIN" ] || { echo "dry run: build $BUILD's contract module first (ninja -C $BUILD)"; exit 1; }
else
  [ -f "$BUILD/src/backend/cuda/libgpucore_cuda.so" ] || { echo "no $BUILD: run --build-here first, carry it"; exit 1; }
  wheel_libs
fi
{
  date -u +"date %Y-%m-%dT%H:%M:%SZ"
  echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown) build $BUILD dry=$DRY"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi: not found"
} >"$OUT/machine.txt"
for s in $(seq "$FIRST" "$LAST"); do
  DIR="$OUT/stage$s"
  mkdir -p "$DIR"
  : >"$DIR/summary.txt"
  DEADLINE=$((SECONDS + STAGE_S))
  t0=$SECONDS
  echo "== stage $s"
  "stage$s"
  printf 'stage %s: %ss\n' "$s" "$((SECONDS - t0))" | tee -a "$OUT/summary.txt"
done
