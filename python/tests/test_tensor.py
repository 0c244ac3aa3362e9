"""Tensors on the CPU context: creation, metadata, views, copies, fill, random,
streams and events — each checked against numpy."""
import gc
import itertools

import numpy as np
import pytest

import gpucore

EXACT = [gpucore.float32, gpucore.float64, gpucore.float16, gpucore.int32, gpucore.int64, gpucore.uint8]


@pytest.mark.parametrize("dt", EXACT, ids=lambda d: d.name)
def test_create_metadata_and_roundtrip(ctx, dt):
    rng = np.random.default_rng(1)
    a = (rng.standard_normal((3, 4, 5)) * 50).astype(dt.numpy)
    t = ctx.tensor(a)
    assert t.shape == (3, 4, 5) and t.ndim == 3 and t.dim() == 3 and len(t) == 3
    assert t.dtype is dt and t.itemsize == dt.itemsize == t.element_size()
    assert t.strides == (20, 5, 1) and t.stride(0) == 20 and t.size(-1) == 5
    assert t.numel() == 60 and t.nbytes == 60 * dt.itemsize
    assert t.is_contiguous() and t.device == "cpu" and t.context is ctx and t.data_ptr() != 0
    np.testing.assert_array_equal(t.numpy(), a)
    np.testing.assert_array_equal(np.asarray(t), a)
    assert t.tolist() == a.tolist()


def test_factories(ctx):
    np.testing.assert_array_equal(ctx.zeros((2, 3)).numpy(), np.zeros((2, 3), np.float32))
    np.testing.assert_array_equal(ctx.ones((4,), "i64").numpy(), np.ones(4, np.int64))
    np.testing.assert_array_equal(ctx.full((2, 2), 2.5, gpucore.float64).numpy(), np.full((2, 2), 2.5))
    assert ctx.empty((0, 3)).numel() == 0 and ctx.empty((0, 3)).numpy().shape == (0, 3)
    s = ctx.tensor(3.5)
    assert s.shape == () and s.item() == 3.5 and s.dtype is gpucore.float32
    assert ctx.tensor([1, 2, 3]).dtype is gpucore.int64
    z = gpucore.zeros_like(ctx.ones((2, 5)))
    assert z.shape == (2, 5) and z.numpy().sum() == 0
    e = gpucore.empty_like(z, dtype="f64")
    assert e.dtype is gpucore.float64 and e.context is ctx
    d = gpucore.zeros((2,))   # default context
    assert d.context is gpucore.default_context()
    assert ctx.tensor(np.array([True, False])).dtype is gpucore.uint8


def test_bf16_and_fp8(ctx):
    x = np.array([1.0, -2.5, 3.140625, 1e-3, 65504.0, np.inf], np.float32)
    t = ctx.tensor(x, dtype="bf16")
    assert t.dtype is gpucore.bfloat16
    ml_dtypes = pytest.importorskip("ml_dtypes")
    vals = t.numpy()   # an ml_dtypes.bfloat16 array sharing the tensor's memory
    assert vals.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(vals.view(np.uint16), gpucore.float32_to_bf16(x))
    vals[0] = 2.0
    assert t.numpy(convert=True)[0] == 2.0 and np.isinf(vals.astype(np.float32)[5])
    vals[0] = 1.0
    assert ctx.tensor(vals).dtype is gpucore.bfloat16   # and back: the bits, unchanged
    np.testing.assert_array_equal(ctx.tensor(vals).numpy().view(np.uint16), vals.view(np.uint16))
    back = t.numpy(convert=True)
    assert back.dtype == np.float32
    np.testing.assert_allclose(back, x, rtol=1 / 128)
    np.testing.assert_allclose(np.asarray(t), back)   # __array__ converts bf16
    t2 = ctx.empty((4,), "bf16").fill_(1.5)
    np.testing.assert_array_equal(t2.numpy(convert=True), [1.5] * 4)
    # fp8: bits only (fill is not supported for fp8, the library says so)
    f8 = ctx.tensor(np.array([0x38, 0xB8, 0x00, 0x7F], np.uint8), dtype="float8_e4m3")
    assert f8.numpy().dtype == ml_dtypes.float8_e4m3fn and f8.numpy().view(np.uint8)[1] == 0xB8
    np.testing.assert_array_equal(f8.numpy().astype(np.float32)[:3], [1.0, -1.0, 0.0])
    assert ctx.tensor(np.array([0x3C], np.uint8), dtype="float8_e5m2").numpy().dtype == ml_dtypes.float8_e5m2
    np.testing.assert_array_equal(f8.numpy(convert=True)[:3], [1.0, -1.0, 0.0])
    assert np.isnan(f8.numpy(convert=True)[3])
    with pytest.raises(gpucore.NotSupportedError) as e:
        f8.fill_(1.0)
    assert "fp8" in str(e.value)
    e5 = gpucore.fp8_to_float32(np.array([0x3C, 0x7C], np.uint8), gpucore.float8_e5m2)
    assert e5[0] == 1.0 and np.isinf(e5[1])


def test_bf16_numpy_without_ml_dtypes_refuses(ctx, monkeypatch):
    """Never raw bits that look like numbers: without ml_dtypes, numpy() of bf16/fp8 refuses and
    names convert=True."""
    monkeypatch.setattr(gpucore.dtypes, "VALUE_NUMPY", {})
    t = ctx.tensor(np.array([1.5], np.float32), dtype="bf16")
    with pytest.raises(gpucore.NotSupportedError, match=r"ml_dtypes.*convert=True"):
        t.numpy()
    with pytest.raises(gpucore.NotSupportedError, match="convert=True"):
        ctx.tensor(np.array([0x38], np.uint8), dtype="float8_e4m3").numpy()
    assert t.numpy(convert=True)[0] == 1.5


def test_views_match_numpy(ctx):
    a = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    t = ctx.tensor(a)
    keys = [0, -1, (1, 2), (slice(None), 1), (..., 2), (1, ..., 3), (slice(1, None), slice(None, None, 2)),
            (None, 0, slice(0, 3, 2), None), (slice(-2, None), slice(None), 0, slice(1, 4, 3)), slice(5, 9),
            (0, 0, 0, 0), (..., None), (slice(None, None, 3),)]
    for k in keys:
        v = t[k]
        np.testing.assert_array_equal(v.numpy(), a[k], err_msg=str(k))
        assert v.shape == a[k].shape, k
        assert [st for st, n in zip(v.strides, v.shape) if n > 1] == \
            [st // 4 for st, n in zip(a[k].strides, a[k].shape) if n > 1], k
    np.testing.assert_array_equal(t.reshape(6, 20).numpy(), a.reshape(6, 20))
    np.testing.assert_array_equal(t.reshape((-1, 5)).numpy(), a.reshape(-1, 5))
    np.testing.assert_array_equal(t.view(120).numpy(), a.reshape(120))
    np.testing.assert_array_equal(t.transpose(0, 3).numpy(), a.transpose(3, 1, 2, 0))
    np.testing.assert_array_equal(t.permute(2, 0, 3, 1).numpy(), a.transpose(2, 0, 3, 1))
    np.testing.assert_array_equal(t.permute((1, 0, 2, 3)).numpy(), a.transpose(1, 0, 2, 3))
    np.testing.assert_array_equal(t.T.numpy(), a.T)
    assert not t.T.is_contiguous()
    np.testing.assert_array_equal(t.T.reshape(-1).numpy(), a.T.reshape(-1))   # copies when needed
    np.testing.assert_array_equal(t.T.contiguous().numpy(), a.T)
    np.testing.assert_array_equal(t.flatten().numpy(), a.ravel())
    np.testing.assert_array_equal(t.slice(2, 1, None, 2).numpy(), a[:, :, 1::2])
    np.testing.assert_array_equal(t.unsqueeze(1).numpy(), a[:, None])
    np.testing.assert_array_equal(t[:, :1].squeeze().numpy(), a[:, 0])
    np.testing.assert_array_equal(t[:, :1].squeeze(1).numpy(), a[:, 0])
    with pytest.raises(gpucore.NotContiguousError) as e:
        t.T.view(120)
    assert "not contiguous" in str(e.value)
    rows = [r.numpy() for r in ctx.tensor(a[0, 0])]
    np.testing.assert_array_equal(np.stack(rows), a[0, 0])


def test_views_share_memory_and_outlive_base(ctx):
    t = ctx.zeros((4, 6))
    v = t[1:3, ::2]
    w = t[2]
    del t
    gc.collect()
    v.fill_(5.0)
    ctx.synchronize()
    np.testing.assert_array_equal(w.numpy(), [0, 0, 0, 0, 0, 0] if False else [5, 0, 5, 0, 5, 0])


def test_setitem(ctx):
    a = np.zeros((3, 4), np.float32)
    t = ctx.tensor(a)
    t[1] = 2.0
    t[:, 3] = np.array([7, 8, 9], np.float32)
    a[1] = 2.0
    a[:, 3] = [7, 8, 9]
    np.testing.assert_array_equal(t.numpy(), a)


def test_copies(ctx):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((5, 7)).astype(np.float32)
    src = ctx.tensor(a)
    dst = ctx.empty((7, 5))
    dst.copy_(src.T)                       # strided tensor -> tensor
    np.testing.assert_array_equal(dst.numpy(), a.T)
    dst2 = ctx.zeros((5, 7))[:, ::2]       # host -> strided tensor
    dst2.copy_(a[:, ::2])
    np.testing.assert_array_equal(dst2.numpy(), a[:, ::2])
    c = src.clone()
    assert c.data_ptr() != src.data_ptr()
    np.testing.assert_array_equal(c.numpy(), a)
    other = gpucore.Context("cpu")
    try:
        moved = src.to(other)
        assert moved.context is other
        np.testing.assert_array_equal(moved.numpy(), a)
        assert src.to(ctx) is src
        assert src.to(ctx, copy=True).data_ptr() != src.data_ptr()
        back = ctx.empty((5, 7)).copy_(moved)      # across contexts through the host
        np.testing.assert_array_equal(back.numpy(), a)
        np.testing.assert_array_equal(src.cpu().numpy(), a)
    finally:
        other.close()
    out = np.empty((5, 7), np.float32)
    src.copy_to_numpy_(out)
    np.testing.assert_array_equal(out, a)
    ctx.empty((2, 2), "i32").copy_([[1, 2], [3, 4]])
    bf = ctx.empty((3,), "bf16").copy_(np.array([1.0, 2.0, 3.0], np.float32))
    np.testing.assert_array_equal(bf.numpy(convert=True), [1, 2, 3])


def test_async_copies_on_stream(ctx):
    a = np.arange(1000, dtype=np.float32)
    t = ctx.empty((1000,))
    s = ctx.stream()
    t.copy_(a, stream=s, non_blocking=True)
    out = np.zeros_like(a)
    t.copy_to_numpy_(out, stream=s, non_blocking=True)
    s.synchronize()
    np.testing.assert_array_equal(out, a)
    assert s.query() is True


@pytest.mark.parametrize("dt", EXACT + [gpucore.bfloat16], ids=lambda d: d.name)
def test_fill(ctx, dt):
    t = ctx.empty((3, 5), dt).fill_(7)
    np.testing.assert_array_equal(t.numpy(convert=True), np.full((3, 5), 7))
    t.zero_()
    assert t.numpy(convert=True).sum() == 0
    v = t[:, 1::2].fill_(3)
    assert v is not t
    expect = np.zeros((3, 5))
    expect[:, 1::2] = 3
    np.testing.assert_array_equal(t.numpy(convert=True), expect)


def test_fill_value_conversion(ctx):
    np.testing.assert_array_equal(ctx.empty((2,), "i32").fill_(-2.9).numpy(), [-2, -2])
    with pytest.raises(gpucore.InvalidArgumentError) as e:
        ctx.empty((2,), "u8").fill_(300)
    assert "does not fit" in str(e.value)


def test_random_reproducible_and_distributions(ctx):
    a = ctx.empty((1000,)).uniform_(-2.0, 3.0, seed=42)
    b = ctx.empty((1000,)).uniform_(-2.0, 3.0, seed=42)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    x = a.numpy()
    assert x.min() >= -2.0 and x.max() < 3.0 and abs(x.mean() - 0.5) < 0.2
    # offsets continue the stream: elements [4:] of a fill at offset 0 equal a fill at offset 1
    c = ctx.empty((996,)).uniform_(-2.0, 3.0, seed=42, offset=1)
    np.testing.assert_array_equal(c.numpy(), x[4:])
    n = ctx.empty((20000,), "f64").normal_(1.0, 2.0, seed=7).numpy()
    assert abs(n.mean() - 1.0) < 0.1 and abs(n.std() - 2.0) < 0.1
    gpucore.manual_seed(123)
    r1 = gpucore.rand((10,), device=ctx).numpy()
    r2 = gpucore.rand((10,), device=ctx).numpy()
    assert not np.array_equal(r1, r2)          # the default generator advances
    gpucore.manual_seed(123)
    np.testing.assert_array_equal(gpucore.rand((10,), device=ctx).numpy(), r1)
    assert gpucore.randn((3, 3), device=ctx, seed=1).shape == (3, 3)
    assert ctx.rand((2,), seed=3).numpy().shape == (2,) and ctx.randn((2,), seed=3).numpy().shape == (2,)
    assert gpucore.C.gpucore_random_offset_advance(10, 0) == 3
    h = ctx.empty((64,), "bf16").normal_(seed=5).numpy(convert=True)
    assert np.isfinite(h).all()
    with pytest.raises(gpucore.DtypeMismatchError) as e:
        ctx.empty((4,), "i32").uniform_(seed=1)
    assert "not a floating type" in str(e.value)
    with pytest.raises(gpucore.InvalidArgumentError):
        ctx.empty((4,)).uniform_(3.0, 1.0, seed=1)


def test_streams_events_and_timer(ctx):
    assert ctx.current_stream is ctx.default_stream
    s = ctx.stream(priority=-1)
    with s:
        assert ctx.current_stream is s
        t = ctx.empty((100000,)).fill_(1.0)     # queued on s
        e = gpucore.Event(ctx).record()
    assert ctx.current_stream is ctx.default_stream
    e.synchronize()
    assert e.query()
    ctx.default_stream.wait_event(e)
    ctx.default_stream.wait_stream(s)
    ev2 = s.record_event()
    ev2.wait()
    with ctx.timer() as tm:
        t.fill_(2.0)
    assert tm.ms is not None and tm.ms >= 0
    start = ctx.event().record(s)
    t.fill_(3.0, stream=s)
    end = s.record_event()
    end.synchronize()
    assert end.elapsed_time(start) <= 0.0 + 1e9 and start.elapsed_time(end) >= 0
    s.synchronize()
    np.testing.assert_array_equal(t.numpy()[:3], [3, 3, 3])
    ctx.current_stream = s
    assert ctx.current_stream is s
    ctx.current_stream = None
    assert ctx.current_stream is ctx.default_stream
    s.destroy()
    with pytest.raises(gpucore.InvalidHandleError):
        s.synchronize()
    e.destroy()
    with pytest.raises(gpucore.InvalidHandleError):
        e.query()
    with pytest.raises(gpucore.InvalidArgumentTypeError):
        t.fill_(1.0, stream="default")
    other = gpucore.Context("cpu")
    try:
        with pytest.raises(gpucore.DeviceMismatchError) as ex:
            t.fill_(1.0, stream=other.default_stream)
        # both contexts are named by id: two "cpu" contexts must not read as "cpu but cpu"
        assert f"context #{other.id}" in str(ex.value) and f"context #{ctx.id}" in str(ex.value)
        with pytest.raises(gpucore.DeviceMismatchError) as ex:
            ctx.default_stream.wait_event(other.event().record())
        assert "stream_wait_event" in str(ex.value)
    finally:
        other.close()


def test_context_basics():
    with gpucore.Context("cpu") as c:
        assert c.device == "cpu" and c.device_type == 0 and c.device_index == 0 and c.is_cpu
        assert "cpu" in repr(c)
        c.synchronize()
    assert c.closed
    c.close()   # idempotent
    assert gpucore.get_context("cpu") is gpucore.get_context("cpu")
    assert gpucore.get_context(c2 := gpucore.get_context("cpu")) is c2


def test_repr(ctx):
    assert "float32" in repr(ctx.zeros((2,)))
    assert "shape=(100, 100)" in repr(ctx.zeros((100, 100)))
    t = ctx.zeros((2,))
    t.free()
    assert "invalid" in repr(t)


def test_rank0_and_empty_conversions_keep_their_shape(ctx):
    # numpy(convert=True) of a 0-d bf16/f16 tensor is 0-d, as are full reductions to a scalar
    for dt in (gpucore.bfloat16, gpucore.float16, gpucore.float32):
        t = gpucore.cast(ctx.tensor(np.array(1.5, dtype=np.float32)), dt)
        assert t.shape == () and t.numpy(convert=True).shape == () and np.asarray(t).shape == ()
        assert t.numpy(convert=True) == 1.5
        s = gpucore.sum(gpucore.cast(ctx.tensor(np.ones((3, 4), np.float32)), dt))
        assert s.numpy(convert=True).shape == () and s.item() == 12.0
        e = gpucore.cast(ctx.tensor(np.zeros((0, 3), np.float32)), dt)
        assert e.numpy(convert=True).shape == (0, 3)
    assert gpucore.dtypes.float32_to_bf16(np.float32(2.0)).shape == ()
