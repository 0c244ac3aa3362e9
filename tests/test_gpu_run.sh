#!/usr/bin/env bash
# test_gpu_run.sh — proves bench/gpu-run.sh here, before a GPU minute is spent on it:
#   1. a dry run on the strict stand-ins (GPU_RUN_DRY=1) under a short shared deadline: it ends inside
#      the deadline, leaves at most 8 files in OUT (summary.txt + at most 7 packed logs, each a readable
#      tar), the summary has every phase and an end line, the ldd step names the host-only libraries
#      the CI build links, the doctor, smoke and contract-sensitive steps pass on the stand-ins, no step
#      fails and the run ends RESULT: PASS (what needs a real GPU is marked so, not failed);
#   1b. the later phases' invocations: the models phase (naming the Python, PyTorch and transformers it
#      used) and suite steps of the model layer and the token data, test_mpi_optional's scenarios with
#      their arguments, all passing (GPU_RUN_ONLY keeps the suite to them);
#   2. a tiny deadline: the script stops on time and reports steps as not reached, not as passed;
#   3. the stand-ins with every device hidden: a test that skips the cuda backend fails its step;
#   3b. memcheck through a stand-in sanitizer: a kill at its own bound is "not concluded", an error fails;
#   4. the real (not dry) run on this machine, which has no GPU: it must fail, and say so.
# usage: tests/test_gpu_run.sh BUILD_DIR   (the normal build, with its tests/cuda_contract module)
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
fails=0 passes=0
ok() { echo "ok   $*"; passes=$((passes + 1)); }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }

if [ ! -f "$BUILD/tests/cuda_contract/libgpucore_cuda_contract.so" ]; then
  echo "SKIP test_gpu_run: $BUILD has no CUDA contract module (no CUDA toolkit here)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset GPUCORE_CUDA_PLUGIN GPUCORE_CUDNN_LIBRARY GPUCORE_NCCL_LIBRARY

# 1. dry run, short deadline
total=${GPU_RUN_TEST_TOTAL_S:-150}
t0=$SECONDS
GPU_RUN_DRY=1 GPU_RUN_BUILD=$BUILD GPU_RUN_TOTAL_S=$total OUT="$tmp/dry" bash bench/gpu-run.sh --all >"$tmp/dry.log" 2>&1
rc=$?
el=$((SECONDS - t0))
S="$tmp/dry/summary.txt"
check "dry run ends inside its deadline ($el s of $total s, 10 s of slack for the last kill)" [ "$el" -le $((total + 10)) ]
check "summary.txt written" [ -s "$S" ]
nfiles=$(find "$tmp/dry" -type f | wc -l)
check "at most 8 files in OUT ($nfiles)" [ "$nfiles" -le 8 ]
check "nothing deeper than OUT itself" [ "$(find "$tmp/dry" -mindepth 2 | wc -l)" = 0 ]
for f in "$tmp"/dry/*.tgz; do
  check "$(basename "$f") is a readable archive with logs" sh -c "tar tzf '$f' | grep -q ."
done
for p in "1 ldd" "2 doctor" "3 contract"; do
  check "summary has phase '$p'" grep -q "^== $p " "$S"
done
check "summary has the end line and a result" sh -c "grep -q '^== end:' '$S' && grep -q '^RESULT: ' '$S'"
check "ldd step names the host-only libraries of this build" grep -qE "^ldd_names_host_libs +ok" "$S"
check "ldd lists libopenblas as outside the allowed list" grep -q "outside the list: libopenblas" "$S"
for s in doctor quickstart test_core test_matmul test_conv test_attention test_comm_local test_ddp_local test_cuda_contract; do
  check "step $s passed on the stand-ins" grep -qE "^$s +ok " "$S"
done
check "every step line that says ok has its seconds" \
  sh -c "! grep -E '^[a-z_0-9]+ +ok' '$S' | grep -vqE '^[a-z_0-9]+ +ok +[0-9]+s'"
check "rc agrees with the summary (rc $rc)" sh -c "{ [ $rc = 0 ] && grep -q '^RESULT: PASS' '$S'; } || { [ $rc != 0 ] && grep -q '^RESULT: FAIL' '$S'; }"
check "no step failed on the stand-ins" sh -c "! grep -E '^[a-z_0-9]+ +FAIL' '$S'"
check "the dry run ends RESULT: PASS (rc $rc)" sh -c "[ $rc = 0 ] && grep -q '^RESULT: PASS' '$S'"
check "memcheck is marked as needing a GPU, not failed" grep -q "memcheck: not run (a dry run has no GPU)" "$S"

# 1b. the models phase and the suite's model-layer, token-data and MPI steps (the rest of the suite is the
#     meson suite itself, on the same stand-ins)
only=test_mpi_optional,test_models,test_lora,test_token_data
GPU_RUN_ONLY=$only GPU_RUN_DRY=1 GPU_RUN_BUILD=$BUILD GPU_RUN_TOTAL_S=${GPU_RUN_TEST_LATER_S:-240} OUT="$tmp/later" \
  bash bench/gpu-run.sh --phases models,suite >"$tmp/later.log" 2>&1
rc=$?
L="$tmp/later/summary.txt"
check "later phases: RESULT: PASS (rc $rc)" sh -c "[ $rc = 0 ] && grep -q '^RESULT: PASS' '$L'"
check "models phase names its Python, PyTorch and transformers" \
  grep -qE "^  models: python [0-9.]+ .*; torch [^ ]+ .*; transformers [^ ]+ " "$L"
for s in test_lm_capi test_models_hf test_models test_mpi_optional_missing test_mpi_optional_notmodule; do
  check "step $s passed on the stand-ins" grep -qE "^$s +ok " "$L"
done
check "test_models ran its cuda pass" sh -c "tar xzOf '$tmp/later/6-suite.tgz' 6-suite/test_models.log | grep -q '^-- cuda$'"

# 2. a deadline too short for the work: stops on time, later steps "not reached"
t0=$SECONDS
GPU_RUN_DRY=1 GPU_RUN_BUILD=$BUILD GPU_RUN_TOTAL_S=25 OUT="$tmp/short" bash bench/gpu-run.sh --all >"$tmp/short.log" 2>&1
el=$((SECONDS - t0))
check "25 s deadline kept ($el s)" [ "$el" -le 35 ]
check "later steps reported as not reached or cut" grep -qE "not reached: the deadline|CUT " "$tmp/short/summary.txt"
check "at most 8 files after a cut run" [ "$(find "$tmp/short" -type f | wc -l)" -le 8 ]

# 3. the stand-ins with every device hidden: the tests skip the cuda backend, which must fail the run
#    (the doctor is the first to see it, and the script stops there)
CUDA_VISIBLE_DEVICES=-1 GPU_RUN_DRY=1 GPU_RUN_BUILD=$BUILD GPU_RUN_TOTAL_S=60 OUT="$tmp/hidden" \
  bash bench/gpu-run.sh --phases contract >"$tmp/hidden.log" 2>&1
rc=$?
check "hidden devices: non-zero exit (rc $rc)" [ "$rc" != 0 ]
check "hidden devices: the doctor fails" grep -qE "^doctor +FAIL" "$tmp/hidden/summary.txt"
# a test step that skipped the cuda backend is a failure even when it exits 0: run one through the
# script's step with the doctor told to pass (GPU_RUN_DOCTOR=skip, for this check only)
CUDA_VISIBLE_DEVICES=-1 GPU_RUN_DOCTOR=skip GPU_RUN_DRY=1 GPU_RUN_BUILD=$BUILD GPU_RUN_TOTAL_S=90 OUT="$tmp/skip" \
  bash bench/gpu-run.sh --phases contract >"$tmp/skip.log" 2>&1
rc=$?
check "a test that skipped cuda: its step fails" grep -qE "^test_conv +FAIL .*skipped the cuda backend" "$tmp/skip/summary.txt"
check "and the run fails (rc $rc)" sh -c "[ $rc != 0 ] && grep -q '^RESULT: FAIL' '$tmp/skip/summary.txt'"

# 3b. memcheck through a stand-in sanitizer (GPU_RUN_SANITIZER): a kill at the step's own bound is "not
#     concluded", neither a failure nor a pass; an error exit is a failure
printf '#!/bin/sh\nsleep 60\n' >"$tmp/slow-sanitizer"
printf '#!/bin/sh\necho "========= Invalid __global__ read"\nexit 9\n' >"$tmp/bad-sanitizer"
chmod +x "$tmp/slow-sanitizer" "$tmp/bad-sanitizer"
GPU_RUN_SANITIZER="$tmp/slow-sanitizer" GPU_RUN_MEMCHECK_CAP_S=1 GPU_RUN_DOCTOR=skip GPU_RUN_DRY=1 GPU_RUN_BUILD=$BUILD \
  GPU_RUN_TOTAL_S=90 OUT="$tmp/mcslow" bash bench/gpu-run.sh --phases memcheck >"$tmp/mcslow.log" 2>&1
rc=$?
M="$tmp/mcslow/summary.txt"
check "memcheck killed at its own bound: not concluded" grep -qE "^memcheck_test_matmul +UNDECIDED .*not concluded" "$M"
check "and not failed, the run passes saying so (rc $rc)" \
  sh -c "[ $rc = 0 ] && ! grep -qE '^memcheck_[a-z_]+ +FAIL' '$M' && grep -q '^RESULT: PASS (with steps not concluded)' '$M'"
GPU_RUN_SANITIZER="$tmp/bad-sanitizer" GPU_RUN_DOCTOR=skip GPU_RUN_DRY=1 GPU_RUN_BUILD=$BUILD \
  GPU_RUN_TOTAL_S=90 OUT="$tmp/mcbad" bash bench/gpu-run.sh --phases memcheck >"$tmp/mcbad.log" 2>&1
rc=$?
check "memcheck reporting an error fails its step and the run (rc $rc)" \
  sh -c "[ $rc != 0 ] && grep -qE '^memcheck_test_matmul +FAIL' '$tmp/mcbad/summary.txt' && grep -q '^RESULT: FAIL' '$tmp/mcbad/summary.txt'"

# 4. not dry, on a machine with no GPU: a failure, never green
GPU_RUN_BUILD=$BUILD GPU_RUN_TOTAL_S=60 OUT="$tmp/real" bash bench/gpu-run.sh --all >"$tmp/real.log" 2>&1
rc=$?
check "a run without a CUDA device exits non-zero (rc $rc)" [ "$rc" != 0 ]
check "and its summary says FAIL" grep -q "^RESULT: FAIL" "$tmp/real/summary.txt"
check "and names the doctor or the missing module" grep -qE "^doctor +FAIL|no CUDA module|no usable CUDA device" "$tmp/real/summary.txt"

echo "test_gpu_run: $passes passed, $fails failed"
if [ "$fails" != 0 ]; then
  echo "--- dry summary"; cat "$S" 2>/dev/null
  echo "--- later phases' summary"; cat "$L" 2>/dev/null
  echo "--- real summary"; cat "$tmp/real/summary.txt" 2>/dev/null
  exit 1
fi
exit 0
