#!/bin/sh
# comm_failure.sh MPIRUN EXE NP MODE BOUND_S — run EXE MODE under mpirun with NP
# ranks, where the last rank stalls or exits instead of joining a collective. Passes
# when the job ends (non-zero, as a broken MPI job must) within BOUND_S seconds and,
# for a stall, the surviving ranks reported GPUCORE_ERR_COMM themselves. `timeout`
# bounds our own time, so a hang is a failure, never a stuck CI job.
mpirun="$1"; exe="$2"; np="$3"; mode="$4"; bound="$5"
log=$(mktemp)
start=$(date +%s)
OMPI_MCA_rmaps_base_oversubscribe=1 timeout -k 5 "$((bound + 30))" "$mpirun" --allow-run-as-root --oversubscribe \
  -np "$np" "$exe" "$mode" >"$log" 2>&1
rc=$?
elapsed=$(( $(date +%s) - start ))
cat "$log"
echo "comm_failure ($mode, $np ranks): mpirun exit $rc after ${elapsed}s (bound ${bound}s)"
ok=1
if [ "$rc" -eq 0 ]; then echo "FAIL: the job reported success although a rank died"; ok=0; fi
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then echo "FAIL: the job hung (killed by timeout)"; ok=0; fi
if [ "$elapsed" -gt "$bound" ]; then echo "FAIL: took ${elapsed}s > ${bound}s"; ok=0; fi
if [ "$mode" = stall ] && ! grep -q "with GPUCORE_ERR_COMM: rank" "$log"; then
  echo "FAIL: no surviving rank reported GPUCORE_ERR_COMM"; ok=0
fi
if grep -q "^FAIL " "$log"; then echo "FAIL: a check failed on a surviving rank"; ok=0; fi
rm -f "$log"
[ "$ok" -eq 1 ] && { echo "comm_failure: 1 passed, 0 failed"; exit 0; }
exit 1
