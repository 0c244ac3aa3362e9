"""release_batch_ab.py — what giving dropped small results back in batches saves per op: g.add on
16-element f32 tensors (alone, and with a synchronize), the batch on and off in turns in one
process (off: the size limit set to 0, so every result goes back at once), best of 6 x 3 x 20000,
in microseconds. Run from the repository root with a build's library:
  GPUCORE_LIBRARY=build-release/src/libgpucore.so PYTHONPATH=python python3 bench/results/2026-12-05-zen1/probes/release_batch_ab.py"""
import sys
import timeit

import numpy as np
import gpucore as g

T = sys.modules["gpucore.tensor"]
a = g.tensor(np.random.rand(16).astype("float32"))
b = g.tensor(np.random.rand(16).astype("float32"))
ctx = a.context
limit = T._RELEASE_BATCH_MAX_ELEMENTS
res = {True: ([], []), False: ([], [])}
for _ in range(6):
    for on in (True, False):
        T._RELEASE_BATCH_MAX_ELEMENTS = limit if on else 0
        T._shape_cache.clear()
        res[on][0].append(min(timeit.repeat(lambda: g.add(a, b), number=20000, repeat=3)) / 20000 * 1e6)
        res[on][1].append(min(timeit.repeat(lambda: (g.add(a, b), ctx.synchronize()), number=20000, repeat=3))
                          / 20000 * 1e6)
for on, label in ((True, "batched"), (False, "at once")):
    print("%-8s add %.3f us   add+synchronize %.3f us" % (label, min(res[on][0]), min(res[on][1])))
