#!/bin/bash
# alternate old/new libgpucore under the same bench binary; args passed to bench_matmul
for round in $(seq ${ROUNDS:-2}); do for v in old new; do
  if [ $v = old ]; then L=/tmp/h50/old; else L=/work/main/build-h50/src; fi
  echo "== $v round $round load $(cut -d' ' -f1-3 /proc/loadavg)"
  LD_LIBRARY_PATH=$L /tmp/h50/bench_matmul "$@" | grep -v "FMA peak\|bf16 peak (\|^bench_matmul"
done; done
