"""small_ops.py — the binding's per-op cost on 16-element f32 tensors, in microseconds (min and
median of 9 rounds, each the best of 3 batches of 20000 calls): a + b into a new result, into out=,
a * 2.0 (a tensor and a number) and gpucore.scale. Run it with each tree's binding and library:
  GPUCORE_LIBRARY=TREE/build-release/src/libgpucore.so PYTHONPATH=TREE/python python3 small_ops.py"""
import timeit

import numpy as np

import gpucore as g

a = g.tensor(np.random.rand(16).astype("float32"))
b = g.tensor(np.random.rand(16).astype("float32"))
c = g.add(a, b)
cases = {"add new": lambda: g.add(a, b), "add out=": lambda: g.add(a, b, out=c),
         "mul 2.0": lambda: g.mul(a, 2.0), "scale": lambda: g.scale(a, 2.0, 1.0)}
res = {k: [] for k in cases}
for _ in range(9):
    for k, f in cases.items():
        res[k].append(min(timeit.repeat(f, number=20000, repeat=3)) / 20000 * 1e6)
print("  ".join("%s %.3f / %.3f" % (k, min(v), sorted(v)[4]) for k, v in res.items()))
np.testing.assert_array_equal(g.add(a, b, out=c).numpy(), a.numpy() + b.numpy())
np.testing.assert_array_equal(g.mul(a, 2.0).numpy(), a.numpy() * np.float32(2.0))
