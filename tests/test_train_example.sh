#!/bin/sh
# test_train_example.sh — the end-to-end example must learn the UCI digits, resume
# exactly (its checkpoint policy too) and agree across data-parallel ranks.
# Usage: test_train_example.sh TRAIN_CNN [MPIRUN]
#   0. the data: Debian's python3-sklearn's digits.csv.gz (scripts/setup.sh installs it, or
#      copies the file into build-data/); $GPUCORE_DIGITS may name another copy. Missing: FAIL;
#      train_cnn without --data or --synthetic refuses to run (no silent fallback);
#   1. a straight run of N steps: the loss falls (last-10 mean < 0.7 x first-10 mean) and
#      a longer run reaches a held-out accuracy of at least 0.85 (chance: 0.1);
#   2. N/2 steps + save, then resume to N: the printed losses equal the straight
#      run's bit for bit (data, parameters, optimizer and loss-scaler state restored);
#      a run saved under --checkpoint-policy sqrt resumes under sqrt without the flag;
#   3. checkpointing policies (all, sqrt, every:2, budget) give the same losses as none;
#   4. under mpirun -np 2 --ddp: the loss falls and both ranks end with the same
#      parameters (skipped, with the reason, when mpirun or MPI is absent);
#   5. --synthetic (the toy task, only when asked for) still trains.
# Short runs on the CPU (OMP_NUM_THREADS=1: CI machines have few cores).
set -eu
exe=$1
mpirun=${2:-}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export OMP_NUM_THREADS=1 GPUCORE_DEVICE=cpu
src=$(cd "$(dirname "$0")/.." && pwd)
gz=""
for f in "${GPUCORE_DIGITS:-}" /usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz "$src/build-data/digits.csv.gz"; do
  [ -n "$f" ] && [ -f "$f" ] && { gz=$f; break; }
done
if [ -z "$gz" ]; then
  echo "FAIL: the UCI digits (digits.csv.gz) are missing: scripts/setup.sh provides them (python3-sklearn's file)"
  exit 1
fi
case $gz in *.gz) gzip -dc "$gz" > "$dir/digits.csv" ;; *) cp "$gz" "$dir/digits.csv" ;; esac
N=40
common="--device cpu --batch 16 --layers 3 --channels 4 --seed 7 --lr 3e-3 --data $dir/digits.csv"
fail=0
losses() { grep '^step ' "$1" | awk '{print $2, $4}'; }
accuracy() { grep '^eval step' "$1" | tail -1 | awk '{print $6}'; }

if "$exe" --device cpu --steps 2 > "$dir/nodata.txt" 2>&1; then
  echo "FAIL: train_cnn ran without --data or --synthetic"; fail=1
elif grep -q "no training data" "$dir/nodata.txt"; then echo "no data: refused ($(grep -m1 'no training data' "$dir/nodata.txt"))"
else echo "FAIL: train_cnn without data did not say why:"; head -3 "$dir/nodata.txt"; fail=1; fi

"$exe" $common --steps $N > "$dir/straight.txt"
losses "$dir/straight.txt" > "$dir/straight.loss"
[ "$(wc -l < "$dir/straight.loss")" -eq $N ] || { echo "FAIL: the straight run printed $(wc -l < "$dir/straight.loss") losses, want $N"; fail=1; }
awk -v n=$N 'NR<=10{f+=$2} NR>n-10{l+=$2} END{printf "first-10 mean %.4f, last-10 mean %.4f\n", f/10, l/10; exit !(l < 0.7*f)}' "$dir/straight.loss" \
  || { echo "FAIL: the loss did not fall enough"; fail=1; }
grep -q '^data: .*1797 images of 8x8, 10 classes: 1438 for training, 359 held out' "$dir/straight.txt" \
  || { echo "FAIL: the run did not report the digits' split:"; grep '^data' "$dir/straight.txt"; fail=1; }
"$exe" $common --steps 150 --eval-every 50 --no-profile > "$dir/long.txt"
evals=$(grep -c '^eval step' "$dir/long.txt" || true)
acc=$(accuracy "$dir/long.txt")
if [ "$evals" -eq 3 ] && awk -v a="${acc:-0}" 'BEGIN{exit !(a >= 0.85)}'; then echo "held-out accuracy after 150 steps: $acc ($evals evaluations)"
else echo "FAIL: held-out accuracy ${acc:-none} after 150 steps ($evals evaluations, want 3 and >= 0.85)"; fail=1; fi

"$exe" $common --steps $((N/2)) --save "$dir/ck.safetensors" > "$dir/half.txt"
"$exe" $common --steps $N --resume "$dir/ck.safetensors" > "$dir/resumed.txt"
grep -q "^resumed from .* at step $((N/2))" "$dir/resumed.txt" || { echo "FAIL: the resumed run did not start at step $((N/2))"; fail=1; }
{ losses "$dir/half.txt"; losses "$dir/resumed.txt"; } > "$dir/joined.loss"
if cmp -s "$dir/straight.loss" "$dir/joined.loss"; then echo "resume: $N losses identical to the straight run"
else echo "FAIL: save + resume changed the loss curve:"; diff "$dir/straight.loss" "$dir/joined.loss" | head; fail=1; fi

# the policy travels in the checkpoint: saved under sqrt, resumed without --checkpoint-policy
"$exe" $common --steps $((N/2)) --checkpoint-policy sqrt --save "$dir/cks.safetensors" > "$dir/shalf.txt"
"$exe" $common --steps $N --resume "$dir/cks.safetensors" > "$dir/sresumed.txt"
if grep -q "^resumed from .* (checkpoint policy sqrt, from the checkpoint)" "$dir/sresumed.txt" &&
   grep -q "^checkpoint executor (policy sqrt, last step): .* [1-9][0-9]* recomputed" "$dir/sresumed.txt"; then
  echo "resume: the checkpoint's policy sqrt kept ($(grep '^checkpoint executor' "$dir/sresumed.txt" | cut -c1-80))"
else echo "FAIL: the resumed run lost the checkpoint policy:"; grep '^resumed\|^checkpoint executor' "$dir/sresumed.txt"; fail=1; fi
{ losses "$dir/shalf.txt"; losses "$dir/sresumed.txt"; } > "$dir/sjoined.loss"
cmp -s "$dir/straight.loss" "$dir/sjoined.loss" || { echo "FAIL: sqrt save + resume changed the loss curve"; fail=1; }
"$exe" $common --steps $N --resume "$dir/cks.safetensors" --checkpoint-policy every:2 > "$dir/oresumed.txt"
grep -q "^resumed from .* (checkpoint policy every:2, from the command line)" "$dir/oresumed.txt" \
  || { echo "FAIL: --checkpoint-policy on resume did not override the saved one:"; grep '^resumed' "$dir/oresumed.txt"; fail=1; }

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

"$exe" --device cpu --synthetic --batch 16 --layers 2 --channels 4 --seed 7 --steps 30 --no-profile > "$dir/syn.txt"
losses "$dir/syn.txt" > "$dir/syn.loss"
if grep -q '^data: --synthetic' "$dir/syn.txt" &&
   awk 'NR<=10{f+=$2} NR>20{l+=$2} END{exit !(l < 0.7*f)}' "$dir/syn.loss"; then echo "synthetic: the toy task trains when asked for"
else echo "FAIL: --synthetic did not train:"; tail -3 "$dir/syn.txt"; fail=1; fi

[ $fail -eq 0 ] && echo "test_train_example: passed" || echo "test_train_example: FAILED"
exit $fail
