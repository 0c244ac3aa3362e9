"""activation_ab.py — f32 exp and activations on 4M elements (out=, 2 threads), best of 5 x 20 calls
in ms, with torch beside it when it imports. For an A/B of two builds, run it once per library,
alternating, from the repository root:
  for r in 1 2 3; do for L in /tmp/lib-base /tmp/lib-new; do
    GPUCORE_LIBRARY=$L/libgpucore.so PYTHONPATH=python:TORCHDIR python3 bench/results/2026-12-06-zen1/probes/activation_ab.py $L
  done; done"""
import sys
import timeit

import gpucore as g

n = 4 << 20
x = g.empty(n).uniform_(-3, 3, seed=1)
o = g.empty(n)
dy = g.empty(n).uniform_(-1, 1, seed=2)
ctx = x.context


def best(f, k=20):
    f()
    ctx.synchronize()

    def body():
        for _ in range(k):
            f()
        ctx.synchronize()
    return min(timeit.repeat(body, number=1, repeat=5)) / k * 1e3


ours = {
    "exp": lambda: g.exp(x, out=o),
    "silu": lambda: g.silu(x, out=o),
    "sigmoid": lambda: g.sigmoid(x, out=o),
    "gelu tanh": lambda: g.gelu(x, approximate="tanh", out=o),
    "gelu erf": lambda: g.gelu(x, out=o),
}
try:
    import torch
    torch.set_num_threads(2)
    tx, to = torch.rand(n) * 6 - 3, torch.empty(n)
    theirs = {
        "exp": lambda: torch.exp(tx, out=to),
        "silu": lambda: torch.ops.aten.silu.out(tx, out=to),
        "sigmoid": lambda: torch.sigmoid(tx, out=to),
        "gelu tanh": lambda: torch.ops.aten.gelu.out(tx, approximate="tanh", out=to),
        "gelu erf": lambda: torch.ops.aten.gelu.out(tx, out=to),
    }
    tv = torch.__version__
except ImportError:
    theirs, tv = {}, None
label = sys.argv[1] if len(sys.argv) > 1 else g.library_path
for name, f in ours.items():
    t = best(f)
    peer = ""
    if name in theirs:
        pt = min(timeit.repeat(theirs[name], number=20, repeat=5)) / 20 * 1e3
        peer = "  torch %s %.3f ms  ratio %.2f" % (tv, pt, pt / t)
    print("%-16s %-10s %.3f ms%s" % (label, name, t, peer))
