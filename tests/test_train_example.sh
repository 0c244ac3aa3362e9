#!/bin/sh
# test_train_example.sh — the end-to-end example must learn, resume exactly and
# agree across data-parallel ranks. Usage: test_train_example.sh TRAIN_CNN [MPIRUN]
#   1. a straight run of N steps: the loss falls (last-10 mean < 0.7 x first-10 mean);
#   2. N/2 steps + save, then resume to N: the printed losses equal the straight
#      run's bit for bit (data, parameters, optimizer and loss-scaler state restored);
#   3. checkpointing policies (all, sqrt, every:2, budget) give the same losses as none;
#   4. under mpirun -np 2 --ddp: the loss falls and both ranks end with the same
#      parameters (skipped, with the reason, when mpirun or MPI is absent).
# Short runs on the CPU (OMP_NUM_THREADS=1: CI machines have few cores).
set -eu
exe=$1
mpirun=${2:-}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export OMP_NUM_THREADS=1 GPUCORE_DEVICE=cpu
N=40
common="--device cpu --batch 16 --layers 3 --channels 4 --seed 7 --lr 3e-3"
fail=0
losses() { grep '^step ' "$1" | awk '{print $2, $4}'; }

"$exe" $common --steps $N > "$dir/straight.txt"
losses "$dir/straight.txt" > "$dir/straight.loss"
[ "$(wc -l < "$dir/straight.loss")" -eq $N ] || { echo "FAIL: the straight run printed $(wc -l < "$dir/straight.loss") losses, want $N"; fail=1; }
awk -v n=$N 'NR<=10{f+=$2} NR>n-10{l+=$2} END{printf "first-10 mean %.4f, last-10 mean %.4f\n", f/10, l/10; exit !(l < 0.7*f)}' "$dir/straight.loss" \
  || { echo "FAIL: the loss did not fall enough"; fail=1; }

"$exe" $common --steps $((N/2)) --save "$dir/ck.safetensors" > "$dir/half.txt"
"$exe" $common --steps $N --resume "$dir/ck.safetensors" > "$dir/resumed.txt"
grep -q "^resumed from .* at step $((N/2))" "$dir/resumed.txt" || { echo "FAIL: the resumed run did not start at step $((N/2))"; fail=1; }
{ losses "$dir/half.txt"; losses "$dir/resumed.txt"; } > "$dir/joined.loss"
if cmp -s "$dir/straight.loss" "$dir/joined.loss"; then echo "resume: $N losses identical to the straight run"
else echo "FAIL: save + resume changed the loss curve:"; diff "$dir/straight.loss" "$dir/joined.loss" | head; fail=1; fi

for p in all sqrt every:2 budget:200000; do
  "$exe" $common --steps 12 --checkpoint-policy $p > "$dir/p.txt" || { echo "FAIL: policy $p: the run failed"; fail=1; }
  losses "$dir/p.txt" > "$dir/p.loss"
  head -12 "$dir/straight.loss" > "$dir/ref.loss"
  if cmp -s "$dir/ref.loss" "$dir/p.loss"; then echo "policy $p: losses identical to none"
  else echo "FAIL: policy $p changed the losses"; diff "$dir/ref.loss" "$dir/p.loss" | head -5; fail=1; fi
done

if [ -z "$mpirun" ] || ! command -v "$mpirun" >/dev/null 2>&1; then
  echo "SKIP ddp: mpirun not found"
else
  if "$mpirun" --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS -x GPUCORE_DEVICE \
       "$exe" $common --steps $N --ddp > "$dir/ddp.txt" 2> "$dir/ddp.err"; then
    losses "$dir/ddp.txt" > "$dir/ddp.loss"
    awk -v n=$N 'NR<=10{f+=$2} NR>n-10{l+=$2} END{printf "ddp: first-10 mean %.4f, last-10 mean %.4f\n", f/10, l/10; exit !(l < 0.7*f)}' "$dir/ddp.loss" \
      || { echo "FAIL: the ddp loss did not fall enough"; fail=1; }
    sums=$(grep '^rank .* checksum' "$dir/ddp.txt" | awk '{print $4}' | sort -u | wc -l)
    ranks=$(grep -c '^rank .* checksum' "$dir/ddp.txt")
    if [ "$ranks" -eq 2 ] && [ "$sums" -eq 1 ]; then echo "ddp: 2 ranks agree: $(grep '^rank 0 checksum' "$dir/ddp.txt")"
    else echo "FAIL: ddp ranks disagree or are missing:"; grep checksum "$dir/ddp.txt"; fail=1; fi
  elif grep -q "NOT_SUPPORTED" "$dir/ddp.err"; then
    echo "SKIP ddp: $(grep -m1 NOT_SUPPORTED "$dir/ddp.err")"
  else
    echo "FAIL: mpirun -np 2 train_cnn --ddp failed:"; tail -5 "$dir/ddp.err"; fail=1
  fi
fi
[ $fail -eq 0 ] && echo "test_train_example: passed" || echo "test_train_example: FAILED"
exit $fail
