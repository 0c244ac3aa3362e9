#!/usr/bin/env bash
# test_install.sh — the ways a user installs libgpucore, checked as that user would:
#   1. `meson install` of a release build to a prefix (build dir build-install, CUDA off), then a CMake consumer
#      (find_package(gpucore CONFIG REQUIRED), built, run, `cmake --install`ed and run again) and a
#      pkg-config consumer, each started without LD_LIBRARY_PATH;
#   2. the wheel: a fresh venv, `pip install .` (meson-python; CUDA off to keep time), then from a
#      folder outside the repository with no GPUCORE_LIBRARY/PYTHONPATH/LD_LIBRARY_PATH: import
#      gpucore and run an op, the gpucore-info and gpucore-lm console scripts, the package's CPU
#      engines against the release build's of part 1 (gpucore-info --json), py.typed, and the
#      packaged ELF files' needed libraries (printed) against what the package may need.
# Every check prints "ok NAME" or "FAIL NAME" with its output; the closing line is
# "install: N passed, N failed" and the exit status is non-zero on any failure.
#   usage: tests/test_install.sh            (GPUCORE_INSTALL_BUILD_DIR: the build dir, default build-install)
# The wheel needs the build requirements (meson-python, meson, ninja) from the package index:
# GPUCORE_SKIP_INSTALL=1 (no registry, as on the lent GPU machine) skips part 2 and says so.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${GPUCORE_INSTALL_BUILD_DIR:-build-install}
MESON="meson"
command -v meson >/dev/null 2>&1 || MESON="python3 -m mesonbuild.mesonmain"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpucore-install.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
passed=0 failed=0 skipped=0

# check NAME COMMAND...: run COMMAND (output to a log); count and report it.
check() {
  local name=$1
  shift
  if "$@" >"$WORK/check.log" 2>&1; then
    passed=$((passed + 1))
    echo "ok   $name"
  else
    failed=$((failed + 1))
    echo "FAIL $name"
    sed 's/^/     | /' "$WORK/check.log" | tail -n 40
  fi
}

# A run with none of the variables that could hide a missing run path or a package's own copy.
clean_env() { env -u LD_LIBRARY_PATH -u GPUCORE_LIBRARY -u PYTHONPATH -u GPUCORE_CUDA_PLUGIN "$@"; }

# --- 1. meson install to a prefix ------------------------------------------------------------
PREFIX="$ROOT/$BUILD/prefix"
configure_install_build() {
  if [ ! -f "$BUILD/build.ninja" ]; then
    $MESON setup "$BUILD" --prefix="$PREFIX" -Dbuildtype=release -Dcuda=disabled -Demulated=disabled -Dtests=false -Dmpi=disabled
  fi
  ninja -C "$BUILD" && rm -rf "$PREFIX" && $MESON install -C "$BUILD" --quiet
}
check "meson install to $BUILD/prefix" configure_install_build
LIBDIR=$(dirname "$(find "$PREFIX" -name 'libgpucore.so.0' 2>/dev/null | head -n 1)")
installed_files() {
  local f
  for f in "$PREFIX/include/gpucore.h" "$LIBDIR/libgpucore.so" "$LIBDIR/pkgconfig/gpucore.pc" \
           "$LIBDIR/cmake/gpucore/gpucoreConfig.cmake" "$LIBDIR/cmake/gpucore/gpucoreConfigVersion.cmake" \
           "$PREFIX/bin/gpucore-info" "$PREFIX/bin/gpucore-lm"; do
    [ -e "$f" ] || { echo "missing: $f"; return 1; }
  done
}
check "installed: header, library, pkg-config, CMake package, tools" installed_files
check "installed gpucore-info runs (no LD_LIBRARY_PATH)" clean_env "$PREFIX/bin/gpucore-info"

# The consumer: a CPU context, a 2x3 @ 3x2 matmul, the result checked.
mkdir -p "$WORK/app"
cat >"$WORK/app/main.c" <<'EOF'
#include <stdio.h>
#include "gpucore.h"
#define TRY(call) do { gpucore_status s_ = (call); if (s_ != GPUCORE_OK) { \
    fprintf(stderr, "%s: %s: %s\n", #call, gpucore_status_string(s_), gpucore_last_error()); return 1; } } while (0)
int main(void)
{
    gpucore_context *ctx = NULL;
    gpucore_tensor *a = NULL, *b = NULL, *d = NULL;
    int64_t sa[2] = {2, 3}, sb[2] = {3, 2}, sd[2] = {2, 2};
    float ha[6] = {1, 2, 3, 4, 5, 6}, hb[6] = {1, 0, 0, 1, 1, 1}, hd[4] = {0}, want[4] = {4, 5, 10, 11};
    TRY(gpucore_context_create("cpu", &ctx));
    TRY(gpucore_tensor_create(ctx, GPUCORE_F32, 2, sa, &a));
    TRY(gpucore_tensor_create(ctx, GPUCORE_F32, 2, sb, &b));
    TRY(gpucore_tensor_create(ctx, GPUCORE_F32, 2, sd, &d));
    TRY(gpucore_copy_from_host(a, ha, sizeof ha));
    TRY(gpucore_copy_from_host(b, hb, sizeof hb));
    TRY(gpucore_matmul(a, b, d, NULL, NULL));
    TRY(gpucore_copy_to_host(hd, sizeof hd, d));
    for (int i = 0; i < 4; i++)
        if (hd[i] != want[i]) { fprintf(stderr, "d[%d] = %g, want %g\n", i, hd[i], want[i]); return 1; }
    printf("consumer ok: libgpucore %s\n", gpucore_version_string());
    gpucore_tensor_destroy(d); gpucore_tensor_destroy(b); gpucore_tensor_destroy(a);
    return gpucore_context_destroy(ctx) == GPUCORE_OK ? 0 : 1;
}
EOF
cat >"$WORK/app/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.13)
project(gpucore_consumer C)
# The version file: a newer major version is refused, this one is accepted.
find_package(gpucore 99 CONFIG QUIET)
if(gpucore_FOUND)
  message(FATAL_ERROR "find_package(gpucore 99) accepted version ${gpucore_VERSION}")
endif()
unset(gpucore_DIR CACHE)
find_package(gpucore 0.1 CONFIG REQUIRED)
add_executable(consumer main.c)
target_link_libraries(consumer PRIVATE gpucore::gpucore)
install(TARGETS consumer DESTINATION bin)
EOF
cmake_consumer() {
  cmake -S "$WORK/app" -B "$WORK/app/build" -DCMAKE_PREFIX_PATH="$PREFIX" \
        -DCMAKE_INSTALL_PREFIX="$WORK/app/prefix" -DCMAKE_BUILD_TYPE=Release &&
    cmake --build "$WORK/app/build" &&
    clean_env "$WORK/app/build/consumer" &&
    cmake --install "$WORK/app/build" &&
    readelf -d "$WORK/app/prefix/bin/consumer" | grep -E 'RUNPATH|RPATH' &&
    clean_env "$WORK/app/prefix/bin/consumer"
}
check "CMake consumer: find_package(gpucore CONFIG), build tree and installed binary run" cmake_consumer
pkgconfig_consumer() {
  local flags
  flags=$(PKG_CONFIG_PATH="$LIBDIR/pkgconfig" pkg-config --cflags --libs gpucore) || return 1
  echo "pkg-config --cflags --libs gpucore: $flags"
  # shellcheck disable=SC2086  # the flags are words
  cc -o "$WORK/app/pc-consumer" "$WORK/app/main.c" $flags && clean_env "$WORK/app/pc-consumer"
}
check "pkg-config consumer: cc \$(pkg-config --cflags --libs gpucore) runs" pkgconfig_consumer

# --- 2. the wheel ---------------------------------------------------------------------------
if [ "${GPUCORE_SKIP_INSTALL:-0}" = 1 ]; then
  echo "SKIP wheel: GPUCORE_SKIP_INSTALL=1 (pip install . needs meson-python from the package index)"
  skipped=$((skipped + 1))
else
  VENV="$WORK/venv"
  PY=${GPUCORE_INSTALL_PYTHON:-python3}
  wheel_install() {
    "$PY" -m venv "$VENV" &&
      "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$ROOT" -Csetup-args=-Dcuda=disabled
  }
  check "fresh venv: pip install . (-Dcuda=disabled)" wheel_install
  PKG=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['platlib'])" 2>/dev/null)/gpucore
  mkdir -p "$WORK/elsewhere"
  wheel_import() {
    (cd "$WORK/elsewhere" && clean_env "$VENV/bin/python" - "$PKG" <<'EOF'
import os, sys
import importlib.metadata as md
import numpy as np
import gpucore
pkg = os.path.realpath(sys.argv[1])
lib = os.path.realpath(gpucore.library_path)
print("gpucore from", os.path.dirname(os.path.realpath(gpucore.__file__)), "library", lib)
assert os.path.dirname(lib) == pkg, "library %s is not the package's own copy in %s" % (lib, pkg)
assert md.version("libgpucore") == gpucore.version_string().split()[0], (md.version("libgpucore"), gpucore.version_string())
a = gpucore.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))
b = gpucore.from_numpy(np.array([[1, 0], [0, 1], [1, 1]], dtype=np.float32))
d = np.from_dlpack(gpucore.matmul(a, b))
assert (d == np.array([[2, 3], [8, 9]], dtype=np.float32)).all(), d
print("matmul ok; version", md.version("libgpucore"))
EOF
    )
  }
  check "import gpucore + matmul from outside the repo, the package's own libgpucore.so" wheel_import
  check "console script gpucore-info runs" bash -c "cd '$WORK/elsewhere' && env -u LD_LIBRARY_PATH -u GPUCORE_LIBRARY '$VENV/bin/gpucore-info' | grep -F 'libgpucore '"
  # The package runs what makes the release build fast: the engines of part 1's build (same tree,
  # same machine), the CPU entries of the build description (CUDA's are off in both, MPI is off in
  # part 1 and moves no CPU op).
  cpu_engines() {
    clean_env "$1" --json | python3 -c 'import json, sys
b = json.load(sys.stdin)["library"]["build"]
print(" ".join(sorted(f for f in b[b.index("[") + 1:b.rindex("]")].split() if not f.startswith(("cuda", "cudnn", "nccl", "mpi")))))'
  }
  same_engines() {
    local build package
    build=$(cpu_engines "$PREFIX/bin/gpucore-info") && package=$(cd "$WORK/elsewhere" && cpu_engines "$VENV/bin/gpucore-info") || return 1
    echo "release build: [$build]; package: [$package]"
    [ -n "$build" ] && [ "$build" = "$package" ]
  }
  check "the package's CPU engines are the release build's (gpucore-info --json)" same_engines
  check "console script gpucore-lm runs (usage)" bash -c "cd '$WORK/elsewhere' && env -u LD_LIBRARY_PATH -u GPUCORE_LIBRARY '$VENV/bin/gpucore-lm' --help 2>&1 | grep -F 'gpucore-lm generate'"
  # where this machine has Open MPI, the package carries the MPI module and the library finds it there
  if [ -f "$PKG/libgpucore_mpi.so" ]; then
    check "the packaged MPI module is found beside the packaged library" bash -c "cd '$WORK/elsewhere' && env -u LD_LIBRARY_PATH -u GPUCORE_LIBRARY '$VENV/bin/gpucore-info' | grep -E '^ *mpi +available.*[(]module [^)]*/gpucore/(bin/[.][.]/)?libgpucore_mpi[.]so[)]'"
  fi
  check "py.typed and the header in the package" test -f "$PKG/py.typed" -a -f "$PKG/include/gpucore.h"
  # The packaged ELF files may need glibc's libraries, files the package carries beside
  # libgpucore.so (found through RUNPATH $ORIGIN or, for bin/, $ORIGIN/..), for the CUDA module
  # cuBLASLt from the nvidia-cublas wheel (its RUNPATH names the nvidia/ folders), and for the CUDA
  # module and the bundled oneDNN (C++ both) the C++ runtime.
  elf_needs() {
    local f needed n runpath bad=0 glibc=" libc.so.6 libm.so.6 libmvec.so.1 libdl.so.2 libpthread.so.0 librt.so.1 ld-linux-x86-64.so.2 "
    local found=0
    for f in "$PKG"/*.so* "$PKG"/bin/*; do
      [ -f "$f" ] || continue
      found=$((found + 1))
      needed=$(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
      runpath=$(readelf -d "$f" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
      echo "${f#"$PKG"/}: NEEDED ${needed}RUNPATH [${runpath}]"
      # a run path into the build machine (its toolkit, its build folder) does not travel
      for n in ${runpath//:/ }; do
        case $n in '$ORIGIN'|'$ORIGIN/'*) ;; *) echo "  unexpected: ${f#"$PKG"/} has run path $n"; bad=1 ;; esac
      done
      for n in $needed; do
        if [[ "$glibc" == *" $n "* ]]; then continue; fi
        if [ -f "$PKG/$n" ] && { [[ ":$runpath:" == *':$ORIGIN:'* ]] || [[ ":$runpath:" == *':$ORIGIN/..:'* ]]; }; then continue; fi
        # the MPI module is opened only when a communicator asks for MPI: it needs the user's Open MPI
        if [ "${f##*/}" = libgpucore_mpi.so ] && [ "$n" = libmpi.so.40 ]; then continue; fi
        case ${f##*/}:$n in libgpucore_cuda.so:libstdc++.so.6|libgpucore_cuda.so:libgcc_s.so.1) continue ;;
                            libdnnl.so.*:libstdc++.so.6|libdnnl.so.*:libgcc_s.so.1) continue ;; esac
        # cuBLASLt from the nvidia-cublas wheel
        if [ "${f##*/}" = libgpucore_cuda.so ] && [ "$n" = libcublasLt.so.13 ] &&
           [[ ":$runpath:" == *':$ORIGIN/../nvidia/cu13/lib:'* ]]; then continue; fi
        echo "  unexpected: ${f#"$PKG"/} needs $n"
        bad=1
      done
      # and the loader agrees: nothing unresolved, bundled libraries taken from the package
      if clean_env ldd "$f" | grep -v -e libcublasLt -e libmpi | grep -F 'not found'; then bad=1; fi
      for n in $needed; do
        [ -f "$PKG/$n" ] || continue
        local loaded
        loaded=$(clean_env ldd "$f" | sed -n "s|^[[:space:]]*$n => \(.*\) (0x.*|\1|p")
        if [ -z "$loaded" ] || [ "$(realpath "$loaded")" != "$(realpath "$PKG/$n")" ]; then
          echo "  unexpected: ${f#"$PKG"/} loads $n from '$loaded', not the package's copy"
          bad=1
        fi
      done
    done
    [ "$found" -ge 3 ] || { echo "only $found ELF files in $PKG"; bad=1; }
    return $bad
  }
  check "readelf -d: the packaged libraries need only glibc and what the package carries" elf_needs
  # the list, also when it passed
  if ! grep -q '^  unexpected' "$WORK/check.log"; then sed 's/^/     /' "$WORK/check.log"; fi
fi

echo "install: $passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
