#!/usr/bin/env bash
# test.sh — set up, build, and run every test: the C tests through meson test,
# then the Python tests with pytest. Prints one closing line
# "tests: N passed, N failed, N skipped" and exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
scripts/setup.sh "$BUILD_DIR"

status=0
MESON="meson"
command -v meson >/dev/null 2>&1 || MESON="python3 -m mesonbuild.mesonmain"
$MESON test -C "$BUILD_DIR" --print-errorlogs --num-processes 2 || status=1

# Per-test output shows the SKIP lines with their reasons.
grep -h "^SKIP" "$BUILD_DIR"/meson-logs/testlog.txt | sort -u || true

c_pass=$(python3 - "$BUILD_DIR" <<'PY'
import json, sys
ok = fail = skip = 0
for line in open(sys.argv[1] + "/meson-logs/testlog.json"):
    r = json.loads(line)
    if r["result"] == "OK": ok += 1
    elif r["result"] == "SKIP": skip += 1
    else: fail += 1
print(ok, fail, skip)
PY
)
read -r passed failed skipped <<<"$c_pass"

if [ -d python/tests ] && ls python/tests/test_*.py >/dev/null 2>&1; then
  set +e
  GPUCORE_LIBRARY="$PWD/$BUILD_DIR/src/libgpucore.so" PYTHONPATH="$PWD/python" \
    python3 -m pytest -q python/tests -rs 2>&1 | tee "$BUILD_DIR/pytest.log"
  py=${PIPESTATUS[0]}
  set -e
  [ "$py" = 0 ] || [ "$py" = 5 ] || status=1
  counts=$(tail -n 1 "$BUILD_DIR/pytest.log")
  p=$(grep -oE '[0-9]+ passed' <<<"$counts" | grep -oE '[0-9]+' || echo 0)
  f=$(grep -oE '[0-9]+ (failed|errors?)' <<<"$counts" | awk '{s+=$1} END {print s+0}')
  s=$(grep -oE '[0-9]+ skipped' <<<"$counts" | grep -oE '[0-9]+' || echo 0)
  passed=$((passed + p)); failed=$((failed + ${f:-0})); skipped=$((skipped + s))
fi

echo "tests: $passed passed, $failed failed, $skipped skipped"
exit $status
