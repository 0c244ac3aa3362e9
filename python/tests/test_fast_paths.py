"""The binding's per-op fast paths (gpucore._lib.fast_function: ctypes calls without argtypes
conversion, results built from what the binding knows, no per-tensor registry): results equal
the full path's, and every bad input still raises the library's (or the binding's) actionable
message and leaves the library usable."""
import ctypes
import gc
import importlib
import threading

import numpy as np
import pytest

import gpucore as g
from gpucore import _runtime


def arr(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def fast_ops():
    """(name, fast call, numpy reference) of each one-step path."""
    return [
        ("add", lambda a, b: g.add(a, b), lambda x, y: x + y),
        ("sub", lambda a, b: g.sub(a, b), lambda x, y: x - y),
        ("mul", lambda a, b: a * b, lambda x, y: x * y),
        ("div", lambda a, b: a / b, lambda x, y: x / y),
        ("exp", lambda a, b: g.exp(a), lambda x, y: np.exp(x)),
        ("neg", lambda a, b: g.neg(a), lambda x, y: -x),
        ("relu", lambda a, b: g.relu(a), lambda x, y: np.maximum(x, 0)),
        ("scale", lambda a, b: g.scale(a, 2.0, -0.5), lambda x, y: 2 * x - 0.5),
        ("number", lambda a, b: (a * 2.0 + 1) / 4.0 - 3, lambda x, y: (x * np.float32(2) + np.float32(1)) / np.float32(4)
         - np.float32(3)),
        ("number_not_affine", lambda a, b: a / 3.0, lambda x, y: x / np.float32(3)),
        ("number_first", lambda a, b: 1 - 2.0 * (0.5 + a), lambda x, y: np.float32(1) - np.float32(2) * (np.float32(0.5) + x)),
    ]


@pytest.mark.parametrize("name,fast,ref", fast_ops(), ids=[o[0] for o in fast_ops()])
def test_fast_results_match_numpy_and_metadata(ctx, name, fast, ref):
    x, y = arr(3, 5, seed=1), arr(3, 5, seed=2) + 3.0
    a, b = ctx.tensor(x), ctx.tensor(y)
    o = fast(a, b)
    assert o.shape == (3, 5) and o.strides == (5, 1) and o.dtype is g.float32 and o.context is ctx
    assert o.is_contiguous() and o.numel() == 15 and o.ndim == 2     # what C says agrees with what we set
    np.testing.assert_allclose(o.numpy(), ref(x, y), rtol=1e-6, atol=1e-6)


def test_fast_binary_broadcasts_like_the_full_path(ctx):
    x, y = arr(4, 1, 3, seed=3), arr(2, 3, seed=4)
    o = g.add(ctx.tensor(x), ctx.tensor(y))
    assert o.shape == (4, 2, 3) and o.strides == (6, 3, 1)
    np.testing.assert_allclose(o.numpy(), x + y, rtol=1e-6)
    with pytest.raises(g.ShapeMismatchError, match="do not broadcast"):
        g.add(ctx.tensor(arr(2, 3)), ctx.tensor(arr(3, 2)))


def test_fast_binary_into_out(ctx):
    x, y = arr(2, 3, seed=7), arr(2, 3, seed=8)
    a, b, o = ctx.tensor(x), ctx.tensor(y), ctx.empty((2, 3))
    assert g.mul(a, b, out=o) is o
    np.testing.assert_allclose(o.numpy(), x * y, rtol=1e-6)
    assert g.add(a, b, out=a) is a                       # in place: out may be exactly an input
    np.testing.assert_allclose(a.numpy(), x + y, rtol=1e-6)
    with pytest.raises(g.ShapeMismatchError, match="out has shape"):
        g.add(a, b, out=ctx.empty((3, 2)))
    with pytest.raises(g.DtypeMismatchError, match="add: 'out' is f16"):
        g.add(a, b, out=ctx.empty((2, 3), "f16"))
    big = ctx.empty((7,))
    lo, hi = big[0:6].reshape(2, 3), big[1:7].reshape(2, 3)
    with pytest.raises(g.InvalidArgumentError, match="overlap"):
        g.add(lo, lo, out=hi)                            # shifted by one element: refused by C
    other = g.Context("cpu")
    try:
        with pytest.raises(g.DeviceMismatchError):
            g.add(a, b, out=other.empty((2, 3)))
    finally:
        other.close()
    o.free()
    with pytest.raises(g.InvalidHandleError, match="freed"):
        g.add(a, b, out=o)
    with pytest.raises(g.InvalidArgumentTypeError):
        g.add(a, b, out=np.zeros((2, 3), np.float32))


def test_fast_paths_raise_the_library_message(ctx):
    i = ctx.tensor(np.arange(4, dtype=np.int32))
    for call, what in ((lambda: g.add(i, i), "add"), (lambda: i * i, "mul"), (lambda: g.exp(i), "exp"),
                       (lambda: g.relu(i), "activation_forward"), (lambda: g.scale(i, 2.0, 0.0), "scale"), (lambda: i * 2.0, "scale")):
        with pytest.raises(g.DtypeMismatchError) as e:
            call()
        assert what in str(e.value) and "i32" in str(e.value)  # this call's message, not a stale one
        assert e.value.function is not None and e.value.function.startswith("gpucore_")
    f = ctx.tensor(arr(4))
    with pytest.raises(g.InvalidArgumentError, match="scale: alpha is inf; it must be finite"):
        g.scale(f, float("inf"), 0.0)
    # the library stays usable, and the next failure carries its own message
    np.testing.assert_allclose(g.add(f, f).numpy(), 2 * f.numpy(), rtol=1e-6)
    with pytest.raises(g.DtypeMismatchError, match="add"):
        g.add(i, i)


def test_fast_paths_refuse_freed_tensors_and_other_contexts(ctx):
    a, b = ctx.tensor(arr(3)), ctx.tensor(arr(3))
    other = g.Context("cpu")
    try:
        u = other.tensor(arr(3))
        with pytest.raises(g.DeviceMismatchError, match="move it with .to"):
            g.add(a, u)
        with pytest.raises(g.DeviceMismatchError):
            u * a
    finally:
        other.close()
    b.free()
    for call in (lambda: g.add(a, b), lambda: g.add(b, a), lambda: b * 2.0, lambda: g.exp(b), lambda: g.relu(b),
                 lambda: g.scale(b, 2.0, 1.0)):
        with pytest.raises(g.InvalidHandleError, match="freed"):
            call()
    assert g.add(a, a).numpy().shape == (3,)


def test_closed_context_on_the_fast_paths():
    c = g.Context("cpu")
    a = c.tensor(arr(3))
    c.close()
    assert a.is_freed and "closed" in repr(a)
    for call in (lambda: g.add(a, a), lambda: a * a, lambda: a * 2.0, lambda: a + 1, lambda: 1 - a, lambda: g.exp(a), lambda: g.gelu(a), lambda: g.scale(a, 2.0, 0.0),
                 lambda: c.synchronize(), lambda: c.empty((2,)), lambda: a.handle):
        with pytest.raises(g.InvalidHandleError, match="closed"):
            call()
    # the result maker itself (reached by every op's new result) says "closed", not "NULL context"
    new = importlib.import_module("gpucore.tensor")._new
    with pytest.raises(g.InvalidHandleError, match="closed"):
        new(c, (2,), g.float32)
    a.free()  # still a no-op after the close
    a.free()
    del a
    gc.collect()


def test_deferred_close_gives_tensor_memory_back_when_the_tensor_goes():
    c = g.Context("cpu")
    keep = c.tensor(arr(4)).numpy()           # an export keeps the C context alive past close()
    backing = np.zeros(8, np.float32)
    w = g.from_numpy(backing, device=c)       # wrapped memory: its owner goes when the handle does
    before = _runtime.live_owner_count()
    c.close()
    assert c._handle is not None               # deferred
    with pytest.raises(g.InvalidHandleError, match="closed"):
        w.fill_(1.0)
    del w
    gc.collect()
    assert _runtime.live_owner_count() == before - 1  # the handle was destroyed with the tensor
    del keep
    gc.collect()
    assert c._handle is None


def errors_from_threads(step, threads=4):
    """Run step() in `threads` threads at once; the exceptions they raised."""
    errors = []

    def work():
        try:
            step()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=work) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return errors


def test_fast_paths_from_threads(ctx):
    x, y = arr(64, seed=5), arr(64, seed=6)
    a, b = ctx.tensor(x), ctx.tensor(y)

    def step():
        for _ in range(300):
            o = g.add(a, b)
            r = g.relu(o)
            s = g.scale(r, 2.0, 0.0)
        np.testing.assert_allclose(s.numpy(), 2 * np.maximum(x + y, 0), rtol=1e-6)

    errors = errors_from_threads(step)
    assert not errors, errors


def test_metadata_kept_in_python_agrees_with_the_library(ctx):
    """shape, strides, dtype, ndim, numel, nbytes, itemsize and device come from what the binding
    knows; C's own answers for every way a tensor is made."""
    from gpucore._lib import C
    base = ctx.tensor(arr(4, 6, seed=9))
    made = [base, base[1:, ::2], base.T, base.reshape(2, 12), base[0], ctx.empty((0, 3), "bf16"),
            ctx.empty((), "f64"), ctx.empty((5,), "i32")[None], g.from_numpy(np.zeros((3, 2), np.float16), device=ctx),
            base[:, :1].expand(4, 5), g.add(base, base[0]), g.relu(base.T)]
    for t in made:
        h = t.handle
        nd = C.gpucore_tensor_ndim(h)
        assert t.ndim == nd == len(t.shape)
        assert t.numel() == C.gpucore_tensor_numel(h)
        assert t.nbytes == C.gpucore_tensor_nbytes(h)
        assert t.itemsize == C.gpucore_dtype_size(t.dtype.value)
        assert t.dtype.value == C.gpucore_tensor_dtype(h)
        assert t.device == ctx.device
        sh, st = (ctypes.c_int64 * 8)(), (ctypes.c_int64 * 8)()
        C.gpucore_tensor_shape(h, sh)
        C.gpucore_tensor_strides(h, st)
        assert t.shape == tuple(sh[:nd]) and t.strides == tuple(st[:nd])
