#!/usr/bin/env bash
# main-job.sh — set up (GPUCORE_SETUP_PROFILE=main: only what this job uses), build release,
# then run the main job: the doctor (gpucore-info) and the quickstart example, on the GPU when one
# is usable, else on the CPU; the quick benchmark suite (gpucore-bench --quick, with its PyTorch
# and numpy peers, 3 repeats each) into a report that opens with the verdict against PyTorch;
# then the end-to-end training example (examples/train_cnn on the UCI digits, a 20% hold-out),
# its log, held-out accuracy and per-op profile in the report.
#   BUILD_DIR (default build-release, configured -Dbuildtype=release -Dtests=false), REPORT_DIR (default build/report)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-release}
REPORT_DIR=${REPORT_DIR:-build/report}
# (-Dtests=false: the main job runs the library, its tools, benchmarks and examples, not the C tests)
GPUCORE_SETUP_PROFILE=${GPUCORE_SETUP_PROFILE:-main} scripts/setup.sh "$BUILD_DIR" -Dbuildtype=release -Dtests=false
# an existing build folder keeps its options: make it release (asserts off) before measuring
buildtype=$(python3 -c 'import json, sys; print(next(o["value"] for o in json.load(open(sys.argv[1])) if o["name"] == "buildtype"))' \
  "$BUILD_DIR/meson-info/intro-buildoptions.json" 2>/dev/null || echo unknown)
if [ "$buildtype" != release ]; then
  echo "main-job: $BUILD_DIR is a $buildtype build: reconfiguring it as release"
  MESON=meson; command -v meson >/dev/null 2>&1 || MESON="python3 -m mesonbuild.mesonmain"
  $MESON configure "$BUILD_DIR" -Dbuildtype=release -Db_ndebug=if-release && ninja -C "$BUILD_DIR"
fi
mkdir -p "$REPORT_DIR"
echo "== gpucore-info"
"$BUILD_DIR"/src/tools/gpucore-info | tee "$REPORT_DIR/info.txt"
"$BUILD_DIR"/src/tools/gpucore-info --json > "$REPORT_DIR/info.json" || true
echo "== quickstart example"
"$BUILD_DIR"/examples/quickstart | tee "$REPORT_DIR/quickstart.txt"
echo "== gpucore-bench --quick (release build; each program and its peers 3 times)"
python3 "$BUILD_DIR"/bench/gpucore-bench --quick --repeats 3 --report "$REPORT_DIR" --out "$REPORT_DIR/bench.jsonl"
echo "== train_cnn (end-to-end training on the UCI digits: bf16 CNN, AdamW, loss scaling, save/resume; device auto)"
digits=build-data/digits.csv.gz # scripts/setup.sh puts it there
[ -f "$digits" ] || { echo "main-job: $digits is missing (scripts/setup.sh provides it from python3-sklearn)" >&2; exit 1; }
gzip -dc "$digits" > "$REPORT_DIR/digits.csv"
"$BUILD_DIR"/examples/train_cnn --data "$REPORT_DIR/digits.csv" --steps 600 --batch 32 --eval-every 100 --device auto \
  --checkpoint-policy sqrt --save "$REPORT_DIR/train_cnn.safetensors" --save-every 300 |
  tee "$REPORT_DIR/train_cnn.txt" | grep -v '^step '
rm -f "$REPORT_DIR/digits.csv"
{ echo; echo "## train_cnn: the UCI digits (1797 8x8 images, 20% held out), 600 steps of batch 32"; echo
  echo '```'; grep -E '^(data|train_cnn on|eval step|done|checkpoint executor)' "$REPORT_DIR/train_cnn.txt"; echo '```'
} >> "$REPORT_DIR/report.md"
echo "report: $REPORT_DIR/report.md"
