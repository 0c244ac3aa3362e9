#!/bin/sh
# test_bench_lm_args.sh — bench_lm's --rounds option: the usage line names it, and a count outside
# 1..64 is refused (exit 2, a message naming --rounds) before any model is written or loaded.
#   usage: test_bench_lm_args.sh BENCH_LM
set -u
BENCH=$1
fail=0
out=$("$BENCH" --no-such-option 2>&1); rc=$?
[ "$rc" = 2 ] || { echo "unknown option: exit $rc, want 2"; fail=1; }
case $out in *"--rounds R"*) ;; *) echo "the usage line does not name --rounds: $out"; fail=1 ;; esac
for r in 0 65 -1; do
  out=$("$BENCH" --rounds "$r" --dir /nonexistent/bench-lm-test 2>&1); rc=$?
  [ "$rc" = 2 ] || { echo "--rounds $r: exit $rc, want 2 ($out)"; fail=1; }
  case $out in *"--rounds 1..64"*) ;; *) echo "--rounds $r: the message does not name --rounds 1..64: $out"; fail=1 ;; esac
done
[ "$fail" = 0 ] && echo "bench_lm --rounds: usage and bounds OK"
exit $fail
