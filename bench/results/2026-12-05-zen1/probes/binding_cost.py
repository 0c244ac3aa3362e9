"""binding_cost.py — what one small op costs through the binding and through raw ctypes calls, in
microseconds (best of 7 x 20000): g.add new and out=, the bare foreign calls behind them, and an
empty lambda. Run with a build's library and the binding:
  GPUCORE_LIBRARY=build-release/src/libgpucore.so PYTHONPATH=python python3 binding_cost.py"""
import timeit, ctypes
import numpy as np
import gpucore as g
import sys; T = sys.modules["gpucore.tensor"]
a = g.tensor(np.random.rand(16).astype("float32")); b = g.tensor(np.random.rand(16).astype("float32"))
c = g.add(a, b)
import gpucore.ops as O
fbn = O._fast_binary_new; fb = O._fast_binary; dest = T._fast_tensor_destroy
h = ctypes.c_void_p()
def raw_new_destroy():
    fbn(0, a._hp, b._hp, None, ctypes.byref(h)); dest(h)
def raw_out():
    fb(0, c._hp, a._hp, b._hp, None)
cases = {"add new": lambda: g.add(a, b), "add out=": lambda: g.add(a, b, out=c),
         "raw new+destroy": raw_new_destroy, "raw out": raw_out, "noop lambda": lambda: None,
         "c_void_p()+byref": lambda: ctypes.byref(ctypes.c_void_p())}
for k, f in cases.items():
    print("%-18s %.3f us" % (k, min(timeit.repeat(f, number=20000, repeat=7)) / 20000 * 1e6))
