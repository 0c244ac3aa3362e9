"""Optimizers, loss scaler, gradient clipping, safetensors and checkpoints, the 1-rank
communicator and DDP reducer, and the checkpoint executor with Python segments."""
import gc
import math
import os

import numpy as np
import pytest

import gpucore as g
from test_ops import arr, rel


def test_sgd_momentum_nesterov(ctx):
    p0, g0 = arr(10), arr(10)
    p = ctx.tensor(p0)
    opt = g.SGD([p], lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True)
    P, buf = p0.astype(np.float64), None
    for _ in range(3):
        opt.step([ctx.tensor(g0)])
        d = g0 + 0.01 * P
        buf = d if buf is None else 0.9 * buf + d
        P = P - 0.1 * (d + 0.9 * buf)
    assert rel(p.numpy(), P) < 1e-6
    assert opt.step_count == 3 and len(opt) == 1
    assert rel(opt.state(0, "momentum_buffer").numpy(), buf) < 1e-6
    with pytest.raises(g.InvalidArgumentError) as e:
        opt.state(0, "exp_avg")
    assert "exp_avg" in str(e.value)
    with pytest.raises(g.ShapeMismatchError):
        opt.step([ctx.tensor(arr(9))])
    opt.close()
    with pytest.raises(g.InvalidHandleError):
        opt.step([ctx.tensor(g0)])


def test_adamw_bf16_master_and_lr(ctx):
    p0, g0 = arr(16), arr(16)
    p = g.cast(ctx.tensor(p0), "bfloat16")
    master0 = np.asarray(p).astype(np.float64)
    opt = g.AdamW([p], lr=1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1)
    assert abs(opt.lr - 1e-2) < 1e-9
    M, m, v = master0.copy(), 0.0, 0.0
    G = g0.astype(np.float64)
    for t in range(1, 4):
        opt.step([ctx.tensor(g0)])
        M = M * (1 - 1e-2 * 0.1)
        m = 0.9 * m + 0.1 * G
        v = 0.99 * v + 0.01 * G * G
        M = M - 1e-2 * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.99 ** t)) + 1e-8)
    assert rel(opt.state(0, "master").numpy(), M) < 1e-5
    assert rel(np.asarray(p), M) < 1e-2
    assert rel(opt.state(0, "exp_avg").numpy(), m) < 1e-5
    opt.lr = 0.5
    assert abs(opt.lr - 0.5) < 1e-7
    with pytest.raises(TypeError):
        g.AdamW([p], betas=0.9)
    with pytest.raises(g.InvalidArgumentError):
        g.AdamW([])


def test_loss_scaler_and_clip(ctx):
    sc = g.LossScaler(ctx, init_scale=1024.0, growth_interval=2)
    assert sc.scale == 1024.0
    gr = ctx.tensor(np.full(8, 2048.0, np.float32))
    sc.unscale_([gr])
    assert np.allclose(gr.numpy(), 2.0) and sc.found_inf.item() == 0
    p = ctx.tensor(np.ones(8, np.float32))
    opt = g.SGD([p], lr=1.0)
    bad = ctx.tensor(np.array([np.inf] + [1.0] * 7, np.float32))
    sc.unscale_([bad])
    assert sc.found_inf.item() == 1
    opt.step([bad], found_inf=sc)
    assert np.allclose(p.numpy(), 1.0) and opt.step_count == 0
    sc.update()
    assert sc.scale == 512.0 and sc.growth_tracker.item() == 0
    for _ in range(2):
        sc.unscale_([ctx.tensor(np.ones(8, np.float32))])
        sc.update()
    assert sc.scale == 1024.0
    a, b = arr(100), arr(30)
    n = math.sqrt((a.astype(np.float64) ** 2).sum() + (b.astype(np.float64) ** 2).sum())
    ta, tb = ctx.tensor(a), ctx.tensor(b)
    total, coef = g.clip_grad_norm_([ta, tb], 1.0, return_coef=True)
    assert abs(total.item() - n) / n < 1e-5 and abs(coef.item() - 1.0 / (n + 1e-6)) < 1e-5
    assert rel(ta.numpy(), a / (n + 1e-6)) < 1e-5
    with pytest.raises(g.InvalidArgumentError):
        g.clip_grad_norm_([ta], -1.0)
    with pytest.raises(TypeError):
        g.clip_grad_norm_([ta, "x"], 1.0)


def test_safetensors_round_trip_and_corrupt(ctx, tmp_path):
    path = str(tmp_path / "m.safetensors")
    a, b = arr(3, 4), np.arange(5, dtype=np.int64)
    bf = g.cast(ctx.tensor(a), "bfloat16")
    g.save_file({"a": ctx.tensor(a), "b": ctx.tensor(b), "c": bf}, path, metadata={"format": "pt"})
    with g.safe_open(path) as f:
        assert f.keys() == ["a", "b", "c"] and len(f) == 3 and "b" in f
        assert f.info("a") == (g.float32, (3, 4)) and f.info("c")[0] is g.bfloat16
        assert f.metadata("format") == "pt" and f.metadata("nope") is None
        out = ctx.empty((5,), "int64")
        assert np.array_equal(f.read_into("b", out).numpy(), b)
        with pytest.raises(g.GpucoreError):
            f.read_into("a", ctx.empty((4, 3)))
    d = g.load_file(path, ctx)
    assert np.array_equal(d["a"].numpy(), a) and np.array_equal(d["c"].numpy(), bf.numpy())
    with open(path, "r+b") as fh:
        fh.write(b"\xff" * 8)
    with pytest.raises(g.CorruptFileError) as e:
        g.load_file(path, ctx)
    assert str(e.value)
    with pytest.raises(g.FileIOError):
        g.load_file(str(tmp_path / "missing.safetensors"), ctx)
    with pytest.raises(TypeError):
        g.save_file({"a": a}, path)


def test_checkpoint_save_load_resume(ctx, tmp_path):
    path = str(tmp_path / "ckpt.safetensors")
    w = ctx.tensor(arr(4, 4))
    opt = g.AdamW([w], lr=1e-3)
    sc = g.LossScaler(ctx, init_scale=256.0)
    opt.step([ctx.tensor(arr(4, 4))])
    g.save_checkpoint(path, {"w": w}, opt, sc)
    w2 = ctx.zeros((4, 4))
    opt2 = g.AdamW([w2], lr=0.5)
    sc2 = g.LossScaler(ctx)
    g.load_checkpoint(path, {"w": w2}, opt2, sc2)
    assert np.array_equal(w2.numpy(), w.numpy())
    assert opt2.step_count == 1 and abs(opt2.lr - 1e-3) < 1e-9 and sc2.scale == 256.0
    assert np.array_equal(opt2.state(0, "exp_avg_sq").numpy(), opt.state(0, "exp_avg_sq").numpy())
    with pytest.raises(g.GpucoreError) as e:
        g.load_checkpoint(path, {"w": w2}, g.SGD([w2]), None)
    assert str(e.value)


def test_comm_local_one_rank_and_ddp(ctx):
    (comm,) = g.Communicator.local([ctx])
    assert comm.rank == 0 and comm.size == 1 and comm.context is ctx
    a = arr(10)
    t = ctx.tensor(a)
    seq = comm.all_reduce(t, "sum")
    comm.wait(seq, timeout=10.0)
    assert seq == comm.last_sequence >= 1 and rel(t.numpy(), a) < 1e-6
    out = ctx.empty((10,))
    comm.all_reduce(t, "max", out=out)
    comm.all_gather(out, t)
    comm.reduce_scatter(out, t)
    comm.broadcast(t, 0)
    comm.barrier()
    comm.wait()
    assert rel(out.numpy(), a) < 1e-6
    comm.set_timeout(30)
    assert isinstance(comm.stream, g.Stream)
    with pytest.raises(g.InvalidArgumentError):
        comm.all_reduce(t, "prod")
    with pytest.raises(g.GpucoreError):
        comm.all_reduce(ctx.empty((4,)), out=ctx.empty((5,)))
    # a tensor of another context of the same device: the message names both contexts
    with g.Context("cpu") as other:
        with pytest.raises(g.DeviceMismatchError) as ex:
            comm.all_reduce(other.tensor(a))
        msg = str(ex.value)
        assert f"context #{other.id} (cpu)" in msg and f"context #{ctx.id} (cpu)" in msg, msg
        assert "default_context" in msg
    grads = [ctx.tensor(arr(100)) for _ in range(4)]
    ref = [gr.numpy().copy() for gr in grads]
    ddp = g.DDPReducer(comm, grads, first_bucket_bytes=400, bucket_bytes=800, trace=True)
    assert ddp.bucket_count >= 2
    b0 = ddp.bucket_info(0)
    assert b0[1] == 4 and b0[2] >= 400
    for i in reversed(range(4)):
        ddp.mark_ready(i)
    ddp.finish()
    for gr, r in zip(grads, ref):
        assert rel(gr.numpy(), r) < 1e-6
    kinds = {e["kind"] for e in ddp.trace()}
    # gradient 1 as a view into its bucket: starts with its value, is reduced in place
    grads[1].fill_(2.0)
    v = ddp.grad_view(1)
    assert np.all(v.numpy() == 2.0)
    v.fill_(3.0)
    for i in reversed(range(4)):
        ddp.mark_ready(i)
    ddp.finish()
    assert np.all(v.numpy() == 3.0)  # one rank: the mean is the value, left in the view
    with pytest.raises(g.InvalidArgumentError):
        ddp.grad_view(7)
    assert {"ready", "launch", "finish"} <= kinds
    with ddp.no_sync():
        ddp.mark_ready(0)
    with pytest.raises(g.InvalidArgumentError):
        ddp.finish()  # not every gradient marked
    ddp.close()
    comm.close()
    with pytest.raises(g.GpucoreError):
        g.Communicator.local([])
    with pytest.raises(g.GpucoreError):
        g.unique_id(ctx)  # CUDA only


def _mlp_segments(ctx, ex, w1, b1, w2, dw1, db1, dw2, calls):
    ex.add_linear("fc1", w1, b1, "relu", dw1, db1)

    def fwd(call, x):
        calls.append(("f", call.segment))
        s, o = call.rng(g.C.gpucore_random_offset_advance(x.numel(), 0))
        call.save(x)
        return g.dropout(x, 0.25, seed=s, offset=o)

    def bwd(call, dy, dx):
        calls.append(("b", call.segment))
        s, o = call.rng(g.C.gpucore_random_offset_advance(dy.numel(), 0))
        assert call.saved(0).shape == dy.shape
        g.dropout_backward(dy, 0.25, s, o, out=dx)

    ex.add("drop", fwd, bwd)
    ex.add_linear("fc2", w2, None, "none", dw2, None)


def test_checkpoint_executor_python_segments(ctx):
    w1, b1, w2 = ctx.tensor(arr(16, 8)), ctx.tensor(arr(16)), ctx.tensor(arr(4, 16))
    x = ctx.tensor(arr(5, 8))
    dy = ctx.tensor(arr(5, 4))
    results = {}
    for policy in ("keep_all", "recompute_all", "sqrt_n"):
        grads = [ctx.empty((16, 8)), ctx.empty((16,)), ctx.empty((4, 16))]
        calls = []
        ex = g.CheckpointExecutor(ctx, "mlp")
        _mlp_segments(ctx, ex, w1, b1, w2, grads[0], grads[1], grads[2], calls)
        assert len(ex) == 3
        ex.set_policy(policy)
        ex.set_seed(123)
        ready = []
        ex.set_grad_ready_callback(lambda seg, name, param, grad: ready.append((name, param, grad.shape)))
        y = ex.forward(x)
        assert y.shape == (5, 4)
        dx = ex.backward(dy, input_grad=True)
        assert dx.shape == (5, 8)
        results[policy] = [gr.numpy().copy() for gr in grads] + [dx.numpy().copy()]
        st = ex.stats()
        assert st["segments"] == 3
        if policy == "recompute_all":
            assert ex.plan() == ["checkpoint"] * 3 and st["recompute_runs"] >= 1
            assert sum(1 for c in calls if c[0] == "f") == 2  # forward + recompute
        assert ("fc1", 0, (16, 8)) in ready
        ex.close()
    for pol in ("recompute_all", "sqrt_n"):
        for a, b in zip(results["keep_all"], results[pol]):
            assert np.array_equal(a, b)
    # numpy reference of keep-all gradients
    X = x.numpy().astype(np.float64)
    h = np.maximum(X @ w1.numpy().T + b1.numpy(), 0)
    ex = g.CheckpointExecutor(ctx)
    gw = [ctx.empty((16, 8)), ctx.empty((16,)), ctx.empty((4, 16))]
    _mlp_segments(ctx, ex, w1, b1, w2, gw[0], gw[1], gw[2], [])
    ex.set_seed(123)
    y = ex.forward(x)
    hd = g.dropout(ctx.tensor(h.astype(np.float32)), 0.25, seed=123, offset=0).numpy()  # first reservation
    assert rel(y.numpy(), hd.astype(np.float64) @ w2.numpy().T) < 1e-5
    ex.reset()


def test_checkpoint_executor_errors_and_hooks(ctx):
    w = ctx.tensor(arr(6, 6))
    dw = ctx.empty((6, 6))
    ex = g.CheckpointExecutor(ctx, "err")
    ex.add_linear("fc", w, None, "none", dw)

    class Boom(Exception):
        pass

    state = {"fail": "forward"}

    def fwd(call, x):
        if state["fail"] == "forward":
            raise Boom("python forward failed")
        if state["fail"] == "type":
            return 3
        if state["fail"] == "lib":
            g.add(x, ctx.empty((2,)))
        return g.relu(x)

    def bwd(call, dy, dx):
        if state["fail"] == "backward":
            raise Boom("python backward failed")
        g.relu_backward(dy, call.saved(0), out=dx)

    ex.add("act", lambda c, x: (c.save(x), fwd(c, x))[1], bwd)
    x = ctx.tensor(arr(3, 6))
    with pytest.raises(Boom) as e:
        ex.forward(x)
    assert "segment 'act'" in str(e.value.__cause__)
    state["fail"] = "type"
    with pytest.raises(TypeError):
        ex.forward(x)
    state["fail"] = "lib"
    with pytest.raises(g.ShapeMismatchError) as e:
        ex.forward(x)
    assert "segment 'act'" in str(e.value.__cause__) or "segment 'act'" in str(e.value)
    state["fail"] = "backward"
    y = ex.forward(x)
    with pytest.raises(Boom):
        ex.backward(ctx.ones(y.shape))
    state["fail"] = None
    packed, phases = [], []
    ex.set_saved_tensor_hooks(lambda t: (packed.append(t.shape), t.numpy(copy=True))[1],
                              lambda a: ctx.tensor(a), lambda a: None)
    ex.set_segment_hook(lambda seg, name, phase, post: phases.append((name, phase, post)))
    y = ex.forward(x)
    dx = ex.backward(ctx.ones(y.shape), input_grad=True)
    assert packed and ("act", "backward", True) in phases
    st = ex.stats()
    assert st["packed_tensors"] == st["unpacked_tensors"] == len(packed)
    ex.set_saved_tensor_hooks(None)
    ex.set_segment_hook(None)
    ex.set_grad_ready_callback(None)
    ex.set_offload(True, 0)
    ex.set_offload(False)
    ex.set_policy("every_k", 1)
    ex.set_policy("budget", 1 << 30)
    with pytest.raises(g.InvalidArgumentError):
        ex.set_policy("magic")
    ex2 = g.CheckpointExecutor(ctx, "res")
    with ex2.residual("block"):
        ex2.add_layer_norm("ln", ctx.ones((6,)), ctx.zeros((6,)), 1e-5, ctx.empty((6,)), ctx.empty((6,)))
        ex2.add_dropout("drop", 0.0)
    assert len(ex2) == 1
    y2 = ex2.forward(x)
    assert y2.shape == x.shape
    with pytest.raises(g.InvalidArgumentError) as e:
        g.C.gpucore_ckpt_end_residual(ex2.handle)  # no block open
    assert "no residual block is open" in str(e.value)
    conv_ex = g.CheckpointExecutor(ctx, "conv")
    conv_ex.add_conv2d("c", ctx.tensor(arr(2, 3, 3, 3)), None, ctx.empty((2, 3, 3, 3)), padding=1,
                       activation="relu")
    yc = conv_ex.forward(ctx.tensor(arr(1, 3, 4, 4)))
    assert yc.shape == (1, 2, 4, 4)
    conv_ex.backward(ctx.ones(yc.shape))
    del ex, ex2, conv_ex
    gc.collect()


def test_context_close_releases_library_objects():
    c = g.Context("cpu")
    p = c.tensor(arr(4))
    opt = g.AdamW([p])
    sc = g.LossScaler(c)
    ex = g.CheckpointExecutor(c)
    (comm,) = g.Communicator.local([c])
    c.close()
    for obj in (opt, sc, ex, comm):
        with pytest.raises(g.InvalidHandleError):
            obj.handle
