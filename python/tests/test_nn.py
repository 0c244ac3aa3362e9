"""matmul (options), linear forward/backward and convolution forward/backward against numpy."""
import math

import numpy as np
import pytest

import gpucore as g
from test_ops import arr, gelu_tanh, rel


def test_matmul_plain_transposed_batched(ctx):
    a, b = arr(5, 7), arr(7, 3)
    A, B = a.astype(np.float64), b.astype(np.float64)
    assert rel(g.matmul(ctx.tensor(a), ctx.tensor(b)).numpy(), A @ B) < 1e-6
    assert rel(g.matmul(ctx.tensor(b), ctx.tensor(a), trans_a=True, trans_b=True).numpy(), (A @ B).T) < 1e-6
    # a transposed view works as op()
    at = ctx.tensor(np.ascontiguousarray(a.T)).T
    assert rel(g.matmul(at, ctx.tensor(b)).numpy(), A @ B) < 1e-6
    ab, bb = arr(4, 5, 7), arr(4, 7, 3)
    got = g.matmul(ctx.tensor(ab), ctx.tensor(bb)).numpy()
    assert got.shape == (4, 5, 3) and rel(got, ab.astype(np.float64) @ bb) < 1e-6
    got = g.matmul(ctx.tensor(ab), ctx.tensor(b)).numpy()
    assert rel(got, ab.astype(np.float64) @ B) < 1e-6


def test_matmul_alpha_beta_c_and_epilogues(ctx):
    a, b, c, bias = arr(6, 4), arr(4, 5), arr(6, 5), arr(5)
    A, B, Cc = a.astype(np.float64), b.astype(np.float64), c.astype(np.float64)
    ta, tb = ctx.tensor(a), ctx.tensor(b)
    d = ctx.tensor(c)
    g.matmul(ta, tb, out=d, alpha=2.0, beta=0.5, c=d)
    assert rel(d.numpy(), 2 * A @ B + 0.5 * Cc) < 1e-6
    assert rel(g.matmul(ta, tb, bias=ctx.tensor(bias)).numpy(), A @ B + bias) < 1e-6
    assert rel(g.matmul(ta, tb, bias=ctx.tensor(bias), epilogue="bias_relu").numpy(),
               np.maximum(A @ B + bias, 0)) < 1e-6
    aux = ctx.empty((6, 5))
    y = g.matmul(ta, tb, bias=ctx.tensor(bias), epilogue="bias_gelu", aux=aux)
    assert rel(y.numpy(), gelu_tanh(A @ B + bias)) < 1e-6
    assert rel(aux.numpy(), A @ B + bias) < 1e-6
    bg = ctx.empty((5,))
    g.matmul(ta, tb, epilogue="bgrad_b", bias_grad=bg)
    assert rel(bg.numpy(), B.sum(0)) < 1e-5
    bf = g.matmul(g.cast(ta, "bfloat16"), g.cast(tb, "bfloat16"), out_dtype="float32")
    assert bf.dtype is g.float32 and rel(bf.numpy(), A @ B) < 1e-2
    with pytest.raises(g.ShapeMismatchError):
        g.matmul(ta, ta)
    with pytest.raises(g.InvalidArgumentError):
        g.matmul(ta, tb, epilogue="swish")
    with pytest.raises(g.GpucoreError) as e:
        g.matmul(ta, tb, epilogue="dgelu")  # aux input required
    assert e.value.function == "gpucore_matmul" and "aux" in str(e.value)
    ctx.allow_tf32 = True
    assert ctx.allow_tf32 is True
    ctx.allow_tf32 = False
    ctx.set_matmul_workspace_size(0)


def test_linear_forward_backward(ctx):
    x, w, b, dy = arr(3, 4, 6), arr(5, 6), arr(5), arr(3, 4, 5)
    X, W = x.astype(np.float64).reshape(-1, 6), w.astype(np.float64)
    pre = X @ W.T + b
    tx, tw, tb = ctx.tensor(x), ctx.tensor(w), ctx.tensor(b)
    y = g.linear(tx, tw, tb)
    assert y.shape == (3, 4, 5) and rel(y.numpy().reshape(-1, 5), pre) < 1e-6
    assert rel(g.linear(tx, tw, tb, "relu").numpy().reshape(-1, 5), np.maximum(pre, 0)) < 1e-6
    yg, aux = g.linear(tx, tw, tb, "gelu", return_aux=True)
    assert rel(yg.numpy().reshape(-1, 5), gelu_tanh(pre)) < 1e-6 and rel(aux.numpy().reshape(-1, 5), pre) < 1e-6
    D = dy.astype(np.float64).reshape(-1, 5)
    dx, dw, db = g.linear_backward(ctx.tensor(dy), tx, tw)
    assert rel(dx.numpy().reshape(-1, 6), D @ W) < 1e-6
    assert rel(dw.numpy(), D.T @ X) < 1e-6
    assert rel(db.numpy(), D.sum(0)) < 1e-5
    dx2, dw2, db2 = g.linear_backward(ctx.tensor(dy), tx, tw, input_grad=False, bias_grad=False)
    assert dx2 is None and db2 is None and rel(dw2.numpy(), D.T @ X) < 1e-6
    # fused GELU-input gradient: x = gelu_tanh(aux_below)
    below = arr(3, 4, 6)
    xg = g.gelu(ctx.tensor(below), approximate="tanh")
    dxa, _, _ = g.linear_backward(ctx.tensor(dy), xg, tw, x_gelu_aux=ctx.tensor(below), weight_grad=False)
    ref = g.gelu_backward(ctx.tensor((D @ W).reshape(3, 4, 6).astype(np.float32)), ctx.tensor(below), "tanh")
    assert rel(dxa.numpy(), ref.numpy()) < 1e-5
    with pytest.raises(g.ShapeMismatchError):
        g.linear(tx, ctx.tensor(arr(5, 7)))
    with pytest.raises(g.InvalidArgumentError):
        g.linear(tx, tw, activation="tanh")


def conv_ref(x, w, b, stride, pad, dil, groups):
    N, Cin, H, W = x.shape
    K, Cg, R, S = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    P = (H + 2 * pad - dil * (R - 1) - 1) // stride + 1
    Q = (W + 2 * pad - dil * (S - 1) - 1) // stride + 1
    y = np.zeros((N, K, P, Q))
    kg = K // groups
    for k in range(K):
        gi = k // kg
        for p in range(P):
            for q in range(Q):
                patch = xp[:, gi * Cg:(gi + 1) * Cg, p * stride:p * stride + dil * (R - 1) + 1:dil,
                           q * stride:q * stride + dil * (S - 1) + 1:dil]
                y[:, k, p, q] = (patch * w[k]).sum((1, 2, 3))
    return y + (0 if b is None else b[None, :, None, None])


@pytest.mark.parametrize("stride,pad,dil,groups", [(1, 1, 1, 1), (2, 0, 1, 2), (1, 2, 2, 1)])
def test_conv2d_forward_backward(ctx, stride, pad, dil, groups):
    x, w, b = arr(2, 4, 7, 6), arr(6, 4 // groups, 3, 3), arr(6)
    X, Wt = x.astype(np.float64), w.astype(np.float64)
    tx, tw = ctx.tensor(x), ctx.tensor(w)
    y = g.conv2d(tx, tw, ctx.tensor(b), stride, pad, dil, groups)
    ref = conv_ref(X, Wt, b.astype(np.float64), stride, pad, dil, groups)
    assert y.shape == ref.shape and rel(y.numpy(), ref) < 1e-6
    assert g.conv_output_shape(tx, tw, stride, pad, dil, groups) == ref.shape
    yr = g.conv2d(tx, tw, ctx.tensor(b), stride, pad, dil, groups, activation="relu")
    assert rel(yr.numpy(), np.maximum(ref, 0)) < 1e-6
    # backward against finite differences of the linear map: <dy, conv(x, w)> is bilinear
    dy = arr(*ref.shape)
    dx = g.conv2d_backward_data(ctx.tensor(dy), tw, x.shape, stride, pad, dil, groups).numpy()
    dw = g.conv2d_backward_filter(ctx.tensor(dy), tx, w.shape, stride, pad, dil, groups).numpy()
    D = dy.astype(np.float64)
    # exact reference: d<dy, y>/dx_i via the adjoint, computed with unit vectors on a few entries
    for idx in [(0, 0, 0, 0), (1, 3, 6, 5), (0, 1, 3, 2)]:
        e = np.zeros_like(X)
        e[idx] = 1
        assert abs(dx[idx] - (D * conv_ref(e, Wt, None, stride, pad, dil, groups)).sum()) < 1e-4
    for idx in [(0, 0, 0, 0), (5, 4 // groups - 1, 2, 2), (3, 0, 1, 2)]:
        e = np.zeros_like(Wt)
        e[idx] = 1
        assert abs(dw[idx] - (D * conv_ref(X, e, None, stride, pad, dil, groups)).sum()) < 1e-4


def test_conv_nhwc_same_conv1d_and_errors(ctx):
    x, w = arr(1, 3, 5, 5), arr(2, 3, 3, 3)
    ref = conv_ref(x.astype(np.float64), w.astype(np.float64), None, 1, 1, 1, 1)
    y = g.conv2d(ctx.tensor(x), ctx.tensor(w), padding="same")
    assert rel(y.numpy(), ref) < 1e-6
    xn = ctx.tensor(np.ascontiguousarray(x.transpose(0, 2, 3, 1)))
    wn = ctx.tensor(np.ascontiguousarray(w.transpose(0, 2, 3, 1)))
    yn = g.conv2d(xn, wn, padding=1, layout="nhwc")
    assert rel(yn.numpy().transpose(0, 3, 1, 2), ref) < 1e-6
    x1, w1 = arr(2, 3, 9), arr(4, 3, 3)
    y1 = g.conv1d(ctx.tensor(x1), ctx.tensor(w1), padding=1)
    xp = np.pad(x1.astype(np.float64), ((0, 0), (0, 0), (1, 1)))
    r1 = np.stack([np.einsum("ncs,kcs->nk", xp[:, :, q:q + 3], w1.astype(np.float64)) for q in range(9)], -1)
    assert rel(y1.numpy(), r1) < 1e-6
    with pytest.raises(g.ShapeMismatchError):
        g.conv2d(ctx.tensor(x), ctx.tensor(arr(2, 4, 3, 3)))
    with pytest.raises(g.InvalidArgumentError):
        g.conv2d(ctx.tensor(x), ctx.tensor(w), stride=0)
    with pytest.raises(g.InvalidArgumentError):
        g.conv2d(ctx.tensor(x), ctx.tensor(w), layout="chwn")
    st = g.conv_stats(ctx)
    assert set(st) >= {"plans_cached", "cache_hits", "autotune_ms"}
    assert "conv2d" in g.conv2d.__doc__ or "convolution" in g.conv2d.__doc__


def test_cuda_matmul_conv_linear(cuda_ctx):
    a, b = arr(32, 16), arr(16, 8)
    d = g.matmul(cuda_ctx.tensor(a), cuda_ctx.tensor(b), allow_tf32=False)
    assert rel(d.numpy(), a.astype(np.float64) @ b) < 1e-6
    y = g.linear(cuda_ctx.tensor(a), cuda_ctx.tensor(b.T.copy()), None, "relu")
    assert rel(y.numpy(), np.maximum(a.astype(np.float64) @ b, 0)) < 1e-6
    x, w = arr(2, 4, 6, 6), arr(3, 4, 3, 3)
    yc = g.conv2d(cuda_ctx.tensor(x), cuda_ctx.tensor(w), padding=1, allow_tf32=False)
    assert rel(yc.numpy(), conv_ref(x.astype(np.float64), w.astype(np.float64), None, 1, 1, 1, 1)) < 1e-5
    assert g.conv_stats(cuda_ctx)["plans_cached"] >= 1


def test_matmul_stats_count_and_reset():
    """matmul_stats: each GEMM is counted once, none on the CPU is a fallback, reset zeroes the
    counters after reading them, and a reason's text comes from the C table."""
    ctx = g.Context("cpu")
    a = ctx.empty((4, 4)).uniform_(seed=1)
    g.matmul_stats(ctx, reset=True)
    g.matmul(a, a)
    g.matmul(a, a, trans_b=True)
    assert g.matmul_stats(ctx, reset=True) == {"gemms": 2, "fallback_gemms": 0, "fallback_by_reason": {}}
    assert g.matmul_stats(ctx)["gemms"] == 0
    assert g.nn.C.gpucore_matmul_fallback_reason_text(99).decode() == "unknown reason"
    ctx.close()
