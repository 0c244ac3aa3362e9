"""Random arguments to the op, matmul/conv, optimizer and checkpoint bindings for a
bounded time (fixed seed): every failure is an exception, the interpreter survives,
and the library still works afterwards. GPUCORE_PY_FUZZ_SECONDS sets the budget."""
import os
import random
import time

import numpy as np

import gpucore as g


def test_random_op_calls_survive(ctx):
    budget = min(3.0, float(os.environ.get("GPUCORE_PY_FUZZ_SECONDS", "2")))
    rng = random.Random(99)
    other = g.Context("cpu")
    tensors = [ctx.rand((2, 3)), ctx.rand((3,)), ctx.rand((3, 2)), ctx.rand((2, 3, 4, 4)), ctx.rand((4, 3, 3, 3)),
               ctx.tensor(np.array([0, 2, 1], np.int64)), g.cast(ctx.rand((2, 3)), "bfloat16"),
               ctx.empty((0, 3)), ctx.rand(()), other.rand((2, 3)), ctx.tensor(np.array([5, -7], np.int32))]
    freed = ctx.rand((2,))
    freed.free()
    tensors.append(freed)
    scalars = [None, 0, 1, -1, 2, 0.5, -0.5, float("nan"), float("inf"), "relu", "sum", "mean", "x", (2, 3),
               True, 2 ** 63, object()]
    funcs = [getattr(g, n) for n in g.ops.__all__ + g.nn.__all__ if callable(getattr(g, n, None))
             and n not in ("conv_stats",) and not n[0].isupper()]
    funcs += [g.clip_grad_norm_, g.SGD, g.AdamW, g.memory_stats, g.empty_cache]
    deadline = time.monotonic() + budget
    calls = raised = 0
    while time.monotonic() < deadline:
        fn = rng.choice(funcs)
        args = []
        for _ in range(rng.randint(0, 4)):
            args.append(rng.choice(tensors) if rng.random() < 0.6 else rng.choice(scalars))
        calls += 1
        try:
            fn(*args)
        except (g.GpucoreError, TypeError, ValueError, IndexError, NotImplementedError, OverflowError,
                MemoryError) as e:
            raised += 1
            assert str(e), "%s%r raised an exception without a message" % (fn.__name__, args)
    ctx.synchronize()
    other.close()
    assert calls > 50 and raised > 0
    assert np.allclose(g.add(ctx.ones((2,)), 1.0).numpy(), 2.0)
