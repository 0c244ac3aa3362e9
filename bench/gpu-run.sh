#!/usr/bin/env bash
# gpu-run.sh — the one command a lent GPU machine gets. Every step runs under ONE shared deadline
# (GPU_RUN_TOTAL_S, default 540 s: a command may run 600 s and the whole loan is about 15 minutes,
# its start included), most informative first, and the logs come back packed into at most 7 files
# plus summary.txt (the device returns at most 8 files from $OUT).
#
#   bench/gpu-run.sh --build-here    here: the build that travels (built in build-gpu-work, staged
#                                    into build-gpu: release, sm_90, no
#                                    host-only library: OpenBLAS, Open MPI, SLEEF and oneDNN left
#                                    out, cJSON and libgomp carried in build-gpu/bundled, the CUDA
#                                    libraries found by soname), pruned to what runs, checked by
#                                    the same ldd step the device runs; pytest carried in
#                                    build-gpu/pydeps for a python3 that lacks it. On the device a
#                                    bundled library is used only where the image lacks its own.
#                                    Then on the device: run with carry ["build-gpu"].
#   bench/gpu-run.sh --all           on the device ($OUT set by the device tool):
#                                      1 ldd of every carried binary; machine facts
#                                      2 doctor (gpucore-info: fails unless a CUDA device is usable)
#                                        and smoke (quickstart on cuda, test_core)
#                                      3 the attention probe (does cuDNN's SDPA take our bf16 graphs: one
#                                        verdict per graph) and bf16 attention TFLOP/s per path (cuDNN,
#                                        our kernel) against PyTorch's SDPA; contract-sensitive tests
#                                        with GPUCORE_LOG=info (matmul
#                                        epilogues and fallbacks, conv, attention with fallback
#                                        counts, comm and DDP with groups), fallback counts
#                                      4 bench_matmul and bench_attention against PyTorch on the device
#                                        (fails without figures of our own: a peer's rows alone do not count)
#                                      5 the language-model checks against the device's transformers/PEFT
#                                        (the summary names the Python, PyTorch, transformers and PEFT used)
#                                      6 the rest of the C tests, each with the arguments it needs
#                                        (test_mpi_optional: one step per scenario; those that need an MPI
#                                        module are left out, saying so, where the build has none), and the
#                                        Python tests, while time remains (GPU_RUN_ONLY=a,b: only those)
#                                      7 compute-sanitizer memcheck of two tests, while time remains (a
#                                        kill at a step's own bound: "not concluded", neither pass nor fail)
#   bench/gpu-run.sh --phases suite,memcheck
#                                    a second call while the machine is warm: ldd, the doctor, then
#                                    only the phases named (contract bench models suite memcheck)
#   GPU_RUN_DRY=1 OUT=dir bench/gpu-run.sh --all
#                                    here, without a GPU: the same steps on the strict stand-ins
#                                    (tests/cuda_contract of the normal build, GPU_RUN_BUILD=build),
#                                    each step's own time bound 3x (the stand-ins compute on this
#                                    machine's CPUs); what only a GPU can show (memcheck, the bench
#                                    figures) is marked "needs a real GPU" / "not run". It must end
#                                    RESULT: PASS: tests/test_gpu_run.sh checks it in CI.
#
# A step passes when its command exits 0; a test that runs per backend must also have run on cuda
# ("-- cuda" in its log) and not skipped it ("SKIP cuda backend"): on the GPU machine a skip is a
# failure. The script exits non-zero when any step failed. summary.txt is written as the steps end
# (so a kill still leaves it); each phase's logs are packed when the phase ends, and an EXIT trap
# packs whatever a stop left unpacked.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DRY=${GPU_RUN_DRY:-0}
if [ "$DRY" = 1 ]; then BUILD=${GPU_RUN_BUILD:-build}; else BUILD=${GPU_RUN_BUILD:-build-gpu}; fi
TOTAL_S=${GPU_RUN_TOTAL_S:-540}
PACK_RESERVE_S=${GPU_RUN_PACK_RESERVE_S:-12} # kept back at the end for packing the logs

# --- the libraries a carried binary may need: the C and C++ runtimes, the driver, and the CUDA
# libraries by soname (found on the device from the toolkit or the nvidia-* wheels); anything else
# must resolve inside the carried build (our own libraries, and its bundled/ folder).
ALLOWED_RE='^(linux-vdso|ld-linux-x86-64|libc|libm|libmvec|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*|libnccl|libnvrtc|libnvidia-ml|libnvToolsExt)\.so'
CUDA_SONAME_RE='^(libcuda|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*|libnccl|libnvrtc|libnvidia-ml|libnvToolsExt)\.so'

# ldd_check DIR: every ELF file under DIR (the contract stand-ins excepted) against the list above.
# Prints one line per binary with a dependency outside it, then a closing line; returns 1 if any.
# (LDD_HERE=1: a CUDA library that is not found is accepted: the device finds it, this machine may not.)
ldd_check() {
  local dir f bad=0 n=0 outside
  dir=$(realpath -m "$1")
  while IFS= read -r f; do
    head -c 4 "$f" 2>/dev/null | grep -q $'\x7fELF' || continue
    n=$((n + 1))
    outside=$(ldd "$f" 2>/dev/null | awk -v allowed="$ALLOWED_RE" -v cuda="$CUDA_SONAME_RE" -v here="${LDD_HERE:-0}" \
      -v bundled="${LDD_BUNDLED_RE:-}" \
      -v inside="$dir/" '
      { name = $1; path = ($2 == "=>") ? $3 : $1; base = name; sub(/.*\//, "", base) }
      /statically linked|not a dynamic executable/ { next }
      /not found/ { if (!(here == 1 && base ~ cuda)) printf " %s(not found)", base; next }
      base ~ allowed { next }
      bundled != "" && base ~ bundled { next }
      index(path, inside) == 1 { next }
      { printf " %s", base }')
    if [ -n "$outside" ]; then
      bad=$((bad + 1))
      echo "${f#"$dir"/}:$outside"
    fi
  done < <(find "$dir" \( -name cuda_contract -o -name '*.p' -o -name meson-private -o -name pydeps \) -prune -o \
             -type f \( -perm -u+x -o -name '*.so*' \) -print 2>/dev/null | sort)
  echo "ldd: $n binaries, $bad with a library outside the allowed list"
  [ "$bad" = 0 ]
}

# ldd_expect_host_libs DIR: the dry run's form of the check: succeeds when ldd_check fails and names
# the host-only libraries the CI build links.
ldd_expect_host_libs() {
  local out rc
  out=$(ldd_check "$1")
  rc=$?
  echo "$out"
  [ "$rc" != 0 ] && grep -qE 'lib(openblas|mpi|dnnl|sleef)' <<<"$out"
}

# build_here: configure and build in $BUILD-work, then stage what runs (executables, shared objects,
# the benchmark driver) into $BUILD: no objects, no meson state, no absolute path of this machine.
build_here() {
  local t0=$SECONDS work="$BUILD-work" opts=(-Dbuildtype=release -Dcuda=enabled -Dgpu_archs=90 -Dgpu_ptx_archs=90
    -Demulated=disabled -Dtoolkit_runpath=false -Dopenblas=disabled -Dmpi=disabled -Dsleef=disabled -Donednn=disabled
    -Dcjson=enabled)
  if [ -f "$work/build.ninja" ]; then meson configure "$work" "${opts[@]}" || return 1
  else meson setup "$work" "${opts[@]}" || return 1; fi
  ninja -C "$work" || return 1
  [ -f "$work/src/backend/cuda/libgpucore_cuda.so" ] || { echo "no CUDA module was built (is nvcc found?)"; return 1; }
  rm -rf "$BUILD"
  (cd "$work" && find . \( -name '*.p' -o -name meson-private -o -name meson-logs -o -name meson-info -o -name fuzz \) -prune -o \
      \( -type f \( -perm -u+x -o -name '*.so*' \) -o -type l -name '*.so*' \) -print |
    grep -vE '\.(ninja|json|txt)$' | tar cf - -T -) | (mkdir -p "$BUILD" && cd "$BUILD" && tar xf -)
  git rev-parse HEAD >"$BUILD/commit.txt" 2>/dev/null
  # Carried libraries: what the build links that the device image has no package for (cJSON, libgomp).
  mkdir -p "$BUILD/bundled"
  local lib p
  for lib in libcjson.so.1 libgomp.so.1; do
    p=$(ldd "$BUILD/src/libgpucore.so" | awk -v l="$lib" '$1 == l {print $3}')
    [ -n "$p" ] && cp -L "$p" "$BUILD/bundled/$lib"
  done
  # pytest (pure Python) for a device python3 that has PyTorch, transformers and PEFT but not pytest
  python3 -m pip install -q --no-deps --target "$BUILD/pydeps" pytest==8.3.3 pluggy==1.5.0 iniconfig==2.0.0 \
    >/dev/null 2>&1 || echo "build-here: pytest not carried (pip failed); the device's own is used if present"
  find "$BUILD/pydeps" -name __pycache__ -prune -exec rm -rf {} + 2>/dev/null
  echo "build-here: $(du -sh "$BUILD" | cut -f1) in $BUILD, tree $(git ls-files -z | du -ch --files0-from=- | tail -1 | cut -f1) after $((SECONDS - t0)) s (the device tool carries up to 64 MiB)"
  local abs
  abs=$(grep -rlF "$PWD" "$BUILD" 2>/dev/null | head -3)
  [ -z "$abs" ] || { echo "build-here: files naming this machine's path $PWD: $abs"; return 1; }
  LD_LIBRARY_PATH="$PWD/$BUILD/bundled${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" LDD_HERE=1 ldd_check "$PWD/$BUILD"
}

# The CUDA libraries on the device: the toolkit's lib64, and the nvidia-* wheels' lib folders (CUDA 13
# wheels keep theirs under nvidia/cu13/lib; cuDNN and NCCL under nvidia/<name>/lib).
device_libs() {
  local p
  p=$(python3 - <<'PY' 2>/dev/null
import glob, os
dirs = []
try:
    import nvidia
    for root in list(nvidia.__path__):
        dirs += sorted(glob.glob(os.path.join(root, "*", "lib")))
except Exception:
    pass
print(":".join(d for d in dirs if glob.glob(os.path.join(d, "lib*.so*"))))
PY
)
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -d "$d" ] && p="${p:+$p:}$d"; done
  export LD_LIBRARY_PATH="${p}${LD_LIBRARY_PATH:+${p:+:}$LD_LIBRARY_PATH}"
  bundled_libs
}

# bundled_libs: a carried library is used only where the image lacks its own. ld.so searches
# LD_LIBRARY_PATH before the system's folders, so the bundled folder on it would shadow the image's
# (newer) libgomp; the ones the image lacks are linked into $SCRATCH/bundled, last on the path. An image
# copy too old for the build (a symbol version not found) gives way to the bundled one.
bundled_libs() {
  local f n mine=() image=()
  mkdir -p "$SCRATCH/bundled"
  for f in "$BUILD_ABS"/bundled/*.so*; do
    [ -e "$f" ] || continue
    n=$(basename "$f")
    if { ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null; } | awk -v n="$n" '$1 == n {f = 1} END {exit !f}'; then
      image+=("$n")
    else
      ln -sf "$f" "$SCRATCH/bundled/$n" && mine+=("$n")
    fi
  done
  export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$SCRATCH/bundled"
  if [ "${#image[@]}" != 0 ] && ldd -r "$BUILD_ABS/src/libgpucore.so" 2>&1 | grep -q "version .* not found"; then
    for n in "${image[@]}"; do ln -sf "$BUILD_ABS/bundled/$n" "$SCRATCH/bundled/$n"; done
    # the path order cannot put a bundled copy after the image's and still win: put the folder first
    export LD_LIBRARY_PATH="$SCRATCH/bundled:${LD_LIBRARY_PATH%:"$SCRATCH/bundled"}"
    mine+=("${image[@]}"); image=()
  fi
  # ldd's check accepts these names wherever they were found (the image's folders or the bundled copies)
  [ "${#image[@]}${#mine[@]}" = 00 ] || export LDD_BUNDLED_RE="^($(ls "$BUILD_ABS/bundled" | sed 's/\.so.*//; s/+/\\+/g' | paste -sd'|'))\.so"
  say "  bundled: ${mine[*]:-none used}; the image's own: ${image[*]:-none}"
}

# --- summary and steps -----------------------------------------------------------------------------
FAILED=0
say() { echo "$*" | tee -a "$OUT/summary.txt"; }
left() { echo $((DEADLINE - PACK_RESERVE_S - SECONDS)); }

# step NAME CAP_S COMMAND...: run in $PHASE_DIR/NAME.log under min(CAP_S, time left); one summary line.
step() {
  local name=$1 cap=$2 l
  shift 2
  l=$(left)
  if [ "$l" -le 3 ]; then
    say "$(printf '%-34s not reached: the deadline' "$name")"
    NOT_REACHED=$((NOT_REACHED + 1))
    return 124
  fi
  local bound=deadline
  # the stand-ins run every kernel and GEMM on this machine's (shared) CPUs: a dry run's own bounds are 3x
  [ "$DRY" = 1 ] && cap=$((cap * 3))
  [ "$cap" -lt "$l" ] && l=$cap && bound=own
  local t0=$SECONDS rc verdict
  # a step that is one of this script's functions runs in a child bash (timeout runs programs only)
  if [ "$(type -t "$1")" = function ]; then set -- bash -c '"$@"' "$1" "$@"; fi
  timeout -k 5 "$l" "$@" >"$PHASE_DIR/$name.log" 2>&1
  rc=$?
  verdict=ok
  if { [ "$rc" = 124 ] || [ "$rc" = 137 ]; } && [ "$bound" = deadline ]; then
    say "$(printf '%-34s CUT    %4ss  stopped by the shared deadline (partial log kept)' "$name" "$((SECONDS - t0))")"
    NOT_REACHED=$((NOT_REACHED + 1))
    return 124
  elif { [ "$rc" = 124 ] || [ "$rc" = 137 ]; } && [ "${STEP_CAP_UNDECIDED:-0}" = 1 ]; then
    # a step whose own bound says nothing about the code (memcheck's slowdown): neither pass nor fail
    say "$(printf '%-34s UNDECIDED %4ss  not concluded: killed at its own %s s bound (partial log kept)' "$name" "$((SECONDS - t0))" "$l")"
    NOT_CONCLUDED=$((NOT_CONCLUDED + 1))
    return 124
  elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then verdict="FAIL (killed at its own ${l} s bound)"
  elif [ "$rc" = 77 ]; then verdict="FAIL (the test skipped everything)"
  elif [ "$rc" = 5 ] && grep -qE "^SKIPPED|no tests ran" "$PHASE_DIR/$name.log"; then
    verdict="FAIL (pytest ran nothing: $(grep -m1 -E '^SKIPPED' "$PHASE_DIR/$name.log" | cut -c1-140))"
  elif [ "$rc" != 0 ]; then verdict="FAIL (rc $rc)"
  elif grep -q "^SKIP cuda backend" "$PHASE_DIR/$name.log"; then
    verdict="FAIL (skipped the cuda backend: $(grep -m1 '^SKIP cuda backend' "$PHASE_DIR/$name.log" | cut -c1-160))"
  elif [ "$DRY" != 1 ] && grep -qiE "^SKIPPED.*(cuda|no module named|not importable)" "$PHASE_DIR/$name.log"; then
    verdict="FAIL (pytest skipped: $(grep -m1 -iE '^SKIPPED' "$PHASE_DIR/$name.log" | cut -c1-140))"
  elif grep -q "^-- cpu$" "$PHASE_DIR/$name.log" && ! grep -q "^-- cuda$" "$PHASE_DIR/$name.log"; then
    verdict="FAIL (ran per backend but never on cuda)"
  fi
  [ "$verdict" = ok ] || FAILED=$((FAILED + 1))
  local tail_line
  tail_line=$(grep -E "[0-9]+ passed|FAIL " "$PHASE_DIR/$name.log" | tail -1 | cut -c1-100)
  say "$(printf '%-34s %-6s %4ss  %s' "$name" "${verdict%% *}" "$((SECONDS - t0))" "${verdict#ok}${tail_line:+  [$tail_line]}")"
  [ "$verdict" = ok ]
}

PHASES_PACKED=""
# phase N NAME: start phase N (its logs in $SCRATCH/N-NAME); pack the previous one.
phase() {
  pack_open
  PHASE_DIR="$SCRATCH/$1-$2"
  mkdir -p "$PHASE_DIR"
  say "== $1 $2 ($(left) s left)"
}
pack_open() {
  [ -n "${PHASE_DIR:-}" ] && [ -d "$PHASE_DIR" ] || return 0
  local b
  b=$(basename "$PHASE_DIR")
  case " $PHASES_PACKED " in *" $b "*) return 0 ;; esac
  tar czf "$OUT/$b.tgz" -C "$SCRATCH" "$b" 2>/dev/null
  PHASES_PACKED="$PHASES_PACKED $b"
}
finish() {
  local rc=$?
  trap - EXIT
  pack_open
  if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
    say "== end: $FAILED failed, ${NOT_REACHED:-0} not reached, ${NOT_CONCLUDED:-0} not concluded, $((SECONDS - START)) s of $TOTAL_S s; files in OUT: $(find "$OUT" -type f | wc -l)"
    if [ "$FAILED" != 0 ]; then say "RESULT: FAIL"
    elif [ "$rc" != 0 ]; then say "RESULT: FAIL (the script itself stopped with rc $rc)"
    else
      local open=""
      [ "${NOT_REACHED:-0}" = 0 ] || open="steps not reached"
      [ "${NOT_CONCLUDED:-0}" = 0 ] || open="${open:+$open, }steps not concluded"
      say "RESULT: PASS${open:+ (with $open)}"
    fi
  fi
  rm -rf "$SCRATCH"
  [ "$rc" = 0 ] && [ "$FAILED" != 0 ] && rc=1
  exit "$rc"
}

T="$BUILD/tests"
have() { [ -x "$T/$1" ]; }

phase_ldd() {
  phase 1 ldd
  {
    date -u +"date %Y-%m-%dT%H:%M:%SZ"
    echo "commit $(git rev-parse HEAD 2>/dev/null || cat "$BUILD/commit.txt" 2>/dev/null || echo unknown) build $BUILD dry=$DRY"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -4
    echo "python3: $(python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)' 2>&1 | tail -1)"
    echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  } >"$PHASE_DIR/machine.txt"
  sed 's/^/  /' "$PHASE_DIR/machine.txt" | head -5 | tee -a "$OUT/summary.txt"
  if [ "$DRY" = 1 ]; then
    # The dry build is the CI build, which links this machine's OpenBLAS, Open MPI, oneDNN, SLEEF:
    # here the check passes when it names them (it would stop a build that carries them).
    export LDD_HERE=1; step ldd_names_host_libs 60 ldd_expect_host_libs "$BUILD_ABS"
    grep -oE 'lib(openblas|mpi|dnnl|sleef)[^ (]*' "$PHASE_DIR/ldd_names_host_libs.log" | sort -u | head -5 |
      sed 's/^/  outside the list: /' | tee -a "$OUT/summary.txt"
  else
    export LDD_HERE=0; step ldd 60 ldd_check "$BUILD_ABS"
    ldd "$BUILD/src/backend/cuda/libgpucore_cuda.so" >>"$PHASE_DIR/machine.txt" 2>&1
  fi
}

# The doctor must see a usable CUDA device and a passing smoke test on cuda:0.
doctor_check() {
  local dir=$1
  "$BUILD/src/tools/gpucore-info" --json >"$dir/info.json" 2>"$dir/info.err"
  "$BUILD/src/tools/gpucore-info" >"$dir/info.txt" 2>&1
  python3 - "$dir/info.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
cuda, devs, smoke = d.get("cuda", {}), d.get("devices", {}), d.get("smoke test", {})
n = int(devs.get("cuda devices", "0") or 0)
print("cuda:", cuda.get("status"), "| devices:", n, "|", devs.get("cuda:0", "-"))
print("libraries:", d.get("libraries"))
print("smoke cuda:0:", smoke.get("cuda:0", "-"))
ok = cuda.get("status") == "usable" and n >= 1 and str(smoke.get("cuda:0", "")).startswith("ok")
if not ok:
    print("doctor: no usable CUDA device:", cuda.get("status", "(no cuda section)"))
sys.exit(0 if ok else 1)
PY
}

phase_doctor() {
  phase 2 doctor
  if [ "$DRY" = 1 ] && [ "${GPU_RUN_DOCTOR:-}" = skip ]; then
    say "  doctor: not run (GPU_RUN_DOCTOR=skip, a dry run's check of the later steps only)"
    return 0
  fi
  if ! step doctor 45 doctor_check "$PHASE_DIR"; then
    sed -n '1,4p' "$PHASE_DIR/doctor.log" | sed 's/^/  /' | tee -a "$OUT/summary.txt"
    say "stop: no usable CUDA device, so no later step would run GPU code (info.txt, ldd in 1-ldd.tgz say why)"
    return 1
  fi
  head -3 "$PHASE_DIR/doctor.log" | sed 's/^/  /' | tee -a "$OUT/summary.txt"
  [ -x "$BUILD/examples/quickstart" ] && step quickstart 30 env GPUCORE_DEVICE=cuda "$BUILD/examples/quickstart"
  step test_core 60 "$T/test_core"
  return 0
}

phase_contract() {
  phase 3 contract
  local t
  # attention first: does cuDNN's SDPA take our bf16 graphs (each one's verdict in the summary; a decline of a
  # graph we expect it to take fails this step and test_attention's), and how fast are cuDNN, our kernel and
  # PyTorch's SDPA in bf16
  export GPUCORE_EXPECT_CUDNN=1
  if [ -x "$BUILD/bench/bench_attention" ]; then
    step attention_probe 60 env GPUCORE_LOG=info "$BUILD/bench/bench_attention" --probe --device cuda
    grep -h "^attention probe" "$PHASE_DIR/attention_probe.log" | cut -c1-700 | sed 's/^/  /' | tee -a "$OUT/summary.txt"
    local sizes="--seqs 1024,2048,4096,8192"
    [ "$DRY" = 1 ] && sizes="--seqs 32 --batch 1 --heads 2" # the stand-ins compute on the host
    # shellcheck disable=SC2086
    step attention_bf16 150 python3 bench/attention_paths.py "$BUILD/bench/bench_attention" --device cuda --dtype bf16 $sizes
    grep -h "^  " "$PHASE_DIR/attention_bf16.log" | head -70 >>"$OUT/summary.txt"
  fi
  for t in test_matmul test_conv test_attention; do
    have $t && step $t 120 env GPUCORE_LOG=info "$T/$t"
  done
  for t in test_comm test_ddp; do
    have $t && step ${t}_local 90 env GPUCORE_LOG=info "$T/$t" local
  done
  if [ "$DRY" = 1 ] && have cuda_contract/test_cuda_contract; then
    step test_cuda_contract 120 env GPUCORE_LOG=info "$T/cuda_contract/test_cuda_contract"
  fi
  # the fallback GEMM kernel is far slower than cuBLASLt, and attention keys cuDNN declined ran on our
  # kernels: every use is worth a look
  grep -h "fallback GEMM kernel" "$PHASE_DIR"/*.log 2>/dev/null | sed 's/^.*matmul: //' | sort | uniq -c | sort -rn \
    >"$PHASE_DIR/fallback_gemm.txt"
  grep -h "attention: .*the attention kernel" "$PHASE_DIR"/*.log 2>/dev/null | sort | uniq -c | sort -rn \
    >"$PHASE_DIR/fallback_attention.txt"
  say "  fallback GEMM plans: $(wc -l <"$PHASE_DIR/fallback_gemm.txt"); attention keys on the kernel fallback: $(wc -l <"$PHASE_DIR/fallback_attention.txt")"
  head -5 "$PHASE_DIR/fallback_gemm.txt" "$PHASE_DIR/fallback_attention.txt" 2>/dev/null | cut -c1-160 | sed 's/^/    /' >>"$OUT/summary.txt"
}

# bench_figures FILE: the joined JSON lines as one summary line each
bench_figures() {
  python3 - "$1" <<'PY' | head -80 >>"$OUT/summary.txt"
import json, sys
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    peer = f"  {r['peer']} {r.get('peer_value'):.4g}  ratio {r.get('speedup', 0):.3g}" if "peer_value" in r else ""
    print(f"  {r.get('bench')} {r.get('case')} {r.get('metric')}: {r.get('value'):.4g} {r.get('unit')}{peer}")
PY
}

phase_bench() {
  phase 4 bench
  local cap=200
  [ "$DRY" = 1 ] && cap=40 # the stand-ins compute every GEMM on the host: only check that they start
  step bench 300 python3 "$BUILD/bench/gpucore-bench" --only matmul,attention --quick --device cuda --json \
    --timeout "$cap" --out "$PHASE_DIR/bench.jsonl"
  [ -s "$PHASE_DIR/bench.jsonl" ] && bench_figures "$PHASE_DIR/bench.jsonl"
  step bench_own_figures 30 bench_own_figures "$PHASE_DIR/bench.jsonl"
  [ "$DRY" = 1 ] && say "  bench: needs a real GPU for its figures (the stand-ins compute on this machine's CPUs: $(tail -1 "$PHASE_DIR/bench_own_figures.log"))"
}

# bench_own_figures FILE: how many figures are libgpucore's own (a program that timed out or failed
# leaves only its peers' rows, and gpucore-bench still exits 0); none fails, except in a dry run.
bench_own_figures() {
  local n
  n=$(python3 -c 'import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
print(sum(1 for r in rows if "peer" not in r or "peer_value" in r))' "$1" 2>/dev/null || echo 0)
  echo "${n:-0} figures of our own in $(basename "$1")"
  [ "${n:-0}" -gt 0 ] || [ "$DRY" = 1 ]
}

# The Python tests on the device's python3 (PyTorch, transformers, PEFT); pytest from the carry if absent.
# pytest_env [PYTHON]: the PYTHONPATH=... for that python3 (default python3).
pytest_env() {
  local pp="$ROOT/python"
  "${1:-python3}" -c "import pytest" 2>/dev/null || pp="$pp:$BUILD_ABS/pydeps"
  [ "$DRY" = 1 ] && pp="$pp:$ROOT/build-pydeps"
  echo "PYTHONPATH=$pp${PYTHONPATH:+:$PYTHONPATH}"
}

phase_models() {
  phase 5 models
  local py=python3
  [ "$DRY" = 1 ] && py=${GPUCORE_TORCH_PYTHON:-/usr/bin/python3}
  local f n found=0 env_pp
  env_pp=$(pytest_env "$py")
  # which Python, PyTorch, transformers and PEFT the checks ran against (and where each was imported from)
  say "  models: $(env "$env_pp" timeout 60 "$py" - 2>&1 <<'PY' | tail -1 | cut -c1-400
import os, sys
out = [f"python {sys.version.split()[0]} ({sys.executable})"]
for name in ("torch", "transformers", "peft", "pytest"):
    try:
        m = __import__(name)
        out.append(f"{name} {m.__version__} ({os.path.dirname(os.path.dirname(m.__file__))})")
    except Exception as e:
        out.append(f"{name} not importable ({type(e).__name__}: {e})")
print("; ".join(out))
PY
)"
  for f in python/torch_tests/test_lm_capi.py python/torch_tests/test_models_hf.py; do
    [ -f "$f" ] || continue
    found=1
    n=$(basename "$f" .py)
    step "$n" 150 env "$env_pp" GPUCORE_LIBRARY="$BUILD_ABS/src/libgpucore.so" GPUCORE_TEST_DEVICE=cuda \
      "$py" -m pytest -q -p no:cacheprovider -rs "$f"
  done
  [ "$found" = 1 ] || say "  models: no language-model tests in this tree"
}

# GPU_RUN_ONLY=name,...: the suite phase runs only the tests (or "pytest") named (tests/test_gpu_run.sh
# checks their invocations that way).
only() { [ -z "${GPU_RUN_ONLY:-}" ] || case ",$GPU_RUN_ONLY," in *",$1,"*) true ;; *) false ;; esac; }

# test_mpi_optional EXE: one scenario per process, as meson runs it: the MPI module unfindable, and a
# library that is no MPI module. "found" and "nolibmpi" need the build's MPI module.
mpi_optional_steps() {
  local mod="$BUILD_ABS/src/backend/mpi/libgpucore_mpi.so"
  step test_mpi_optional_missing 30 env GPUCORE_MPI_MODULE="$BUILD_ABS/no-such-folder/libgpucore_mpi.so" "$1" missing
  step test_mpi_optional_notmodule 30 "$1" notmodule "$BUILD_ABS/src/libgpucore.so"
  if [ -f "$mod" ]; then
    step test_mpi_optional_found 30 "$1" found
    step test_mpi_optional_nolibmpi 30 "$1" nolibmpi "$mod"
  else
    say "  test_mpi_optional found, nolibmpi: left out (this build has no MPI module: built without Open MPI)"
  fi
}

phase_suite() {
  phase 6 suite
  local t n
  for t in "$T"/test_*; do
    n=$(basename "$t")
    [ -x "$t" ] && [ -f "$t" ] || continue
    # phases 2 and 3 ran these (test_comm and test_ddp with "local")
    case $n in test_matmul | test_conv | test_attention | test_core | test_comm | test_ddp | *.p | *.sh) continue ;; esac
    only "$n" || continue
    case $n in
    test_zero) step "${n}_local" 60 "$t" local ;;
    test_mpi_optional) mpi_optional_steps "$t" ;;
    *) step "$n" 60 "$t" ;;
    esac
  done
  only pytest && step pytest 120 env "$(pytest_env)" GPUCORE_LIBRARY="$BUILD_ABS/src/libgpucore.so" GPUCORE_DEVICE=cuda \
    python3 -m pytest -q -p no:cacheprovider -x python/tests
}

phase_memcheck() {
  phase 7 memcheck
  local cs t
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  # GPU_RUN_SANITIZER: a stand-in for compute-sanitizer (tests/test_gpu_run.sh runs this phase dry with one)
  cs=${GPU_RUN_SANITIZER:-$cs}
  if { [ "$DRY" = 1 ] && [ -z "${GPU_RUN_SANITIZER:-}" ]; } || [ ! -x "$cs" ]; then
    say "  memcheck: not run ($([ "$DRY" = 1 ] && echo 'a dry run has no GPU' || echo "no compute-sanitizer at $cs"))"
    return 0
  fi
  # access errors only: cuBLASLt and cuDNN handles are kept for the process's life by design, which
  # --leak-check would count as errors. memcheck runs a test 10-100x slower, so a kill at a step's own
  # bound is "not concluded", not a failure (a kill by the shared deadline is "cut", as everywhere).
  for t in test_matmul test_ops_elementwise; do
    have $t && STEP_CAP_UNDECIDED=1 step memcheck_$t "${GPU_RUN_MEMCHECK_CAP_S:-150}" "$cs" --tool memcheck --error-exitcode 9 "$T/$t"
  done
}

PHASES="ldd doctor contract bench models suite memcheck"
case "${1:-}" in
--build-here) BUILD=${GPU_RUN_BUILD:-build-gpu}; build_here; exit $? ;;
--all) ;;
--phases)
  # a second call on a warm machine: only these phases (ldd and the doctor always run first)
  PHASES="ldd doctor ${2:?--phases LIST, e.g. suite,memcheck}"
  PHASES=${PHASES//,/ } ;;
*) sed -n '2,/^set -uo pipefail/{/^set -uo/!p}' "$0"; exit 2 ;;
esac
export -f ldd_check ldd_expect_host_libs doctor_check bench_own_figures
export ALLOWED_RE CUDA_SONAME_RE DRY BUILD
BUILD_ABS=$(realpath -m "$BUILD")
START=$SECONDS
DEADLINE=$((START + TOTAL_S))
NOT_REACHED=0
NOT_CONCLUDED=0
OUT=${OUT:?set OUT to the folder for summary.txt and the packed logs}
mkdir -p "$OUT"
: >"$OUT/summary.txt"
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/gpu-run.XXXXXX")
trap finish EXIT
trap 'say "stopped by a signal"; exit 143' TERM INT
say "gpu-run: phases $PHASES; dry=$DRY, build $BUILD, deadline $TOTAL_S s"
if [ "$DRY" = 1 ]; then
  export GPUCORE_CUDA_PLUGIN=$BUILD_ABS/tests/cuda_contract/libgpucore_cuda_contract.so
  # the module opens cuDNN and NCCL with dlopen; their stand-ins are inside it
  export GPUCORE_CUDNN_LIBRARY=$GPUCORE_CUDA_PLUGIN GPUCORE_NCCL_LIBRARY=$GPUCORE_CUDA_PLUGIN
  [ -f "$GPUCORE_CUDA_PLUGIN" ] || { say "FAIL dry run: no contract module in $BUILD (ninja -C $BUILD first)"; FAILED=1; exit 1; }
else
  [ -f "$BUILD/src/backend/cuda/libgpucore_cuda.so" ] ||
    { say "FAIL no CUDA module in $BUILD: run bench/gpu-run.sh --build-here first and carry $BUILD"; FAILED=1; exit 1; }
  device_libs
fi
for p in $PHASES; do
  case $p in
  ldd) phase_ldd ;;
  doctor) phase_doctor || exit 1 ;;
  contract | bench | models | suite | memcheck) "phase_$p" ;;
  *) say "FAIL unknown phase '$p' (choose from: contract bench models suite memcheck)"; FAILED=$((FAILED + 1)) ;;
  esac
done
exit 0
