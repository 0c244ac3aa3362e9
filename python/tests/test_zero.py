"""The Python binding of the ZeRO trainer (1-rank communicator; the multi-rank cases are
tests/test_zero.c under mpirun): every stage trains like gpucore.AdamW on the same
gradients, stage 3 parameters exist only while gathered, checkpoints round-trip, bad input."""
import numpy as np
import pytest

import gpucore as g


def _model(ctx, rng):
    shapes = [(7, 5), (5,), (5, 3), (3,)]
    return [ctx.tensor(rng.standard_normal(s).astype(np.float32)) for s in shapes]


def _grads(rng, step):
    r = np.random.default_rng(100 + step)
    return [r.standard_normal(s).astype(np.float32) for s in [(7, 5), (5,), (5, 3), (3,)]]


def _train_zero(ctx, comm, stage, steps=3):
    params = _model(ctx, np.random.default_rng(0))
    z = g.ZeroTrainer(comm, params, stage=stage, lr=0.05, weight_decay=0.01, units=[0, 0, 1, 1],
                      max_grad_norm=2.0)
    assert z.bucket_count == 2
    for step in range(steps):
        gs = _grads(None, step)
        for i in reversed(range(4)):
            gt = z.grad(i)
            gt.copy_(ctx.tensor(gs[i]))
            del gt
            z.mark_ready(i)
        z.step()
    out = []
    for b in range(z.bucket_count):
        b0, b1, _, _ = z.bucket_info(b)
        with z.gathered(b):
            out += [(i, z.param(i).numpy().copy()) for i in range(b0, b1)]
    stats = z.stats()
    z.close()
    return [p for _, p in sorted(out, key=lambda t: t[0])], stats


def test_stages_match_adamw(ctx):
    (comm,) = g.Communicator.local([ctx])
    params = _model(ctx, np.random.default_rng(0))
    opt = g.AdamW(params, lr=0.05, weight_decay=0.01)
    for step in range(3):
        gs = [ctx.tensor(a) for a in _grads(None, step)]
        g.clip_grad_norm_(gs, 2.0)
        opt.step(gs)
    ref = [p.numpy() for p in params]
    for stage in range(4):
        got, stats = _train_zero(ctx, comm, stage)
        for a, b in zip(got, ref):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
        assert stats["stage"] == stage and stats["numel"] == 35 + 5 + 15 + 3
        assert stats["state_bytes"] == (8 if stage == 0 else 12) * stats["numel"]
        assert stats["gathered_bytes"] == 0 and stats["live_grad_bytes"] == 0
    opt.close()
    comm.close()


def test_stage3_checkpoint_roundtrip(ctx, tmp_path):
    (comm,) = g.Communicator.local([ctx])
    params = _model(ctx, np.random.default_rng(0))
    z = g.ZeroTrainer(comm, params, stage=3, lr=0.05)
    with pytest.raises(g.InvalidArgumentError):
        z.param(0)  # not gathered
    for i in reversed(range(4)):
        z.grad(i).fill_(0.25)
        z.mark_ready(i)
    z.step()
    names = ["w1", "b1", "w2", "b2"]
    z.save_sharded(str(tmp_path / "ck"))
    z.save_consolidated(str(tmp_path / "full.safetensors"), names)
    with z.gathered(z.bucket_of(0)):
        want = z.param(0).numpy().copy()
    for load in ("sharded", "consolidated"):
        z2 = g.ZeroTrainer(comm, _model(ctx, np.random.default_rng(1)), stage=1, lr=0.05)
        if load == "sharded":
            z2.load_sharded(str(tmp_path / "ck"))
        else:
            z2.load_consolidated(str(tmp_path / "full.safetensors"), names)
        np.testing.assert_array_equal(z2.param(0).numpy(), want)
        z2.close()
    with g.safe_open(str(tmp_path / "full.safetensors")) as f:
        assert "w1.exp_avg" in f.keys()
    z.close()
    comm.close()


def test_bad_input(ctx):
    (comm,) = g.Communicator.local([ctx])
    params = _model(ctx, np.random.default_rng(0))
    with pytest.raises(g.InvalidArgumentError):
        g.ZeroTrainer(comm, params, stage=4)
    with pytest.raises(g.InvalidArgumentTypeError):
        g.ZeroTrainer("comm", params)
    with pytest.raises(g.InvalidArgumentTypeError):
        g.ZeroTrainer(comm, params, units=[0])
    z = g.ZeroTrainer(comm, params)
    with pytest.raises(g.InvalidArgumentError):
        z.step()  # nothing reduced yet
    with pytest.raises(g.InvalidArgumentError):
        z.grad(9)
    with pytest.raises(g.InvalidArgumentError):
        z.grad_norm()  # clipping off
    z.close()
    with pytest.raises(g.InvalidHandleError):
        z.step()
    comm.close()


def test_example_trains_at_every_stage(capsys):
    """examples/python/train_mlp_zero.py as one rank (tests/meson.build runs it under mpirun -np 2)."""
    import importlib.util
    import os
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python",
                        "train_mlp_zero.py")
    spec = importlib.util.spec_from_file_location("train_mlp_zero_example", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    last = []
    for stage in (0, 3):
        r = mod.main(["--zero", str(stage), "--steps", "40", "--batch", "64", "--hidden", "64", "--log-every", "10"])
        assert r["last_loss"] < 0.7 * r["first_loss"], r
        last.append(r["last_loss"])
    assert abs(last[0] - last[1]) <= 1e-5 * abs(last[0])  # stage 3 trains like plain data parallelism
    assert "ZeRO stage 3" in capsys.readouterr().out


def _bound_model(ctx, stage):
    """An executor (linear-GELU, layer norm, linear) trained 3 steps by AdamW (stage None)
    or by a ZeroTrainer bound to it; returns the final parameters."""
    rng = np.random.default_rng(3)
    shapes = [(6, 4), (6,), (6,), (6,), (2, 6), (2,)]
    ps = [ctx.tensor((rng.standard_normal(s) * 0.5 + (1.0 if i in (2,) else 0.0)).astype(np.float32))
          for i, s in enumerate(shapes)]
    gs = [ctx.empty(s) for s in shapes]
    ex = g.CheckpointExecutor(ctx, "bound")
    ex.add_linear("fc1", ps[0], ps[1], "gelu_tanh", gs[0], gs[1])
    ex.add_layer_norm("ln", ps[2], ps[3], 1e-5, gs[2], gs[3])
    ex.add_linear("fc2", ps[4], ps[5], "none", gs[4], gs[5])
    ex.set_policy("recompute_all")
    x = ctx.tensor(rng.standard_normal((5, 4)).astype(np.float32))
    comm = z = opt = None
    if stage is None:
        opt = g.AdamW(ps, lr=0.05, weight_decay=0.01)
    else:
        (comm,) = g.Communicator.local([ctx])
        z = g.ZeroTrainer(comm, ps, stage=stage, lr=0.05, weight_decay=0.01, units=[0, 0, 1, 1, 2, 2])
        z.bind_checkpoint(ex, ps, gs, bucket_of_segment=[z.bucket_of(0), z.bucket_of(2), z.bucket_of(4)])
        if stage == 3:
            ps = gs = None  # keys only from here on
    for _ in range(3):
        y = ex.forward(x)
        ex.backward(y.clone() if hasattr(y, "clone") else ctx.tensor(y.numpy()))
        if z is not None:
            z.step()
        else:
            opt.step(gs)
    if z is None:
        out = [p.numpy().copy() for p in ps]
    else:
        out = []
        for i in range(6):
            with z.gathered(z.bucket_of(i)):
                out.append(z.param(i).numpy().copy())
        z.close()
        comm.close()
    ex.close()
    return out


def test_bind_checkpoint_builtin_segments(ctx):
    ref = _bound_model(ctx, None)
    for stage in (0, 1, 2, 3):
        got = _bound_model(ctx, stage)
        for a, b in zip(got, ref):
            assert np.array_equal(a, b), stage
