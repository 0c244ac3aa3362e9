#!/usr/bin/env bash
# ptxas_spills.sh — compile kernels/*.cu for sm_80 and sm_90 with -Xptxas -v and
# print, per file and arch, how many kernels ptxas reported, the largest stack
# frame and the spill bytes (stores + loads) summed over all kernels; exits 1
# if any kernel spills. No GPU needed, only nvcc.
#   usage: scripts/ptxas_spills.sh [file.cu ...]   (default: every kernels/*.cu)
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC=${NVCC:-nvcc}
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(kernels/*.cu)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
printf '%-26s %-6s %8s %10s %12s\n' file arch kernels max_stack spill_bytes
for f in "${files[@]}"; do
  for a in 80 90; do
    log="$tmp/$(basename "$f")_$a.log"
    "$NVCC" -c -std=c++17 -gencode=arch=compute_$a,code=sm_$a -Ikernels -Xptxas -v "$f" -o "$tmp/k.o" 2>"$log"
    read -r n stack spill < <(awk '
      /Compiling entry function/ {n++}
      /bytes stack frame/ {for (i = 1; i <= NF; i++) {
          if ($(i+1) == "bytes" && $(i+2) == "stack") { if ($i + 0 > st) st = $i + 0 }
          if ($(i+1) == "bytes" && $(i+2) == "spill") sp += $i } }
      END {print n + 0, st + 0, sp + 0}' "$log")
    printf '%-26s sm_%-3s %8s %10s %12s\n' "$f" "$a" "$n" "$stack" "$spill"
    [ "$spill" = 0 ] || status=1
  done
done
exit $status
