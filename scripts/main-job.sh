#!/usr/bin/env bash
# main-job.sh — set up, build, then run the main job: the doctor (gpucore-info)
# and the quickstart example, on the GPU when one is usable, else on the CPU.
# (The quick benchmark suite and the training example join this as they land.)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
scripts/setup.sh "$BUILD_DIR"
mkdir -p "$BUILD_DIR/report"
echo "== gpucore-info"
"$BUILD_DIR"/src/tools/gpucore-info | tee "$BUILD_DIR/report/info.txt"
"$BUILD_DIR"/src/tools/gpucore-info --json > "$BUILD_DIR/report/info.json" || true
echo "== quickstart example"
"$BUILD_DIR"/examples/quickstart | tee "$BUILD_DIR/report/quickstart.txt"
echo "report: $BUILD_DIR/report/"
