"""PyTorch habits in the Python binding: each one works as in PyTorch, or refuses with an error in
the user's words. Results are checked against numpy, and against PyTorch's documented semantics
where numpy differs (comparison masks, max/min along a dim, bool() of a tensor, type promotion)."""
import math

import numpy as np
import pytest

import gpucore as gc

SPECIALS = np.array([1.0, 2.0, np.nan, np.inf, -np.inf, 0.0, -0.0, 3.0, 1e-45, -1e-45, 1.0000001, 65504.0],
                    dtype=np.float32)
OTHERS = np.array([1.0, 3.0, np.nan, np.inf, np.inf, -0.0, 0.0, 2.0, 0.0, 1e-45, 1.0, np.inf],
                  dtype=np.float32)
COMPARISONS = [("eq", "__eq__", np.equal), ("ne", "__ne__", np.not_equal), ("lt", "__lt__", np.less),
               ("le", "__le__", np.less_equal), ("gt", "__gt__", np.greater), ("ge", "__ge__", np.greater_equal)]


@pytest.fixture
def ctx():
    return gc.get_context("cpu")


def values(t):
    return t.numpy(convert=True) if t.dtype in (gc.bfloat16,) else t.numpy()


def rounded(a, dtype):
    """numpy values rounded to a gpucore float dtype, as float32."""
    t = gc.tensor(a.astype(np.float32), dtype=dtype, device="cpu")
    return t.numpy(convert=True).astype(np.float32)


# ---------------------------------------------------------------- @ / matmul

@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)),
                                   ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (5, 4, 2))])
def test_matmul_operator_and_function(ctx, sa, sb):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
    ta, tb = gc.tensor(a, device=ctx), gc.tensor(b, device=ctx)
    want = a @ b
    for got in (ta @ tb, gc.matmul(ta, tb), ta.matmul(tb)):
        assert got.shape == want.shape
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


def test_rmatmul_and_refusals(ctx):
    x = gc.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), device=ctx)
    r = [[1.0, 2.0]] @ x                      # a list on the left becomes a tensor of x's dtype
    assert isinstance(r, gc.Tensor) and r.dtype is gc.float32
    np.testing.assert_allclose(r.numpy(), np.array([[1.0, 2.0]], np.float32) @ x.numpy())
    with pytest.raises(TypeError):
        x @ 3.0                               # as torch: a number is no matrix
    with pytest.raises(gc.DtypeMismatchError) as e:
        x.t() @ x.half()
    assert "f32" in str(e.value) and "f16" in str(e.value) and "out" not in str(e.value)


# ---------------------------------------------------------------- comparisons

@pytest.mark.parametrize("dtype", [gc.float32, gc.float16, gc.bfloat16])
def test_comparisons_match_numpy(ctx, dtype):
    a, b = rounded(SPECIALS, dtype), rounded(OTHERS, dtype)
    ta, tb = gc.tensor(SPECIALS, dtype=dtype, device=ctx), gc.tensor(OTHERS, dtype=dtype, device=ctx)
    with np.errstate(invalid="ignore"):
        for name, dunder, ref in COMPARISONS:
            for got in (getattr(gc, name)(ta, tb), getattr(ta, dunder)(tb), getattr(ta, name)(tb)):
                # the mask convention: 1.0 / 0.0 in the operands' dtype
                assert got.dtype is dtype and got.shape == a.shape
                np.testing.assert_array_equal(values(got), ref(a, b).astype(np.float32), err_msg=name)


@pytest.mark.parametrize("dtype,tiny,ulp1,big", [(gc.float32, 2.0 ** -149, 2.0 ** -23, 3.4028234663852886e38),
                                                   (gc.float16, 2.0 ** -24, 2.0 ** -10, 65504.0),
                                                   (gc.bfloat16, 2.0 ** -133, 2.0 ** -7, 3.3895313892515355e38)])
def test_comparisons_resolve_neighbours(ctx, dtype, tiny, ulp1, big):
    # neighbouring values of each dtype (the smallest subnormal and 0, 1 and the next value up, the
    # largest finite and Inf): a - b never rounds to 0 for a != b, so each pair is told apart
    a = np.array([tiny, 0.0, 2 * tiny, 1.0, 1.0 + ulp1, big, np.inf, -big], np.float64)
    b = np.array([0.0, tiny, tiny, 1.0 + ulp1, 1.0, np.inf, big, -np.inf], np.float64)
    ta = gc.tensor(a.astype(np.float32), dtype=dtype, device=ctx)
    tb = gc.tensor(b.astype(np.float32), dtype=dtype, device=ctx)
    np.testing.assert_array_equal(values(ta), a.astype(np.float32))   # the values are exact in dtype
    for name, dunder, ref in COMPARISONS:
        np.testing.assert_array_equal(values(getattr(ta, dunder)(tb)), ref(a, b).astype(np.float32), err_msg=name)


def test_comparisons_broadcast_and_numbers(ctx):
    rng = np.random.default_rng(1)
    a = np.round(rng.standard_normal((3, 1)), 1).astype(np.float32)
    b = np.round(rng.standard_normal((4,)), 1).astype(np.float32)
    b[0] = a[1, 0]                            # one tie
    ta, tb = gc.tensor(a, device=ctx), gc.tensor(b, device=ctx)
    for _, dunder, ref in COMPARISONS:
        np.testing.assert_array_equal(getattr(ta, dunder)(tb).numpy(), ref(a, b).astype(np.float32))
    np.testing.assert_array_equal((ta > 0).numpy(), (a > 0).astype(np.float32))
    np.testing.assert_array_equal((0 < ta).numpy(), (0 < a).astype(np.float32))   # Python swaps to ta > 0
    np.testing.assert_array_equal((ta == a[1, 0].item()).numpy(), (a == a[1, 0]).astype(np.float32))
    np.testing.assert_array_equal((ta != True).numpy(), (a != 1).astype(np.float32))  # noqa: E712
    # mixed float dtypes promote (f16 vs f32 compares in f32), as torch
    h = ta.half()
    m = ta == h
    assert m.dtype is gc.float32
    np.testing.assert_array_equal(m.numpy(), (a == a.astype(np.float16).astype(np.float32)).astype(np.float32))


def test_masks_compose_as_torch_bools(ctx):
    x = gc.tensor([-2.0, -0.5, 0.0, 1.5, 3.0], device=ctx)
    assert (x > 0).sum().item() == 2                          # torch: (x > 0).sum() counts
    assert math.isclose((x == x).float().mean().item(), 1.0)  # the accuracy idiom
    np.testing.assert_array_equal((x * (x > 0)).numpy(), np.maximum(x.numpy(), 0))
    assert bool(gc.all(x == x)) and not bool((x > 5).any())
    assert (x > -3).all().item() == 1.0 and gc.any(x[:0]).item() == 0.0 and gc.all(x[:0]).item() == 1.0
    np.testing.assert_array_equal((x.reshape(1, 5) > 0).any(1).numpy(), [1.0])


def test_eq_is_no_identity_and_hash_is(ctx):
    t = gc.ones(3, device=ctx)
    u = gc.ones(3, device=ctx)
    assert isinstance(t == u, gc.Tensor) and (t == u).numpy().tolist() == [1.0, 1.0, 1.0]
    assert (t == None) is False and (t != None) is True   # noqa: E711  (other types: identity, as torch)
    assert (t == "x") is False
    assert hash(t) == id(t) // 16 or hash(t) == object.__hash__(t)
    d = {t: "t", u: "u"}
    assert d[t] == "t" and d[u] == "u" and len({t, u, t}) == 2
    assert t in [t]                                        # identity is tried first by `in`
    with pytest.raises(gc.InvalidArgumentError, match="more than one value is ambiguous"):
        t in [u]                                           # then ==, whose 3 values are ambiguous (torch too)


def test_integer_comparisons_refuse(ctx):
    i = gc.tensor(np.arange(3), device=ctx)
    with pytest.raises(NotImplementedError) as e:
        i == i
    assert "int64" in str(e.value) and "numpy()" in str(e.value)


# ---------------------------------------------------------------- scalars

def test_bool_float_int_item(ctx):
    assert bool(gc.tensor([2.5], device=ctx)) is True and bool(gc.zeros((), device=ctx)) is False
    assert bool(gc.tensor([[float("nan")]], device=ctx)) is True    # as Python's bool(nan)
    with pytest.raises(gc.InvalidArgumentError) as e:
        bool(gc.ones(2, device=ctx))
    assert str(e.value) == "Boolean value of Tensor with more than one value is ambiguous"
    with pytest.raises(gc.InvalidArgumentError, match="no values is ambiguous"):
        bool(gc.ones(0, device=ctx))
    with pytest.raises(RuntimeError):                               # torch raises RuntimeError
        if gc.ones(2, 2, device=ctx):
            pass
    assert float(gc.tensor([[1.5]], device=ctx)) == 1.5 and isinstance(float(gc.ones((), device=ctx)), float)
    assert int(gc.tensor(-2.7, device=ctx)) == -2 and int(gc.tensor([7], device=ctx)) == 7
    assert int(gc.tensor(np.array([5]), device=ctx)) == 5
    assert gc.tensor([3.25], dtype="bf16", device=ctx).item() == 3.25
    with pytest.raises(gc.InvalidArgumentError, match="one element"):
        float(gc.ones(3, device=ctx))
    with pytest.raises(gc.InvalidArgumentError):
        int(gc.ones(2, device=ctx))


# ---------------------------------------------------------------- views, pow

def test_t(ctx):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = gc.from_numpy(a)
    tt = t.t()
    assert tt.shape == (3, 2) and tt.data_ptr() == t.data_ptr()
    np.testing.assert_array_equal(tt.numpy(), a.T)
    v = gc.ones(4, device=ctx)
    assert v.t().shape == (4,) and gc.ones((), device=ctx).t().shape == ()
    with pytest.raises(gc.ShapeMismatchError, match="<= 2 dims"):
        gc.ones(2, 2, 2, device=ctx).t()


@pytest.mark.parametrize("e", [0, 1, 2, 3, 4, 7, -1, -2, -3, 0.5, -0.5, 2.5, -1.5, 0.3])
def test_pow_matches_numpy(ctx, e):
    x = np.array([0.5, 1.0, 1.7, 2.0, 3.3, 0.01], np.float32)
    t = gc.tensor(x, device=ctx)
    got = t ** e
    assert got is not t and got.dtype is gc.float32
    want = np.power(x.astype(np.float64), e)
    # integer exponents are repeated products (one rounding per product), others exp(e * log x)
    np.testing.assert_allclose(got.numpy(), want, rtol=(2e-6 * max(1, abs(e)) if float(e).is_integer() else 2e-6 * 8))


def test_pow_special_values_and_rpow(ctx):
    nan = float("nan")
    t = gc.tensor([nan, -2.0, 0.0, float("inf")], device=ctx)
    np.testing.assert_array_equal((t ** 0).numpy(), [1, 1, 1, 1])          # torch: x ** 0 is 1, NaN too
    np.testing.assert_array_equal((t ** 2).numpy(), [nan, 4, 0, np.inf])
    np.testing.assert_array_equal((t ** 3).numpy(), [nan, -8, 0, np.inf])   # a negative base, integer exponent
    assert np.isnan((t ** 0.5).numpy()[1]) and np.isnan((t ** 2.5).numpy()[1])   # torch: NaN for x < 0
    np.testing.assert_array_equal(gc.pow(t, -1).numpy()[1:], [-0.5, np.inf, 0.0])
    x = np.array([-1.0, 0.0, 0.5, 3.0], np.float32)
    tx = gc.tensor(x, device=ctx)
    np.testing.assert_allclose((2 ** tx).numpy(), np.power(2.0, x), rtol=2e-6)
    np.testing.assert_allclose((1.5 ** tx).numpy(), np.power(1.5, x), rtol=2e-6)
    np.testing.assert_array_equal((1 ** tx).numpy(), [1, 1, 1, 1])
    h = gc.tensor(x, dtype="f16", device=ctx)
    assert (h ** 2).dtype is gc.float16
    for bad in (lambda: (-2) ** tx, lambda: tx ** tx, lambda: tx ** float("inf")):
        with pytest.raises(NotImplementedError) as e:
            bad()
        assert "numpy" in str(e.value) or "gpucore.exp" in str(e.value)


# ---------------------------------------------------------------- max / min

def test_max_min(ctx):
    a = np.array([[3.0, 1.0, 3.0], [-1.0, 5.0, 2.0], [0.0, -4.0, -4.0]], np.float32)
    t = gc.tensor(a, device=ctx)
    assert t.max().item() == 5.0 and gc.min(t).item() == -4.0 and t.max().shape == ()
    for dim in (0, 1, -1):
        for keepdim in (False, True):
            v, i = t.max(dim, keepdim=keepdim)
            r = gc.max(t, dim, keepdim)
            assert r.values is not None and r.indices is not None
            np.testing.assert_array_equal(v.numpy(), np.max(a, axis=dim, keepdims=keepdim))
            # torch: the index of the first maximum / minimum (numpy's argmax/argmin agree)
            np.testing.assert_array_equal(i.numpy(), np.expand_dims(np.argmax(a, dim), dim) if keepdim
                                          else np.argmax(a, dim))
            vmin, imin = t.min(dim, keepdim)
            np.testing.assert_array_equal(vmin.numpy(), np.min(a, axis=dim, keepdims=keepdim))
            np.testing.assert_array_equal(imin.numpy(), np.expand_dims(np.argmin(a, dim), dim) if keepdim
                                          else np.argmin(a, dim))
            assert i.dtype is gc.int64 and imin.dtype is gc.int64
    u = gc.tensor(np.full(3, 2.0, np.float32), device=ctx)
    np.testing.assert_array_equal(gc.max(t, u).numpy(), np.maximum(a, 2.0))
    np.testing.assert_array_equal(t.min(u).numpy(), np.minimum(a, 2.0))
    with pytest.raises(TypeError):
        t.max("rows")


# ---------------------------------------------------------------- makers

def test_arange(ctx):
    r = gc.arange(5)
    assert r.dtype is gc.int64 and r.numpy().tolist() == [0, 1, 2, 3, 4]           # torch: ints give int64
    np.testing.assert_array_equal(gc.arange(2, 11, 3).numpy(), np.arange(2, 11, 3))
    np.testing.assert_array_equal(gc.arange(5, 0, -2).numpy(), [5, 3, 1])
    f = gc.arange(0, 1, 0.1, device=ctx)
    assert f.dtype is gc.float32 and f.shape == (10,)                               # torch: ceil((end-start)/step)
    np.testing.assert_allclose(f.numpy(), np.arange(10) * 0.1, rtol=1e-6, atol=1e-7)
    b = gc.arange(4, dtype=gc.bfloat16, device=ctx)
    assert b.dtype is gc.bfloat16 and b.numpy(convert=True).tolist() == [0, 1, 2, 3]
    assert gc.arange(3, 3).shape == (0,)
    with pytest.raises(gc.InvalidArgumentError, match="step of that sign"):
        gc.arange(3, 1)                                                             # torch refuses too
    with pytest.raises(gc.InvalidArgumentError, match="step"):
        gc.arange(0, 3, 0)


def test_arange_in_chunks(ctx, monkeypatch):
    # a long range is made a chunk at a time into the result: the same values as in one piece
    import importlib
    compose = importlib.import_module("gpucore.ops_compose")
    cases = [((3, 1000, 7), {}), ((0.5, 900.0, 0.75), {}), ((-40, 2000), {"dtype": "int32"}),
             ((1.0, 3000.0, 1.25), {"dtype": "bfloat16"}), ((5000, 0, -3), {})]
    whole = [gc.arange(*a, device=ctx, **k) for a, k in cases]
    monkeypatch.setattr(compose, "_ARANGE_CHUNK", 64)
    for (a, k), w in zip(cases, whole):
        t = gc.arange(*a, device=ctx, **k)
        assert t.shape == w.shape and t.dtype is w.dtype and t.shape[0] > 64 and t.context is ctx
        np.testing.assert_array_equal(t.numpy(), w.numpy())
    with pytest.raises(gc.OutOfMemoryError):  # made before any value: the library refuses what it cannot hold
        gc.arange(0.5, float(1 << 60), device=ctx)


def test_like_factories(ctx):
    c2 = gc.Context("cpu")
    t = c2.randn(2, 3, dtype="f16", seed=1)
    for f, want in ((gc.ones_like(t), 1.0), (gc.zeros_like(t), 0.0), (gc.full_like(t, 2.5), 2.5)):
        assert f.shape == (2, 3) and f.dtype is gc.float16 and f.context is c2
        np.testing.assert_array_equal(f.numpy(), np.full((2, 3), want, np.float16))
    o = gc.ones_like(t, dtype=gc.float32, device=ctx)
    assert o.dtype is gc.float32 and o.context is ctx
    c2.close()


@pytest.mark.parametrize("dim", [0, 1, 2, -1, -3])
def test_stack(ctx, dim):
    rng = np.random.default_rng(2)
    arrs = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(3)]
    got = gc.stack([gc.tensor(a, device=ctx) for a in arrs], dim)
    np.testing.assert_array_equal(got.numpy(), np.stack(arrs, dim))


def test_stack_refusals(ctx):
    with pytest.raises(gc.ShapeMismatchError, match="one shape"):
        gc.stack([gc.ones(2, device=ctx), gc.ones(3, device=ctx)])
    with pytest.raises(gc.InvalidArgumentError):
        gc.stack([gc.ones(2, device=ctx)], 3)


def test_where_refuses_and_says_what_to_use(ctx):
    x = gc.ones(3, device=ctx)
    with pytest.raises(NotImplementedError) as e:
        gc.where(x > 0, x, x)
    assert "numpy.where" in str(e.value) and "x * m + y * (1 - m)" in str(e.value)


# ---------------------------------------------------------------- to()

def test_to_dtype_device_and_tensor(ctx):
    a = np.array([1.0, 1.00390625, 3.14159, -2.5e-3], np.float32)
    x = gc.tensor(a, device=ctx)
    b = x.to(gc.bfloat16)
    assert b.dtype is gc.bfloat16
    np.testing.assert_array_equal(b.numpy().view(np.uint16), gc.float32_to_bf16(a))                # round to nearest even
    assert x.to("bf16").dtype is gc.bfloat16 and x.to(dtype="float16").dtype is gc.float16
    assert x.to(gc.float32) is x and x.to("cpu") is x and x.to(ctx) is x
    assert x.to(ctx, copy=True) is not x
    c2 = gc.Context("cpu")
    y = x.to(c2)
    assert y.context is c2 and y.dtype is gc.float32
    np.testing.assert_array_equal(y.numpy(), a)
    h = gc.zeros(2, dtype="f16", device=c2)
    z = x.to(h)                                                  # other tensor: its dtype and context
    assert z.context is c2 and z.dtype is gc.float16
    np.testing.assert_array_equal(z.numpy(), a.astype(np.float16))
    w = x.to(c2, "f16")
    assert w.context is c2 and w.dtype is gc.float16
    assert x.to(device=c2, dtype=gc.bfloat16).dtype is gc.bfloat16
    with pytest.raises(gc.InvalidArgumentError, match="neither a dtype"):
        x.to("flaot32")
    with pytest.raises(TypeError):
        x.to(True)
    with pytest.raises(gc.InvalidArgumentError, match="alone"):
        x.to(h, gc.float32)
    c2.close()


# ---------------------------------------------------------------- sizes as varargs

def test_sizes_as_varargs(ctx):
    assert gc.randn(16, 8).shape == (16, 8) and gc.rand(3).shape == (3,)
    z = gc.zeros(2, 3, dtype=gc.float16)
    assert z.shape == (2, 3) and z.dtype is gc.float16 and not z.numpy().any()
    assert gc.ones(2, 3, device=ctx).numpy().tolist() == [[1, 1, 1], [1, 1, 1]]
    assert gc.empty((2, 3)).shape == (2, 3) and gc.empty([4]).shape == (4,) and gc.zeros(()).shape == ()
    assert gc.empty((2, 3), "f16").dtype is gc.float16                  # the older positional dtype
    assert ctx.zeros(2, 3).shape == (2, 3) and ctx.randn(4, 2, seed=1).shape == (4, 2)
    np.testing.assert_array_equal(gc.rand(5, seed=7).numpy(), gc.rand((5,), seed=7).numpy())
    np.testing.assert_array_equal(gc.randn(2, 2, seed=7, dtype="bf16").numpy(),
                                  gc.randn((2, 2), "bf16", None, 7).numpy())
    with pytest.raises(TypeError, match="keyword"):
        gc.zeros(2, "f16")
    with pytest.raises(TypeError, match="give the sizes"):
        gc.empty()
    with pytest.raises(TypeError, match="both by position and by keyword"):
        gc.empty((2,), "f16", dtype="f32")


def test_metadata_methods(ctx):
    base = gc.empty(2, 3, 4, device=ctx)
    t = base[:, 1:]
    assert t.numel() == 16 and t.dim() == 3 and t.ndim == 3
    assert t.size() == (2, 2, 4) and t.size(1) == 2 and t.size(-1) == 4
    assert t.stride() == (12, 4, 1) and t.stride(0) == 12
    assert t.is_contiguous() is False and t.contiguous().is_contiguous() is True
    assert t.data_ptr() == base.data_ptr() + 4 * t.element_size()    # [:, 1:] starts one row of 4 in
    assert callable(t.numel) and callable(t.data_ptr) and callable(t.is_contiguous)   # methods, as torch


# ---------------------------------------------------------------- backends

def test_cuda_module_and_backend_status():
    avail = gc.cuda.is_available()
    assert type(avail) is bool and type(gc.cuda.device_count()) is int
    assert type(gc.backend_available("cuda")) is bool and gc.backend_available("cuda") == avail
    ok, why = gc.backend_status("cuda")
    assert ok == avail and (why == "") == ok
    if not avail:
        assert gc.cuda.device_count() == 0 and why
    assert gc.backend_available("cpu") is True and gc.backend_status("cpu") == (True, "")


# ---------------------------------------------------------------- mixed dtypes, contexts

def test_mixed_dtypes_promote_as_torch(ctx):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 3)).astype(np.float32)
    x = gc.tensor(a, device=ctx)
    h = x.half()
    hv = h.numpy().astype(np.float32)
    for got, want in ((x + h, a + hv), (h * x, hv * a), (x - h, a - hv), (h / x, hv / a),
                      (gc.maximum(h, x), np.maximum(hv, a))):
        assert got.dtype is gc.float32
        np.testing.assert_array_equal(got.numpy(), want)
    bf = x.bfloat16()
    assert (h + bf).dtype is gc.float32                                   # torch: f16 + bf16 is f32
    assert gc.cat([x, h]).dtype is gc.float32
    h2 = h.clone()
    h2 += x                                                               # in place keeps h's dtype
    assert h2.dtype is gc.float16
    np.testing.assert_array_equal(h2.numpy(), (hv + a).astype(np.float16))
    o = gc.empty(2, 3, dtype="f16", device=ctx)
    assert gc.add(x, h, out=o) is o
    np.testing.assert_array_equal(o.numpy(), (a + hv).astype(np.float16))


def test_mixed_dtype_refusals_speak_the_users_words(ctx):
    x = gc.ones(2, device=ctx)
    for other, names in ((gc.tensor(np.arange(2), device=ctx), "float32 and int64"),
                         (gc.ones(2, dtype="f64", device=ctx), "float32 and float64")):
        with pytest.raises(gc.DtypeMismatchError) as e:
            x + other
        msg = str(e.value)
        assert msg.startswith("a + b: ") and names in msg and ".to(" in msg
        assert "out" not in msg.replace("without", "") and "gpucore_" not in msg


def test_device_mismatch_names_both_contexts():
    c1, c2 = gc.Context("cpu"), gc.Context("cpu")
    with pytest.raises(gc.DeviceMismatchError) as e:
        c1.ones(2) + c2.ones(2)
    msg = str(e.value)
    assert "context #%d" % c2.id in msg and "context #%d" % c1.id in msg and c1.id != c2.id
    assert "but the call is on cpu;" not in msg
    c1.close()
    c2.close()
