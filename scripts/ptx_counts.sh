#!/usr/bin/env bash
# ptx_counts.sh — count the strided-index math and untimed-event instructions in
# the PTX nvcc makes of kernels/*.cu: 64-bit integer division/remainder
# (div|rem.s64|u64, the strided index math), 32-bit ones, and the hardware
# f16/bf16 conversions (cvt to/from f16, cvt to bf16), per file and arch; and the tensor-core
# instructions: wmma.mma / mma.sync and wmma.load / wmma.store. No GPU needed, only nvcc.
#   usage: scripts/ptx_counts.sh [file.cu ...]   (default: copy.cu elementwise.cu rows.cu attention.cu)
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC=${NVCC:-nvcc}
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(kernels/copy.cu kernels/elementwise.cu kernels/rows.cu kernels/attention.cu)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%-26s %-6s %8s %8s %10s %8s %9s %9s %10s\n' file arch div64 rem64 divrem32 cvt_f16 cvt_bf16 mma wmma_ldst
for f in "${files[@]}"; do
  for a in 80 90; do
    out="$tmp/$(basename "$f" .cu)_$a.ptx"
    "$NVCC" -ptx -std=c++17 -arch=sm_$a -Ikernels "$f" -o "$out"
    div=$(grep -cE '^\s*div\.(s|u)64' "$out" || true)
    rem=$(grep -cE '^\s*rem\.(s|u)64' "$out" || true)
    d32=$(grep -cE '^\s*(div|rem)\.(s|u)32' "$out" || true)
    cvt=$(grep -cE '^\s*cvt\.[a-z]*\.?(f16\.f32|f32\.f16)' "$out" || true)
    bf=$(grep -cE '^\s*cvt\.rn\.bf16\.f32' "$out" || true)
    mma=$(grep -cE '^\s*(wmma\.mma|mma)\.sync' "$out" || true)
    ldst=$(grep -cE '^\s*wmma\.(load|store)\.' "$out" || true)
    printf '%-26s sm_%-3s %8s %8s %10s %8s %9s %9s %10s\n' "$f" "$a" "$div" "$rem" "$d32" "$cvt" "$bf" "$mma" "$ldst"
  done
done
