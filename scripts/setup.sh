#!/usr/bin/env bash
# setup.sh — install what building and testing libgpucore needs on a fresh
# Debian machine (apt packages, pip packages), then configure and build.
# Skips installing when GPUCORE_SKIP_INSTALL=1 (the lent GPU machine has no
# registry) or when everything is already present.
#   usage: scripts/setup.sh [BUILD_DIR] [extra meson options...]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
shift || true

APT_PACKAGES="meson ninja-build pkg-config gcc g++ libopenblas-dev libcjson-dev libdlpack-dev libopenmpi-dev openmpi-bin clang libclang-rt-14-dev"
# PyTorch for the CPU with pytest and hypothesis, under Debian's python3: the peer of the benchmarks and
# the reference of the OpInfo sample test (python/torch_tests).
APT_PACKAGES="$APT_PACKAGES python3-torch python3-pytest python3-hypothesis"
# The CPU backend's speed libraries (optional in the build): SLEEF's vector exp/tanh, oneDNN's convolution.
APT_PACKAGES="$APT_PACKAGES libsleef-dev libdnnl-dev"
# The install test (tests/test_install.sh): a CMake consumer, and a fresh venv for `pip install .`.
APT_PACKAGES="$APT_PACKAGES cmake python3-venv"
PIP_PACKAGES="numpy pytest"
HF_PACKAGES="transformers==4.44.2 peft==0.12.0 accelerate==0.33.0 huggingface-hub==0.24.6 tokenizers==0.19.1
  safetensors==0.4.4 regex==2024.7.24 tqdm==4.66.5 packaging==24.1 filelock==3.15.4 fsspec==2024.6.1 psutil==6.0.0"

if [ "${GPUCORE_SKIP_INSTALL:-0}" != 1 ]; then
  missing=""
  for p in $APT_PACKAGES; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
  done
  if [ -n "$missing" ]; then
    echo "setup: installing Debian packages:$missing"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
  fi
  # PyTorch's operator samples (python/torch_tests) run under Debian's python3 with its
  # python3-torch; torch's test helpers import expecttest, which Debian does not package:
  # a pure-Python copy goes into a folder of its own that only that test run puts on its path.
  if [ -x /usr/bin/python3 ] && ! /usr/bin/python3 -c "import expecttest" 2>/dev/null \
     && ! PYTHONPATH=build-pydeps /usr/bin/python3 -c "import expecttest" 2>/dev/null; then
    echo "setup: installing expecttest into build-pydeps/ (for torch's OpInfo samples)"
    python3 -m pip install -q --target build-pydeps expecttest || echo "setup: expecttest unavailable; the OpInfo stage will say so"
  fi
  # The language-model tests drive Hugging Face's own code as the reference: transformers and PEFT
  # (pure Python) with their pure-Python dependencies, for Debian's python3 and its torch 1.13, into
  # the same folder (no torch from pip: --no-deps, the dependencies named one by one).
  if [ -x /usr/bin/python3 ] && ! PYTHONPATH=build-pydeps /usr/bin/python3 -c "import transformers, peft" 2>/dev/null; then
    echo "setup: installing transformers and peft into build-pydeps/ (the language-model tests' reference)"
    /usr/bin/python3 -m pip install -q --no-deps --target build-pydeps $HF_PACKAGES ||
      echo "setup: transformers/peft unavailable; the language-model reference tests will say so"
  fi
  pymissing=""
  for p in $PIP_PACKAGES; do
    python3 -c "import $p" 2>/dev/null || pymissing="$pymissing $p"
  done
  if [ -n "$pymissing" ]; then
    echo "setup: installing Python packages:$pymissing"
    python3 -m pip install -q $pymissing
  fi
fi

MESON="meson"
command -v meson >/dev/null 2>&1 || MESON="python3 -m mesonbuild.mesonmain"
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  $MESON setup "$BUILD_DIR" "$@"
fi
ninja -C "$BUILD_DIR"
