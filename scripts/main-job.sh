#!/usr/bin/env bash
# main-job.sh — set up, build, then run the main job: the doctor (gpucore-info)
# and the quickstart example, on the GPU when one is usable, else on the CPU.
# and the quick benchmark suite (gpucore-bench --quick, with its peers) into a report.
# Then the end-to-end training example (examples/train_cnn), its log and per-op profile in the report.
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
echo "== gpucore-bench --quick"
python3 "$BUILD_DIR"/bench/gpucore-bench --quick --report "$BUILD_DIR/report" --out "$BUILD_DIR/report/bench.jsonl"
echo "== train_cnn (end-to-end training: bf16 CNN, AdamW, loss scaling, save/resume; device auto)"
"$BUILD_DIR"/examples/train_cnn --steps 100 --batch 16 --device auto --checkpoint-policy sqrt \
  --save "$BUILD_DIR/report/train_cnn.safetensors" --save-every 50 | tee "$BUILD_DIR/report/train_cnn.txt" | grep -v '^step '
echo "report: $BUILD_DIR/report/report.md"
