#!/usr/bin/env bash
# ptx_counts.sh — count the strided-index math and untimed-event instructions in
# the PTX nvcc makes of kernels/*.cu: 64-bit integer division/remainder
# (div|rem.s64|u64, the strided index math), 32-bit ones, and the hardware
# f16/bf16 conversions (cvt to/from f16, cvt to bf16), per file and arch; and the tensor-core
# instructions: wmma.mma / mma.sync, wmma.load / wmma.store and ldmatrix. No GPU needed, only nvcc.
#   usage: scripts/ptx_counts.sh [file.cu ...]   (default: copy.cu elementwise.cu rows.cu attention.cu)
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC=${NVCC:-nvcc}
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(kernels/copy.cu kernels/elementwise.cu kernels/rows.cu kernels/attention.cu)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%-26s %-6s %8s %8s %10s %8s %9s %9s %10s %9s\n' file arch div64 rem64 divrem32 cvt_f16 cvt_bf16 mma wmma_ldst ldmatrix
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
    ldsm=$(grep -cE '^\s*ldmatrix\.' "$out" || true)
    printf '%-26s sm_%-3s %8s %8s %10s %8s %9s %9s %10s %9s\n' "$f" "$a" "$div" "$rem" "$d32" "$cvt" "$bf" "$mma" "$ldst" "$ldsm"
  done
done

# SASS of the kernels that use tensor cores (any HMMA): per kernel, the shared-memory matrix loads
# (LDSM), generic loads (LD.E, what a load without shared address-space inference becomes), HMMA and
# local-memory accesses (LDL/STL). Needs cuobjdump (CUOBJDUMP=path; nvdisasm beside it or on PATH).
CUOBJDUMP=${CUOBJDUMP:-cuobjdump}
if ! command -v "$CUOBJDUMP" >/dev/null 2>&1; then
  echo "ptx_counts: $CUOBJDUMP not found: the SASS counts are left out (set CUOBJDUMP)"
  exit 0
fi
printf '\n%-6s %-60s %6s %6s %6s %8s\n' arch "kernel (tensor cores)" LDSM LD.E HMMA LDL/STL
for f in "${files[@]}"; do
  for a in 80 90; do
    "$NVCC" -cubin -std=c++17 -arch=sm_$a -Ikernels "$f" -o "$tmp/k.cubin"
    "$CUOBJDUMP" -sass "$tmp/k.cubin" | awk -v arch="sm_$a" '
      /Function :/ {fn = $3}
      /LDSM/ {ldsm[fn]++}
      /[^A-Z]LD\.E/ {lde[fn]++}
      /HMMA/ {hmma[fn]++}
      /[^A-Z](LDL|STL)/ {loc[fn]++}
      END {for (k in hmma) printf "%-6s %-60s %6d %6d %6d %8d\n", arch, k, ldsm[k], lde[k], hmma[k], loc[k]}' |
      { command -v c++filt >/dev/null && c++filt || cat; } | sort -k2
  done
done
