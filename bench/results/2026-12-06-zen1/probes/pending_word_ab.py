"""pending_word_ab.py — what reading the context's pending word saves: Context.synchronize on an
idle CPU context alone, and g.add on 16-element f32 tensors followed by it, with the binding's
shortcut on and off in turns in one process (off: the Context forgets the word, so every
synchronize is a foreign call, as before), best of 6 x 3 x 20000, in microseconds; torch.add
beside it when torch imports. Run from the repository root with a build's library:
  GPUCORE_LIBRARY=build-release/src/libgpucore.so PYTHONPATH=python[:TORCHDIR] python3 bench/results/2026-12-06-zen1/probes/pending_word_ab.py"""
import timeit

import numpy as np
import gpucore as g

a = g.tensor(np.random.rand(16).astype("float32"))
b = g.tensor(np.random.rand(16).astype("float32"))
ctx = a.context
word = ctx._idle
if word is None:
    raise SystemExit("this context has no pending word (not a CPU context on x86-64): nothing to compare")
N = 20000
res = {True: ([], []), False: ([], [])}
for _ in range(6):
    for on in (True, False):
        ctx._idle = word if on else None
        res[on][0].append(min(timeit.repeat(ctx.synchronize, number=N, repeat=3)) / N * 1e6)
        res[on][1].append(min(timeit.repeat(lambda: (g.add(a, b), ctx.synchronize()), number=N, repeat=3)) / N * 1e6)
ctx._idle = word
for on, label in ((True, "word"), (False, "call")):
    print("%-5s synchronize %.3f us   add+synchronize %.3f us" % (label, min(res[on][0]), min(res[on][1])))
try:
    import torch
    torch.set_num_threads(2)
    x, y = torch.rand(16), torch.rand(16)
    t = min(timeit.repeat(lambda: torch.add(x, y), number=N, repeat=3)) / N * 1e6
    print("torch %s add %.3f us (no synchronize: nothing to wait for)" % (torch.__version__, t))
except ImportError:
    print("torch: not importable")
