"""PyTorch's semantics of our ops, against torch in float64: reductions over
several dims (strided input, keepdim, dim=(), 0-d and empty inputs), dtype=, torch.matmul's
shapes (1-d operands, broadcast batch dims), div rounding modes, clamp with one or tensor
bounds, add/sub alpha, layer_norm over several dims, cross_entropy's (N, C, d1, ...) layout,
weight, label_smoothing and probability targets, embedding's max_norm (weight renormalised in
place) and the padding_idx / scale_grad_by_freq gradient, conv2d on an unbatched image with
odd 'same' padding; and clean errors for what stays invalid. Complements
test_opinfo_samples.py (PyTorch's own samples) with strided and edge cases those lack.
"""
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import gpucore as g  # noqa: E402


def T(a):
    return g.tensor(np.array(a, np.float32))


def chk(name, ours, ref, tol=1e-5):
    o, r = np.asarray(ours.numpy()), np.asarray(ref)
    assert o.shape == r.shape, (name, o.shape, r.shape)
    err = np.linalg.norm(o - r) / max(np.linalg.norm(r), 1e-30) if r.size else 0
    assert err < tol, "%s: normalised error %.3g" % (name, err)


def test_torch_semantics():
    rng = np.random.default_rng(1)
    warnings.simplefilter("ignore", UserWarning)  # torch's note on odd 'same' padding
    x = rng.standard_normal((4, 5, 6)).astype(np.float32)
    t = T(x).transpose(0, 2)  # (6,5,4) strided
    xt = x.transpose(2, 1, 0)
    chk("sum strided dims (0,2)", g.sum(t, dim=(0, 2)), xt.sum((0, 2)))
    chk("mean keepdim (2,0)", g.mean(t, dim=(2, 0), keepdim=True), xt.mean((0, 2), keepdims=True))
    chk("amax dim=()", g.amax(T(x), dim=()), x.max())
    chk("sum 0-d dim=0", g.sum(T(np.float32(3.0)), dim=0), np.float32(3.0))
    chk("sum empty dims (0,1)", g.sum(T(np.zeros((0, 3, 2))), dim=(0, 2)), np.zeros(3))
    chk("sum dtype f16", g.sum(T(x), dim=(0, 1), dtype=g.float32), x.astype(np.float64).sum((0, 1)))
    chk("softmax 0-d", g.softmax(T(np.float32(2.0)), dim=0), np.float32(1.0))
    a = rng.standard_normal((2, 1, 3, 4)).astype(np.float32); b = rng.standard_normal((5, 4, 2)).astype(np.float32)
    chk("matmul bcast 4d@3d", g.matmul(T(a), T(b)), np.matmul(a, b))
    v = rng.standard_normal(4).astype(np.float32)
    chk("matmul 4d@1d", g.matmul(T(a), T(v)), np.matmul(a, v))
    chk("matmul 1d@3d", g.matmul(T(v[:4]), T(b)), np.matmul(v, b))
    chk("dot", g.matmul(T(v), T(v)), np.dot(v, v))
    m = rng.standard_normal((3, 4)).astype(np.float32)
    chk("matmul transposed 2d@1d", g.matmul(T(m.T.copy()).transpose(0, 1), T(v)), m @ v)
    chk("div floor scalar", g.div(T(x), -0.7, rounding_mode="floor"), np.floor_divide(x, np.float32(-0.7)))
    chk("div trunc tensor", g.div(T(x), T(x[0] + 3), rounding_mode="trunc"), np.trunc(x / (x[0] + 3)))
    chk("clamp min only", g.clamp(T(x), min=0.1), np.maximum(x, 0.1))
    chk("clamp tensor bounds", g.clamp(T(x), T(x[0]), T(x[1, 0] + 1)), np.minimum(np.maximum(x, x[0]), x[1, 0] + 1))
    chk("add alpha", g.add(T(x), T(x[0]), alpha=-2.5), x - 2.5 * x[0])
    chk("sub alpha scalar", g.sub(T(x), 2.0, alpha=3), x - 6)
    ln = torch.nn.functional.layer_norm(torch.tensor(x, dtype=torch.float64), (5, 6)).numpy()
    chk("layer_norm 2 dims", g.layer_norm(T(x), (5, 6)), ln)
    w = rng.standard_normal((5, 6)).astype(np.float32); bb = rng.standard_normal((5, 6)).astype(np.float32)
    y, mu, rs = g.layer_norm(T(x), (5, 6), T(w), T(bb), return_stats=True)
    chk("layer_norm 2 dims affine", y, ln * w + bb); assert tuple(mu.shape) == (4,)
    lg = rng.standard_normal((2, 5, 3, 3)).astype(np.float32); tg = rng.integers(0, 5, (2, 3, 3))
    tl = torch.tensor(lg, dtype=torch.float64)
    chk("CE NCdd", g.cross_entropy(T(lg), g.tensor(tg)), torch.nn.functional.cross_entropy(tl, torch.tensor(tg)).numpy())
    chk("CE NCdd none", g.cross_entropy(T(lg), g.tensor(tg), reduction="none"), torch.nn.functional.cross_entropy(tl, torch.tensor(tg), reduction="none").numpy())
    cw = np.abs(rng.standard_normal(5)).astype(np.float32)
    chk("CE weight smooth ignore", g.cross_entropy(T(lg), g.tensor(np.where(tg == 2, -100, tg)), weight=T(cw), label_smoothing=0.2),
        torch.nn.functional.cross_entropy(tl, torch.tensor(np.where(tg == 2, -100, tg)), weight=torch.tensor(cw, dtype=torch.float64), label_smoothing=0.2).numpy())
    p = np.abs(rng.standard_normal((2, 5, 3, 3))).astype(np.float32)
    chk("CE probs", g.cross_entropy(T(lg), T(p), label_smoothing=0.1, reduction="sum"), torch.nn.functional.cross_entropy(tl, torch.tensor(p, dtype=torch.float64), label_smoothing=0.1, reduction="sum").numpy())
    W = rng.standard_normal((7, 3)).astype(np.float32); idx = np.array([[0, 3, 3], [6, 1, 0]])
    dw = g.embedding_backward(T(np.ones((2, 3, 3))), g.tensor(idx), 7, padding_idx=3, scale_grad_by_freq=True).numpy()
    tw = torch.tensor(W, dtype=torch.float64, requires_grad=True)
    torch.nn.functional.embedding(torch.tensor(idx), tw, padding_idx=3, scale_grad_by_freq=True).sum().backward()
    chk("embedding_backward pad+freq", g.tensor(dw.astype(np.float32)), tw.grad.numpy())
    gw = T(W); tw2 = torch.tensor(W, dtype=torch.float64)
    chk("embedding max_norm", g.embedding(g.tensor(idx), gw, max_norm=1.0), torch.nn.functional.embedding(torch.tensor(idx), tw2, max_norm=1.0).numpy())
    chk("embedding max_norm weight in place", gw, tw2.numpy())
    img = rng.standard_normal((3, 7, 8)).astype(np.float32); k = rng.standard_normal((4, 3, 2, 3)).astype(np.float32)
    chk("conv2d unbatched same", g.conv2d(T(img), T(k), padding="same", dilation=(1, 2)),
        torch.nn.functional.conv2d(torch.tensor(img, dtype=torch.float64), torch.tensor(k, dtype=torch.float64), padding="same", dilation=(1, 2)).numpy())


def test_cross_entropy_backward_layouts():
    rng = np.random.default_rng(4)
    for shape in ((2, 5, 3, 4), (5,), (3, 5)):
        lg = rng.standard_normal(shape).astype(np.float32)
        tshape = (shape[0],) + shape[2:] if len(shape) > 1 else ()
        tg = rng.integers(0, 5, tshape)
        if tg.size > 1:
            tg.reshape(-1)[0] = -100
        for reduction in ("mean", "sum", "none"):
            tl = torch.tensor(lg, dtype=torch.float64, requires_grad=True)
            loss = torch.nn.functional.cross_entropy(tl, torch.tensor(tg), reduction=reduction)
            gy = torch.ones_like(loss) * 1.5
            loss.backward(gy)
            grad = 1.5 if reduction != "none" else g.tensor(np.full(tshape, 1.5, np.float32))
            ours = g.cross_entropy_backward(T(lg), g.tensor(np.array(tg)), grad, reduction=reduction)
            chk("CE backward %s %s" % (shape, reduction), ours, tl.grad.numpy())
    chk("matmul batch of 0", g.matmul(T(np.zeros((0, 2, 4))), T(np.ones((1, 4, 5)))), np.zeros((0, 2, 5)))


def test_still_invalid():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 5, 6)).astype(np.float32)
    v = rng.standard_normal(4).astype(np.float32)
    m = rng.standard_normal((3, 4)).astype(np.float32)
    lg = rng.standard_normal((2, 5, 3, 3)).astype(np.float32)
    tg = rng.integers(0, 5, (2, 3, 3))
    for bad in [lambda: g.sum(T(x), dim=(0, 0)), lambda: g.argmax(T(x), dim=(0, 1)), lambda: g.div(T(x), T(x), rounding_mode="round"),
                lambda: g.clamp(T(x)), lambda: g.matmul(T(v), T(m)), lambda: g.cross_entropy(T(lg), g.tensor(tg[:1])),
                lambda: g.cross_entropy(T(lg), g.tensor(tg), label_smoothing=1.5), lambda: g.layer_norm(T(x), (4, 6))]:
        with pytest.raises(g.GpucoreError):
            bad()
