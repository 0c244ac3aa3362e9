"""Elementwise ops, activations, casts, dropout, reductions and row ops against numpy
float64 references (f32: 1e-6 relative norm, reductions 1e-5, f16/bf16 1e-2)."""
import math

import numpy as np
import pytest

import gpucore as g

RNG = np.random.default_rng(0)
ERF = np.vectorize(math.erf)


def rel(got, ref):
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    n = np.linalg.norm(ref)
    return np.linalg.norm(got - ref) / (n if n else 1.0)


def arr(*shape, lo=-2.0, hi=2.0):
    return RNG.uniform(lo, hi, size=shape).astype(np.float32)


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


ACTS = {
    "relu": (lambda x: np.maximum(x, 0), lambda x: (x > 0).astype(np.float64)),
    "gelu": (lambda x: 0.5 * x * (1 + ERF(x / math.sqrt(2))),
             lambda x: 0.5 * (1 + ERF(x / math.sqrt(2))) + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi)),
    "silu": (lambda x: x / (1 + np.exp(-x)),
             lambda x: (1 / (1 + np.exp(-x))) * (1 + x * (1 - 1 / (1 + np.exp(-x))))),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), lambda x: (1 / (1 + np.exp(-x))) * (1 - 1 / (1 + np.exp(-x)))),
    "tanh": (np.tanh, lambda x: 1 - np.tanh(x) ** 2),
}


def test_binary_broadcast_scalars_and_operators(ctx):
    a, b = arr(4, 5), arr(5, lo=0.5, hi=2.0)
    ta, tb = ctx.tensor(a), ctx.tensor(b)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    for fn, ref in ((g.add, a64 + b64), (g.sub, a64 - b64), (g.mul, a64 * b64), (g.div, a64 / b64)):
        assert rel(fn(ta, tb).numpy(), ref) < 1e-6
    assert rel((ta + tb).numpy(), a64 + b64) < 1e-6
    assert rel((ta - 1.5).numpy(), a64 - 1.5) < 1e-6
    assert rel((2.0 - ta).numpy(), 2.0 - a64) < 1e-6
    assert rel((ta * 3).numpy(), a64 * 3) < 1e-6
    assert rel((ta / 4).numpy(), a64 / 4) < 1e-6
    assert rel((1.0 / tb).numpy(), 1.0 / b64) < 1e-6
    assert rel((-ta).numpy(), -a64) < 1e-6
    t = ctx.tensor(a)
    t += tb
    t *= 2
    assert rel(t.numpy(), (a64 + b64) * 2) < 1e-6
    out = ctx.empty((4, 5))
    assert g.add(ta, tb, out=out) is out
    # strided (transposed) input
    tt = ctx.tensor(np.ascontiguousarray(a.T)).T
    assert rel(g.mul(tt, tb).numpy(), a64 * b64) < 1e-6
    with pytest.raises(g.ShapeMismatchError):
        g.add(ta, ctx.tensor(arr(3)))
    with pytest.raises(g.DtypeMismatchError) as e:
        g.add(ta, ctx.tensor(a.astype(np.float64)))
    # refused by the binding in the user's words (PyTorch would compute in float64)
    assert e.value.function is None and "float64" in str(e.value) and "gpucore_" not in str(e.value)
    with pytest.raises(TypeError):
        g.add(ta, "x")
    with pytest.raises(g.NullPointerError):
        g.add(None, tb)


def test_unary_scale_axpy_clamp(ctx):
    a = arr(3, 7, lo=0.1, hi=3.0)
    t = ctx.tensor(a)
    x = a.astype(np.float64)
    for fn, ref in ((g.exp, np.exp(x)), (g.log, np.log(x)), (g.sqrt, np.sqrt(x)), (g.rsqrt, 1 / np.sqrt(x)),
                    (g.abs, np.abs(x)), (g.neg, -x)):
        assert rel(fn(t).numpy(), ref) < 1e-6, fn.__name__
    assert rel(g.scale(t, 2.5, -1.0).numpy(), 2.5 * x - 1) < 1e-6
    y = ctx.tensor(a)
    g.axpy_(y, 0.5, ctx.tensor(np.ones(7, np.float32)))
    assert rel(y.numpy(), x + 0.5) < 1e-6
    assert rel(g.clamp(t, 0.5, 2.0).numpy(), np.clip(x, 0.5, 2.0)) < 1e-6
    assert rel(t.exp().numpy(), np.exp(x)) < 1e-6
    with pytest.raises(g.InvalidArgumentError):
        g.clamp(t, 2.0, 1.0)


@pytest.mark.parametrize("name", sorted(ACTS))
def test_activations_forward_backward(ctx, name):
    a, dy = arr(6, 9), arr(6, 9)
    fwd, der = ACTS[name]
    x = a.astype(np.float64)
    t = ctx.tensor(a)
    assert rel(getattr(g, name)(t).numpy(), fwd(x)) < 1e-6
    dx = getattr(g, name + "_backward")(ctx.tensor(dy), t)
    assert rel(dx.numpy(), dy * der(x)) < 1e-6


def test_gelu_tanh_bias_act_and_bf16(ctx):
    a, b = arr(5, 8), arr(8)
    x = a.astype(np.float64)
    assert rel(g.gelu(ctx.tensor(a), approximate="tanh").numpy(), gelu_tanh(x)) < 1e-6
    y = g.bias_act(ctx.tensor(a), ctx.tensor(b), "gelu_tanh")
    assert rel(y.numpy(), gelu_tanh(x + b)) < 1e-6
    tb = g.cast(ctx.tensor(a), "bfloat16")
    assert tb.dtype is g.bfloat16
    r = g.relu(tb)
    assert rel(np.asarray(r), np.maximum(x, 0)) < 1e-2
    with pytest.raises(g.InvalidArgumentError):
        g.gelu(ctx.tensor(a), approximate="fast")
    with pytest.raises(g.InvalidArgumentError):
        g.activation(ctx.tensor(a), "swishy")


def test_cast_round_trip(ctx):
    a = arr(4, 4)
    t = ctx.tensor(a)
    for dt in ("float16", "bfloat16", "float64"):
        c = g.cast(t, dt)
        assert c.dtype is g.as_dtype(dt)
        assert rel(np.asarray(c.float()), a) < (1e-6 if dt == "float64" else 1e-2)
    assert t.astype("float32") is t
    assert rel(t.half().float().numpy(), a) < 1e-2
    with pytest.raises(g.GpucoreError):
        g.cast(t, "int32")


def fp8_nearest(v, dtype):
    """numpy reference of the saturating round-to-nearest-even encoding: the nearest finite
    code (ties to the even code), past the largest finite ±max, NaN 0x7f."""
    codes = np.arange(256, dtype=np.uint8)
    vals = g.fp8_to_float32(codes, dtype).astype(np.float64)
    fin = np.flatnonzero(np.isfinite(vals) & (codes < 0x80))
    out = np.empty(v.shape, np.uint8)
    for i, x in enumerate(v.astype(np.float64).ravel()):
        if np.isnan(x):
            out.flat[i] = 0x7f
            continue
        d = np.abs(vals[fin] - min(abs(x), vals[fin].max()))  # past the largest finite: saturate
        best = fin[d == d.min()]
        c = best[best % 2 == 0][0] if len(best) > 1 else best[0]
        out.flat[i] = c | (0x80 if np.signbit(x) else 0)
    return out


@pytest.mark.parametrize("dtype", ["float8_e4m3", "float8_e5m2"])
def test_cast_fp8(ctx, dtype):
    dt = g.as_dtype(dtype)
    codes = np.arange(256, dtype=np.uint8)
    ref = g.fp8_to_float32(codes, dt)
    q = ctx.tensor(codes, dtype=dt)
    for wide in ("float32", "float64", "float16", "bfloat16"):
        got = g.cast(q, wide).float().numpy().astype(np.float64)
        assert np.array_equal(np.isnan(got), np.isnan(ref))
        assert np.array_equal(got[~np.isnan(ref)], ref[~np.isnan(ref)])
    big = 448.0 if dtype == "float8_e4m3" else 57344.0
    fin = ref[np.isfinite(ref) & (codes < 0x7b)].astype(np.float64)
    mids = (np.sort(fin)[1:] + np.sort(fin)[:-1]) / 2
    v = np.concatenate([arr(500, lo=-600, hi=600), arr(500, lo=-1, hi=1), mids.astype(np.float32),
                        np.array([np.inf, -np.inf, np.nan, 1e9, -0.0, big * 1.01], np.float32)])
    got = g.cast(ctx.tensor(v), dt).numpy().view(np.uint8)  # the fp8 bits of the ml_dtypes array
    assert got.dtype == np.uint8 and np.array_equal(got, fp8_nearest(v, dt))
    assert got[-6] == got[-3] == got[-1] == (0x7e if dtype == "float8_e4m3" else 0x7b) and got[-4] == 0x7f


def test_dropout_mask_scale_and_backward(ctx):
    a = np.ones((64, 64), np.float32)
    y = g.dropout(ctx.tensor(a), p=0.25, seed=7, offset=0).numpy()
    kept = y != 0
    assert 0.65 < kept.mean() < 0.85
    assert np.allclose(y[kept], 1 / 0.75)
    dy = arr(64, 64)
    dx = g.dropout_backward(ctx.tensor(dy), 0.25, seed=7, offset=0).numpy()
    assert np.array_equal(dx != 0, kept)
    assert rel(dx[kept], dy[kept] / 0.75) < 1e-6
    t = ctx.tensor(a)
    assert g.dropout(t, 0.5, training=False) is t
    y1 = g.dropout(t, 0.5).numpy()
    y2 = g.dropout(t, 0.5).numpy()
    assert not np.array_equal(y1, y2)  # the default generator advanced
    with pytest.raises(g.InvalidArgumentError):
        g.dropout(t, 1.5, seed=1)


def test_reductions(ctx):
    a = arr(5, 6, 7)
    t = ctx.tensor(a)
    x = a.astype(np.float64)
    assert rel(g.sum(t).numpy(), x.sum()) < 1e-5
    assert g.sum(t).shape == ()
    assert g.sum(t, keepdim=True).shape == (1, 1, 1)
    assert rel(g.sum(t, 1).numpy(), x.sum(1)) < 1e-5
    assert rel(g.mean(t, -1, keepdim=True).numpy(), x.mean(-1, keepdims=True)) < 1e-5
    assert rel(g.amax(t, 0).numpy(), x.max(0)) < 1e-6
    assert rel(g.amin(t, 2).numpy(), x.min(2)) < 1e-6
    am = g.argmax(t, 1)
    assert am.dtype is g.int64 and np.array_equal(am.numpy(), x.argmax(1))
    assert rel(g.sum_of_squares(t, 2).numpy(), (x * x).sum(2)) < 1e-5
    assert rel(t.sum(0).numpy(), x.sum(0)) < 1e-5
    assert rel(g.bias_grad(t).numpy(), x.reshape(-1, 7).sum(0)) < 1e-5
    with pytest.raises(g.InvalidArgumentError):
        g.sum(t, 3)
    with pytest.raises(g.InvalidArgumentError):
        g.reduce(t, "median")


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def test_softmax_log_softmax_and_backward(ctx):
    a, dy = arr(4, 10) * 3, arr(4, 10)
    x = a.astype(np.float64)
    s = _softmax(x)
    y = g.softmax(ctx.tensor(a))
    assert rel(y.numpy(), s) < 1e-6
    assert rel(g.softmax(ctx.tensor(a), dim=0).numpy(), _softmax(x, 0)) < 1e-6
    ly = g.log_softmax(ctx.tensor(a))
    assert rel(ly.numpy(), np.log(s)) < 1e-6
    d = dy.astype(np.float64)
    dx = g.softmax_backward(ctx.tensor(dy), y).numpy()
    assert rel(dx, s * (d - (d * s).sum(-1, keepdims=True))) < 1e-6
    dlx = g.log_softmax_backward(ctx.tensor(dy), ly).numpy()
    assert rel(dlx, d - s * d.sum(-1, keepdims=True)) < 1e-6
    big = ctx.tensor(np.array([[1e4, -1e4, 0.0]], np.float32))
    assert np.isfinite(g.softmax(big).numpy()).all()


def test_layer_norm_and_backward(ctx):
    a, w, b, dy = arr(6, 16), arr(16), arr(16), arr(6, 16)
    x = a.astype(np.float64)
    mu = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    rstd = 1 / np.sqrt(var + 1e-5)
    xhat = (x - mu) * rstd
    y, m, r = g.layer_norm(ctx.tensor(a), 16, ctx.tensor(w), ctx.tensor(b), 1e-5, return_stats=True)
    assert rel(y.numpy(), xhat * w + b) < 1e-6
    assert rel(m.numpy(), mu[:, 0]) < 1e-6 and rel(r.numpy(), rstd[:, 0]) < 1e-6
    dx, dw, db = g.layer_norm_backward(ctx.tensor(dy), ctx.tensor(a), m, r, ctx.tensor(w))
    d = dy.astype(np.float64)
    dxhat = d * w
    ref_dx = rstd * (dxhat - dxhat.mean(-1, keepdims=True) - xhat * (dxhat * xhat).mean(-1, keepdims=True))
    assert rel(dx.numpy(), ref_dx) < 1e-5
    assert rel(dw.numpy(), (d * xhat).sum(0)) < 1e-5
    assert rel(db.numpy(), d.sum(0)) < 1e-5
    assert rel(g.layer_norm(ctx.tensor(a)).numpy(), xhat) < 1e-6
    with pytest.raises(g.ShapeMismatchError):
        g.layer_norm(ctx.tensor(a), 8)
    with pytest.raises(g.InvalidArgumentError):
        g.layer_norm(ctx.tensor(a), weight=ctx.tensor(w))


def test_rms_norm_and_backward(ctx):
    a, w, dy = arr(5, 12), arr(12), arr(5, 12)
    x = a.astype(np.float64)
    rstd = 1 / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)
    y, r = g.rms_norm(ctx.tensor(a), weight=ctx.tensor(w), return_stats=True)
    assert rel(y.numpy(), x * rstd * w) < 1e-6
    dx, dw = g.rms_norm_backward(ctx.tensor(dy), ctx.tensor(a), r, ctx.tensor(w))
    d = dy.astype(np.float64)
    dxh = d * w
    ref_dx = rstd * dxh - x * rstd ** 3 * (dxh * x).mean(-1, keepdims=True)
    assert rel(dx.numpy(), ref_dx) < 1e-5
    assert rel(dw.numpy(), (d * x * rstd).sum(0)) < 1e-5


def test_cross_entropy_and_backward(ctx):
    logits = arr(8, 5) * 2
    tgt = np.array([0, 1, 2, 3, 4, -100, 1, 2], np.int64)
    x = logits.astype(np.float64)
    lse = np.log(np.exp(x).sum(-1))
    valid = tgt != -100
    per = np.where(valid, lse - x[np.arange(8), np.where(valid, tgt, 0)], 0.0)
    tl, tt = ctx.tensor(logits), ctx.tensor(tgt)
    assert rel(g.cross_entropy(tl, tt, reduction="none").numpy(), per) < 1e-6
    assert abs(g.cross_entropy(tl, tt).item() - per.sum() / valid.sum()) < 1e-5
    assert abs(g.cross_entropy(tl, tt, reduction="sum").item() - per.sum()) < 1e-5
    onehot = np.zeros_like(x)
    onehot[np.arange(8)[valid], tgt[valid]] = 1
    ref = (_softmax(x) - onehot) * valid[:, None] / valid.sum()
    assert rel(g.cross_entropy_backward(tl, tt).numpy(), ref) < 1e-6
    assert rel(g.cross_entropy_backward(tl, tt, 4.0, reduction="sum").numpy(),
               (_softmax(x) - onehot) * valid[:, None] * 4) < 1e-6
    with pytest.raises(g.InvalidArgumentError):
        g.cross_entropy(tl, tt, reduction="avg")
    with pytest.raises(g.GpucoreError) as e:
        g.cross_entropy(tl, ctx.tensor(tgt[:4]))
    assert e.value.function == "gpucore_cross_entropy_forward_ex" and str(e.value)


def test_embedding_and_backward(ctx):
    w = arr(10, 4)
    idx = np.array([[1, 3, 3], [0, 9, 1]], np.int64)
    out = g.embedding(ctx.tensor(idx), ctx.tensor(w))
    assert out.shape == (2, 3, 4) and rel(out.numpy(), w[idx]) < 1e-6
    dy = arr(2, 3, 4)
    dw = g.embedding_backward(ctx.tensor(dy), ctx.tensor(idx), 10).numpy()
    ref = np.zeros((10, 4))
    np.add.at(ref, idx.reshape(-1), dy.reshape(-1, 4).astype(np.float64))
    assert rel(dw, ref) < 1e-6
    with pytest.raises(g.ShapeMismatchError):
        g.embedding(ctx.tensor(idx), ctx.tensor(arr(10)))


def test_freed_and_foreign_context_tensors(ctx):
    t = ctx.tensor(arr(3))
    other = g.Context("cpu")
    try:
        u = other.tensor(arr(3))
        with pytest.raises(g.DeviceMismatchError):
            g.add(t, u)
    finally:
        other.close()
    t.free()
    with pytest.raises(g.InvalidHandleError):
        g.relu(t)


def test_cat_matches_numpy_and_refuses_bad_shapes():
    gpucore = g
    ctx = gpucore.Context("cpu")
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 2)).astype(np.float32)
    b = rng.standard_normal((2, 3)).astype(np.float32).T  # a non-contiguous view after transpose
    ta = gpucore.from_numpy(a, device=ctx)
    tb = gpucore.from_numpy(np.ascontiguousarray(b.T), device=ctx).T
    out = gpucore.cat([ta, tb], dim=1)
    np.testing.assert_array_equal(out.numpy(), np.concatenate([a, b], axis=1))
    with pytest.raises(gpucore.ShapeMismatchError, match="every input must match"):
        gpucore.cat([ta, gpucore.from_numpy(np.ones((4, 2), np.float32), device=ctx)], dim=1)
    with pytest.raises(gpucore.GpucoreError):
        gpucore.cat([], dim=0)


# ---------------------------------------------------------------- PyTorch semantics

def _np_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("probs", [False, True])
def test_cross_entropy_backward_weight_smoothing(ctx, probs):
    """dx = g (Σq · softmax - q) with class weights and label smoothing, (N, C, d) layout."""
    n, c, d, eps = 4, 5, 3, 0.2
    x = arr(n, c, d)
    w = RNG.uniform(0.2, 2.0, size=c).astype(np.float32)
    p = _np_softmax(x.astype(np.float64), axis=1)
    if probs:
        tp = RNG.uniform(0, 1, size=(n, c, d)).astype(np.float32)
        q = w[None, :, None] * ((1 - eps) * tp + eps / c)
        denom, target = n * d, g.tensor(tp, device=ctx)
    else:
        ti = RNG.integers(0, c, size=(n, d))
        ti[0, 0] = -100
        oh = np.zeros((n, c, d))
        for i in range(n):
            for k in range(d):
                if ti[i, k] != -100:
                    oh[i, ti[i, k], k] = 1
        valid = (ti != -100)[:, None, :]
        q = valid * (w[None, :, None] * eps / c + oh * (1 - eps) * w[None, :, None])
        denom, target = w[ti[ti != -100]].sum(), g.tensor(ti.astype(np.int64), device=ctx)
    ref = 0.7 * (q.sum(axis=1, keepdims=True) * p - q) / denom
    got = g.cross_entropy_backward(g.tensor(x, device=ctx), target, 0.7, weight=g.tensor(w, device=ctx),
                                   label_smoothing=eps)
    assert got.shape == x.shape and rel(got.numpy(), ref) < 1e-5
    with pytest.raises(g.InvalidArgumentError):
        g.cross_entropy_backward(g.tensor(x, device=ctx), target, label_smoothing=1.5)


def test_rank0_and_empty_edges(ctx):
    """0-d and empty tensors as PyTorch treats them."""
    b = g.tensor(arr(3), dtype=g.bfloat16, device=ctx)
    s = g.tensor(np.float32(2.0), device=ctx)
    assert (b * s).dtype == g.bfloat16 and rel((b * s).numpy(convert=True), b.numpy(convert=True) * 2) == 0
    x0 = g.tensor(np.float32(1.5), device=ctx)
    assert x0.transpose(0, -1).shape == () and float(x0.transpose(0, 0).numpy()) == 1.5
    y, mu, rs = g.layer_norm(g.tensor(np.zeros((2, 0), np.float32), device=ctx), [0], return_stats=True)
    assert y.shape == (2, 0) and mu.shape == (2,) and np.isnan(mu.numpy()).all()
    loss = g.cross_entropy(g.tensor(np.zeros((0, 3), np.float32), device=ctx), g.tensor(np.zeros(0, np.int64), device=ctx),
                           weight=g.tensor(np.ones(3, np.float32), device=ctx))
    assert loss.shape == () and np.isnan(loss.numpy())
    # softmax backward of a 0-d tensor (one row of one element): 0
    y0 = g.softmax(x0, dim=0)
    assert float(y0.numpy()) == 1.0 and float(g.softmax_backward(x0, y0, dim=0).numpy()) == 0.0
    # cross-entropy of unbatched (C,) logits and a 0-d target, and its backward
    xc = np.array([1.0, 2.0, 3.0], np.float32)
    t0 = g.tensor(np.array(1, np.int64), device=ctx)
    ref = _np_softmax(xc.astype(np.float64)) - np.eye(3)[1]
    assert rel(g.cross_entropy_backward(g.tensor(xc, device=ctx), t0).numpy(), ref) < 1e-6


def test_matmul_and_conv2d_backward_shapes(ctx):
    """matmul_backward with torch.matmul's shape rules; conv2d_backward on an unbatched image."""
    a, b = arr(2), arr(2)
    da, db = g.matmul_backward(g.tensor(np.float32(2.0), device=ctx), g.tensor(a, device=ctx), g.tensor(b, device=ctx))
    assert rel(da.numpy(), 2 * b) < 1e-6 and rel(db.numpy(), 2 * a) < 1e-6
    a3, b2, dy = arr(4, 3, 2), arr(2, 5), arr(4, 3, 5)
    da, db = g.matmul_backward(g.tensor(dy, device=ctx), g.tensor(a3, device=ctx), g.tensor(b2, device=ctx))
    assert rel(da.numpy(), dy @ b2.T) < 1e-6
    assert rel(db.numpy(), np.einsum("bmk,bmn->kn", a3, dy)) < 1e-5
    dx, dw, dbias = g.conv2d_backward(g.tensor(np.ones((2, 3, 3), np.float32), device=ctx),
                                      g.tensor(np.ones((1, 3, 3), np.float32), device=ctx),
                                      g.tensor(np.ones((2, 1, 1, 1), np.float32), device=ctx), bias_grad=True)
    assert dx.shape == (1, 3, 3) and np.all(dx.numpy() == 2) and np.all(dw.numpy() == 9) and np.all(dbias.numpy() == 9)


def test_softmax_float64(ctx):
    """dtype=float64: f64 math (f64 row kernels), and the f64 backward."""
    x = RNG.normal(size=(3, 7)) * 10
    y = g.softmax(g.tensor(x.astype(np.float32), device=ctx), dim=1, dtype=g.float64)
    assert y.dtype == g.float64 and rel(y.numpy(), _np_softmax(x.astype(np.float32).astype(np.float64))) < 1e-14
    dy = RNG.normal(size=(3, 7))
    yl = g.log_softmax(g.tensor(x, device=ctx), dim=0)
    dx = g.log_softmax_backward(g.tensor(dy, device=ctx), yl, dim=0).numpy()
    ref = dy - _np_softmax(x, axis=0) * dy.sum(axis=0, keepdims=True)
    assert rel(dx, ref) < 1e-14
