"""Throw random arguments at the API for a bounded time (fixed seed) and check the
interpreter survives, every failure is a gpucore / builtin exception with a
message, and the library still works afterwards.

GPUCORE_PY_FUZZ_SECONDS sets the budget (default 6)."""
import gc
import os
import random
import time

import numpy as np
import pytest

import gpucore

# (no large positive sizes that would really be allocated: 2**63 and up are refused)
VALUES = [None, 0, 1, -1, 2, 3, 7, -7, 2 ** 40 * 2 ** 40, -(2 ** 31) - 1, 2 ** 63, 2 ** 64, -(2 ** 63), 1.5, float("nan"),
          float("inf"), "x", "cpu", b"cpu", (), (2,), (2, 3), (0,), (-1,), (1,) * 9, [1, 2], (2 ** 62, 4),
          slice(None), slice(-1, None, 2), slice(0, 2, -1), Ellipsis, object(), True, np.int64(3),
          np.float32(2.0), np.zeros(3, np.float32), np.zeros((2, 3), np.float64), "bf16", "f32", "u8",
          gpucore.float32, gpucore.float8_e4m3]


def _arg(rng, pool):
    r = rng.random()
    if r < 0.6:
        return rng.choice(VALUES)
    if r < 0.8 and pool:
        return rng.choice(pool)
    return rng.randint(-10, 10)


def test_random_api_calls_survive():
    budget = float(os.environ.get("GPUCORE_PY_FUZZ_SECONDS", "6"))
    rng = random.Random(1234)
    ctxs = [gpucore.Context("cpu"), gpucore.Context("cpu")]
    pool = [ctxs[0].zeros((2, 3)), ctxs[1].ones((4,)), ctxs[0].stream(), ctxs[0].event()]
    methods = ["fill_", "uniform_", "normal_", "copy_", "reshape", "view", "transpose", "permute", "slice",
               "__getitem__", "__setitem__", "numpy", "to", "clone", "unsqueeze", "squeeze", "free",
               "__dlpack__", "copy_to_numpy_", "item", "tolist", "size", "stride"]
    funcs = [gpucore.empty, gpucore.zeros, gpucore.full, gpucore.tensor, gpucore.from_numpy,
             gpucore.from_dlpack, gpucore.device_properties, gpucore.device_count, gpucore.Context,
             gpucore.component_version, gpucore.as_dtype, gpucore.can_access_peer, gpucore.backend_available,
             gpucore.backend_status]
    calls = errors = 0
    deadline = time.monotonic() + budget
    while time.monotonic() < deadline:
        calls += 1
        try:
            if rng.random() < 0.7 and pool:
                obj = rng.choice(pool)
                name = rng.choice(methods)
                fn = getattr(obj, name, None)
                if fn is None:
                    continue
                res = fn(*[_arg(rng, pool) for _ in range(rng.randint(0, 3))])
            else:
                fn = rng.choice(funcs)
                args = [_arg(rng, pool) for _ in range(rng.randint(0, 3))]
                if fn in (gpucore.empty, gpucore.zeros, gpucore.full, gpucore.tensor, gpucore.from_numpy,
                          gpucore.from_dlpack) and len(args) == 3:
                    args[2] = rng.choice(ctxs + [None, "cpu", "cuda", 5])
                res = fn(*args)
            if isinstance(res, (gpucore.Tensor, gpucore.Stream, gpucore.Event)) and len(pool) < 40:
                pool.append(res)
            elif isinstance(res, gpucore.Context):
                res.close()
        except (gpucore.GpucoreError, TypeError, ValueError, IndexError, OverflowError, BufferError,
                NotImplementedError, AttributeError) as e:
            errors += 1
            assert str(e), "an exception without a message: %r" % (e,)
        if calls % 200 == 0:
            pool = [p for p in pool if not getattr(p, "is_freed", False)][:30]
            gc.collect()
    for c in ctxs:
        c.synchronize() if not c.closed else None
    # the library still works
    t = gpucore.Context("cpu").rand((3, 3), seed=1)
    assert np.isfinite(t.numpy()).all()
    assert calls > 100 and errors > 0
    for c in ctxs:
        c.close()
    del pool
    gc.collect()
