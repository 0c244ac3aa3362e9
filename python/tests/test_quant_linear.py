"""gpucore.QWeight, qlinear and qlinear_backward_data, and lora_linear on a quantized base, against
numpy float64 products over the weight that dequantize gives in the activations' dtype."""
from __future__ import annotations

import numpy as np
import pytest

import gpucore
from gpucore.errors import InvalidArgumentError, InvalidArgumentTypeError, ShapeMismatchError

FORMATS = [("nf4", 64, 77), ("fp4", 128, 160), ("int8", 0, 77), ("q4_0", 0, 96), ("q5_1", 0, 64), ("q8_0", 0, 64)]
TOL = {gpucore.float32: 1e-5, gpucore.bfloat16: 1e-2}


def f64(t):
    return t.to(gpucore.float32).numpy().astype(np.float64)


def rel(got, want):
    return np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)


def qweight(rng, fmt, block, rows, cols):
    w = rng.standard_normal((rows, cols)).astype(np.float32) * 0.1
    return gpucore.QWeight.quantize(gpucore.from_numpy(w), fmt, block)


@pytest.mark.parametrize("fmt,block,cols", FORMATS)
@pytest.mark.parametrize("dtype", [gpucore.float32, gpucore.bfloat16])
@pytest.mark.parametrize("rows", [1, 6])
def test_qlinear_forward_backward(fmt, block, cols, dtype, rows):
    rng = np.random.default_rng(47)
    qw = qweight(rng, fmt, block, 37, cols)
    w = f64(qw.dequantize(dtype))  # each value dequantized in f32, rounded to dtype
    x = gpucore.from_numpy(rng.uniform(-1, 1, (rows, cols)).astype(np.float32)).to(dtype)
    bias = gpucore.from_numpy(rng.uniform(-1, 1, 37).astype(np.float32)).to(dtype)
    y, aux = gpucore.qlinear(x, qw, bias, act="gelu", return_aux=True)
    pre = f64(x) @ w.T + f64(bias)
    gelu = 0.5 * pre * (1 + np.tanh(0.7978845608028654 * (pre + 0.044715 * pre ** 3)))
    assert y.shape == (rows, 37) and y.dtype == dtype
    assert rel(f64(aux), pre) < TOL[dtype] and rel(f64(y), gelu) < TOL[dtype]
    assert rel(f64(gpucore.qlinear(x, qw, act="relu")), np.maximum(f64(x) @ w.T, 0)) < TOL[dtype]
    dy = gpucore.from_numpy(rng.uniform(-1, 1, (rows, 37)).astype(np.float32)).to(dtype)
    dx = gpucore.qlinear_backward_data(dy, qw)
    assert dx.shape == (rows, cols) and rel(f64(dx), f64(dy) @ w) < TOL[dtype]
    d0 = f64(dx)
    gpucore.qlinear_backward_data(dy, qw, dx=dx, beta=1)
    assert rel(f64(dx), d0 + f64(dy) @ w) < TOL[dtype]


def test_lora_on_quantized_base():
    rng = np.random.default_rng(7)
    qw = qweight(rng, "nf4", 64, 24, 64)
    wd = qw.dequantize()
    x = gpucore.from_numpy(rng.uniform(-1, 1, (2, 5, 64)).astype(np.float32))
    a = gpucore.from_numpy(rng.uniform(-0.3, 0.3, (4, 64)).astype(np.float32))
    b = gpucore.from_numpy(rng.uniform(-0.3, 0.3, (24, 4)).astype(np.float32))
    dy = gpucore.from_numpy(rng.uniform(-1, 1, (2, 5, 24)).astype(np.float32))
    kw = dict(scale=0.5, dropout_p=0.2, seed=3, offset=0)
    y_q, y_d = gpucore.transformer.lora_linear(x, qw, None, a, b, **kw), gpucore.transformer.lora_linear(x, wd, None, a, b, **kw)
    assert rel(f64(y_q), f64(y_d)) < 1e-5
    for g_q, g_d in zip(gpucore.transformer.lora_linear_backward(dy, x, qw, a, b, **kw),
                        gpucore.transformer.lora_linear_backward(dy, x, wd, a, b, **kw)):
        assert rel(f64(g_q), f64(g_d)) < 1e-5


def test_bad_input():
    rng = np.random.default_rng(1)
    qw = qweight(rng, "q4_0", 0, 8, 64)
    x = gpucore.from_numpy(np.ones((2, 64), np.float32))
    with pytest.raises(InvalidArgumentTypeError):
        gpucore.qlinear(x, x)
    with pytest.raises(InvalidArgumentError):
        gpucore.qlinear(x, qw, act="silu")
    with pytest.raises(ShapeMismatchError, match="last dim must be 64"):
        gpucore.qlinear(gpucore.from_numpy(np.ones((2, 32), np.float32)), qw)
    with pytest.raises(ShapeMismatchError, match="gpucore_quant_size"):
        gpucore.qlinear(x, gpucore.QWeight(qw.data, "q4_0", (9, 64)))
    with pytest.raises(InvalidArgumentError, match="beta is 2"):
        gpucore.qlinear_backward_data(gpucore.from_numpy(np.ones((2, 8), np.float32)), qw,
                                      dx=gpucore.from_numpy(np.ones((2, 64), np.float32)), beta=2)
    assert gpucore.qlinear(x, qw).shape == (2, 8)  # still usable
