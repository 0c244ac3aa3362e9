"""The Python binding of the GPipe pipeline (gpucore.Pipeline): two linear layers on two
CPU contexts match a float64 numpy reference of the full batch, placements over 1 and 2
contexts agree bit for bit, a loss callback's exception comes back, bad input."""
import gc

import numpy as np
import pytest

import gpucore as g

RNG = np.random.default_rng(7)
W1, B1 = RNG.standard_normal((6, 4)).astype(np.float32) * 0.5, RNG.standard_normal(6).astype(np.float32) * 0.1
W2, B2 = RNG.standard_normal((3, 6)).astype(np.float32) * 0.5, RNG.standard_normal(3).astype(np.float32) * 0.1
X = RNG.standard_normal((7, 4)).astype(np.float32)
T = RNG.standard_normal((7, 3)).astype(np.float32)


def _split(m, M, B=7):
    q, r = divmod(B, M)
    a = m * q + min(m, r)
    return a, a + q + (1 if m < r else 0)


def _run(ctxs, M):
    c0, c1 = ctxs[0], ctxs[-1]
    w1, b1, w2, b2 = c0.tensor(W1), c0.tensor(B1), c1.tensor(W2), c1.tensor(B2)
    dw1, db1, dw2, db2 = c0.empty((6, 4)), c0.empty((6,)), c1.empty((3, 6)), c1.empty((3,))
    s0 = g.CheckpointExecutor(c0, "s0")
    s0.add_linear("fc1", w1, b1, "relu", dw1, db1)
    s1 = s0 if len(ctxs) == 1 else g.CheckpointExecutor(c1, "s1")
    s1.add_linear("fc2", w2, b2, "none", dw2, db2)
    stages = [s0] if len(ctxs) == 1 else [s0, s1]
    pipe = g.Pipeline(stages)
    t = c1.tensor(T)
    seen = []

    def loss(m, y, dy):
        a, b = _split(m, M)
        seen.append((m, y.shape))
        g.sub(y, t[a:b], out=dy)

    dx = pipe.step(c0.tensor(X), M, loss, dx=c0.empty((7, 4)))
    out = [a.numpy().copy() for a in (dw1, db1, dw2, db2, dx)]
    assert [m for m, _ in seen] == list(range(M))
    pipe.close()
    for s in set(stages):
        s.close()
    return out


@pytest.fixture
def two():
    cs = [g.Context("cpu"), g.Context("cpu")]
    yield cs
    gc.collect()
    for c in cs:
        c.close()


def test_pipeline_matches_reference(two):
    X64, W164, W264 = X.astype(np.float64), W1.astype(np.float64), W2.astype(np.float64)
    h = X64 @ W164.T + B1
    a = np.maximum(h, 0)
    y = a @ W264.T + B2
    dy = y - T
    dw2, db2 = dy.T @ a, dy.sum(0)
    da = (dy @ W264) * (h > 0)
    ref = [da.T @ X64, da.sum(0), dw2, db2, da @ W164]
    for M in (1, 2, 3, 7):
        got = _run(two, M)
        for r, o in zip(ref, got):
            assert np.linalg.norm(o - r) / np.linalg.norm(r) < 1e-5
        one = _run([two[0]], M)
        for a_, b_ in zip(got, one):
            assert np.array_equal(a_, b_)


def test_pipeline_loss_exception_and_bad_input(two):
    c0, c1 = two
    s0, s1 = g.CheckpointExecutor(c0, "s0"), g.CheckpointExecutor(c1, "s1")
    w1, w2 = c0.tensor(W1), c1.tensor(W2)
    s0.add_linear("fc1", w1, None, "relu", c0.empty((6, 4)), None)
    s1.add_linear("fc2", w2, None, "none", c1.empty((3, 6)), None)
    pipe = g.Pipeline([s0, s1])

    class Boom(Exception):
        pass

    def bad_loss(m, y, dy):
        raise Boom("no loss")

    with pytest.raises(Boom) as ei:
        pipe.step(c0.tensor(X), 2, bad_loss)
    assert "stage 1 micro-batch 0 loss callback" in str(ei.value.__cause__)
    with pytest.raises(g.InvalidArgumentError):
        pipe.step(c0.tensor(X), 8, lambda m, y, dy: None)
    with pytest.raises(g.GpucoreError):
        pipe.step(c1.tensor(X), 2, lambda m, y, dy: None)  # x on stage 1's context
    with pytest.raises(g.InvalidArgumentError):
        g.Pipeline([s0, s1])  # already in a pipeline
    with pytest.raises(g.InvalidArgumentTypeError):
        g.Pipeline([])
    pipe.step(c0.tensor(X), 2, lambda m, y, dy: dy.copy_(y))  # usable after the errors
    pipe.close()
    pipe.close()
    with pytest.raises(g.InvalidHandleError):
        pipe.step(c0.tensor(X), 2, lambda m, y, dy: None)
