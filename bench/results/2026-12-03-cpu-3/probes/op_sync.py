"""op_sync.py — the same row max (256 x 1024) and synchronize from Python, 30000 times: µs per op."""
import time, gpucore as g
from gpucore import ops
ctx = g.Context("cpu"); m = ctx.empty((256, 1024), "float32").uniform_(-1, 1, seed=1)
o = ctx.empty((256,), "float32"); C = ops.C; ah, oh = m.handle, o.handle
t0 = time.perf_counter()
for _ in range(30000): C.gpucore_reduce(2, oh, ah, 1, None); ctx.synchronize()
print("%.1f us" % ((time.perf_counter() - t0) / 30000 * 1e6))
