"""Tensor-number arithmetic gives exactly the bits of the same op with the number as a
0-d tensor: the binding's shortcuts through gpucore_scale (alpha*t + beta) are taken
only where they are exactly equal (t / 3.0 is a division, not t * (1/3))."""
import numpy as np
import pytest

import gpucore

VALUES = [3.0, 0.1, -7.5, 1e-3, 2.0, 0.5, -0.25, 2.0 ** 100, 2.0 ** -100, 2.0 ** -127, 1e30, 0.0, -0.0]


def _data(ctx):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(4099) * 10.0 ** rng.integers(-30, 30, 4099)).astype(np.float32)
    x[:4] = [0.0, -0.0, 1e-45, -1e-45]  # signed zeros and subnormals
    return x, gpucore.from_numpy(x, device=ctx)


def _bits(t):
    return t.numpy().view(np.uint32).copy()


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_number_right_is_the_tensor_op(ctx, op):
    x, t = _data(ctx)
    fn = getattr(gpucore, op)
    sym = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
           "div": lambda a, b: a / b}[op]
    for v in VALUES:
        want = _bits(fn(t, gpucore.full((), v, "float32", ctx)))
        assert np.array_equal(_bits(sym(t, v)), want), (op, v)
        assert np.array_equal(_bits(fn(t, v)), want), (op, v)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_number_left_is_the_tensor_op(ctx, op):
    x, t = _data(ctx)
    fn = getattr(gpucore, op)
    for v in VALUES:
        want = _bits(fn(gpucore.full((), v, "float32", ctx), t))
        assert np.array_equal(_bits(fn(v, t)), want), (op, v)


def test_division_by_three_is_a_division(ctx):
    x, t = _data(ctx)
    got = (t / 3.0).numpy()
    assert np.array_equal(got.view(np.uint32), (x / np.float32(3.0)).view(np.uint32))
