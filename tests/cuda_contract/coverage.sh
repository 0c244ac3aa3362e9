#!/bin/sh
# coverage.sh [BUILD_DIR] — line coverage of the CUDA backend's host code
# (src/backend/cuda/*.c and src/backend/kernel_ops.c) from the cuda-contract
# suite: configures BUILD_DIR (default build-cov) with -Db_coverage=true if it
# does not exist, builds, clears old counts, runs the suite, and prints one line
# per file ("file lines-executed% of N") and the total, from gcov.
set -eu
SRC=$(cd "$(dirname "$0")/../.." && pwd)
B=${1:-$SRC/build-cov}
[ -d "$B" ] || meson setup "$B" "$SRC" -Dcuda=disabled -Db_coverage=true >/dev/null
[ -n "${COVERAGE_NO_BUILD:-}" ] || ninja -C "$B" >/dev/null
OBJ="$B/tests/cuda_contract/libgpucore_cuda_contract.so.p"
find "$OBJ" -name '*.gcda' -delete
meson test -C "$B" --suite cuda-contract --no-rebuild --num-processes "${JOBS:-2}" >/dev/null || {
    echo "coverage.sh: the cuda-contract suite failed (see $B/meson-logs/testlog.txt)" >&2
    exit 1
}
cd "$OBJ"
for gcda in .._.._src_backend_cuda_cuda_*.c.gcda .._.._src_backend_kernel_ops.c.gcda; do
    gcov -n -o . "$gcda" 2>/dev/null
done | awk '
    /^File .*src\/backend\/(cuda\/cuda_[a-z_]+|kernel_ops)\.c/ { f = $2; gsub(/\x27/, "", f); sub(/.*src\//, "src/", f); next }
    f != "" && /^Lines executed:/ {
        split($2, a, "%"); pct = substr(a[1], 10); n = $4
        printf "%-34s %6.2f%% of %d lines\n", f, pct, n
        covered += pct * n / 100; total += n; f = ""
    }
    END { if (total) printf "%-34s %6.2f%% of %d lines\n", "total", 100 * covered / total, total }'
