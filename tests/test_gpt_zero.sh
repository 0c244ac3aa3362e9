#!/bin/sh
# test_gpt_zero.sh — the GPT example under mpirun -np 2 with --zero 1, 2 and 3 prints
# the same losses as with --ddp: equal to 1e-6 relative in f32 (the reductions add the
# same two values; only the clipping norm's summation differs) and to 1e-3 in bf16.
# Usage: test_gpt_zero.sh MPIRUN TRAIN_GPT
set -eu
mpirun=$1
exe=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export OMP_NUM_THREADS=1
common="--device cpu --steps 4 --finetune-steps 0 --sample 0 --no-profile --quiet --log-json --seq 32 --batch 4"
run() { "$mpirun" --allow-run-as-root --oversubscribe -np 2 "$exe" $common "$@" | grep '"step"' | sed 's/.*"step":\([0-9]*\),"loss":\([^}]*\)}/\1 \2/'; }
fail=0
for dt in f32 bf16; do
  flag=""; tol=1e-3
  if [ $dt = f32 ]; then flag="--f32"; tol=1e-6; fi
  run $flag --ddp > "$dir/ddp.$dt"
  [ "$(wc -l < "$dir/ddp.$dt")" -eq 4 ] || { echo "FAIL: --ddp $dt printed $(wc -l < "$dir/ddp.$dt") losses, want 4"; fail=1; }
  for stage in 1 2 3; do
    run $flag --zero $stage > "$dir/zero$stage.$dt"
    if paste "$dir/ddp.$dt" "$dir/zero$stage.$dt" | awk -v tol=$tol '
        { d = $2 - $4; if (d < 0) d = -d; r = d / $2; if (r > worst) worst = r; n++ }
        END { printf "  worst rel diff %.3g over %d steps\n", worst, n; exit !(n == 4 && worst <= tol) }'; then
      echo "ok: --zero $stage $dt matches --ddp"
    else
      echo "FAIL: --zero $stage $dt differs from --ddp"; paste "$dir/ddp.$dt" "$dir/zero$stage.$dt"; fail=1
    fi
  done
done
exit $fail
