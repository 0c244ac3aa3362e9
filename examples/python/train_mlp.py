#!/usr/bin/env python3
"""Train a small MLP classifier from Python with libgpucore: mixed precision and
gradient checkpointing, no autograd, no host synchronisation inside a step.

* Parameters and activations are bf16; AdamW keeps f32 master weights (and f32
  moments) and writes the rounded bf16 parameters back.
* Dynamic loss scaling: the loss gradient is the scaler's device-resident scale;
  gradients are unscaled, clipped, and the step is skipped on overflow.
* The model runs through the checkpoint executor: built-in linear segments plus
  a Python-defined LayerNorm segment (CFUNCTYPE callbacks), planned with the
  sqrt(n) policy (recompute instead of keeping activations).

Data: a synthetic 10-class problem (labels from a random linear teacher), so the
example needs no download.

    GPUCORE_LIBRARY=build/src/libgpucore.so PYTHONPATH=python \\
        python3 examples/python/train_mlp.py --steps 200 --device cpu
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Dict, List, Optional

import numpy as np

import gpucore as g


def build_model(ctx: g.Context, dims: List[int], seed: int) -> Dict[str, g.Tensor]:
    """bf16 parameters (Kaiming-uniform-like init) and bf16 gradient buffers of the same shapes."""
    params: Dict[str, g.Tensor] = {}
    for i, (fan_in, fan_out) in enumerate(zip(dims[:-1], dims[1:])):
        bound = 1.0 / math.sqrt(fan_in)
        params["fc%d.weight" % i] = ctx.empty((fan_out, fan_in), "bfloat16").uniform_(-bound, bound, seed=seed + i)
        params["fc%d.bias" % i] = ctx.zeros((fan_out,), "bfloat16")
    params["ln.weight"] = ctx.ones((dims[1],), "bfloat16")
    params["ln.bias"] = ctx.zeros((dims[1],), "bfloat16")
    return params


def build_executor(ctx: g.Context, p: Dict[str, g.Tensor], grads: Dict[str, g.Tensor], nlayers: int,
                   policy: str) -> g.CheckpointExecutor:
    ex = g.CheckpointExecutor(ctx, "mlp")
    ex.add_linear("fc0", p["fc0.weight"], p["fc0.bias"], "gelu", grads["fc0.weight"], grads["fc0.bias"])

    # A Python-defined segment: LayerNorm with its own backward.
    gamma, beta = p["ln.weight"], p["ln.bias"]
    dgamma, dbeta = grads["ln.weight"], grads["ln.bias"]

    def ln_forward(call: g.CheckpointCall, x: g.Tensor) -> g.Tensor:
        y, mean, rstd = g.layer_norm(x, weight=gamma, bias=beta, eps=1e-5, return_stats=True)
        call.save(x)
        call.save(mean)
        call.save(rstd)
        return y

    def ln_backward(call: g.CheckpointCall, dy: g.Tensor, dx: Optional[g.Tensor]) -> None:
        dxi, dg, db = g.layer_norm_backward(dy, call.saved(0), call.saved(1), call.saved(2), gamma,
                                            input_grad=dx is not None)
        dgamma.copy_(dg)
        dbeta.copy_(db)
        if dx is not None:
            dx.copy_(dxi)
        call.grad_ready(0, dgamma)
        call.grad_ready(1, dbeta)

    ex.add("ln", ln_forward, ln_backward)
    for i in range(1, nlayers - 1):
        ex.add_linear("fc%d" % i, p["fc%d.weight" % i], p["fc%d.bias" % i], "relu", grads["fc%d.weight" % i],
                      grads["fc%d.bias" % i])
    last = nlayers - 1
    ex.add_linear("fc%d" % last, p["fc%d.weight" % last], p["fc%d.bias" % last], "none",
                  grads["fc%d.weight" % last], grads["fc%d.bias" % last])
    ex.set_policy(policy)
    return ex


def make_data(n: int, features: int, classes: int, seed: int):
    rng = np.random.default_rng(seed)
    teacher = rng.standard_normal((features, classes))
    x = rng.standard_normal((n, features)).astype(np.float32)
    y = (x @ teacher).argmax(1).astype(np.int64)
    return x, y


def main(argv: Optional[List[str]] = None) -> Dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default=None, help="cpu, cuda, cuda:N (default: GPUCORE_DEVICE / auto)")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4, help="linear layers (>= 2)")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--policy", default="sqrt_n", choices=sorted(g.checkpoint.POLICIES))
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save", default=None, help="write a resumable checkpoint here at the end")
    args = ap.parse_args(argv)
    if args.layers < 2:
        ap.error("--layers must be >= 2")

    features, classes = 32, 10
    ctx = g.Context(args.device)
    dims = [features] + [args.hidden] * (args.layers - 1) + [classes]
    params = build_model(ctx, dims, args.seed)
    grads = {k: ctx.zeros(v.shape, v.dtype) for k, v in params.items()}
    names = list(params)
    plist, glist = [params[k] for k in names], [grads[k] for k in names]

    opt = g.AdamW(plist, lr=args.lr, weight_decay=1e-4)
    scaler = g.LossScaler(ctx, init_scale=2.0 ** 12, growth_interval=100)
    ex = build_executor(ctx, params, grads, args.layers, args.policy)

    xs, ys = make_data(args.batch * 16, features, classes, args.seed + 1)
    batches = []
    for i in range(16):
        xb = g.cast(ctx.tensor(xs[i * args.batch:(i + 1) * args.batch]), "bfloat16")
        yb = ctx.tensor(ys[i * args.batch:(i + 1) * args.batch])
        batches.append((xb, yb))

    print("gpucore %s on %s: MLP %s, bf16 params + f32 AdamW masters, loss scaling, checkpoint policy %s"
          % (g.version_string(), ctx.device, "-".join(map(str, dims)), args.policy))
    g.reset_peak_memory_stats(ctx)
    losses: List[float] = []
    t0 = time.perf_counter()
    seen = 0
    for step in range(1, args.steps + 1):
        xb, yb = batches[step % len(batches)]
        logits = ex.forward(xb)
        loss = g.cross_entropy(logits, yb)                                  # 0-d f32
        dlogits = g.cross_entropy_backward(logits, yb, scaler.scale_tensor)  # d(loss * scale)
        ex.backward(dlogits)                                                # fills grads (bf16)
        scaler.unscale_(glist)
        g.clip_grad_norm_(glist, 1.0)
        opt.step(glist, found_inf=scaler.found_inf)
        scaler.update()
        seen += args.batch
        if step % args.log_every == 0 or step == 1 or step == args.steps:
            lv = loss.item()  # the only host sync: reading the loss to print it
            losses.append(lv)
            dt = time.perf_counter() - t0
            print("step %5d  loss %.4f  scale %g  %.0f samples/s" % (step, lv, scaler.scale, seen / dt))
    ctx.synchronize()
    elapsed = time.perf_counter() - t0
    st = ex.stats()
    peak = g.max_memory_allocated(ctx)
    acc = float((g.argmax(ex.forward(batches[0][0]), 1).numpy() == batches[0][1].numpy()).mean())
    ex.reset()
    print("done: %d steps in %.2fs, %.0f samples/s; final loss %.4f (first %.4f); train accuracy %.3f"
          % (args.steps, elapsed, seen / elapsed, losses[-1], losses[0], acc))
    print("peak memory %.2f MiB allocated; checkpointing plan %s held %.1f KiB of activations vs %.1f KiB "
          "keep-all (%d segment recomputes per step)"
          % (peak / 2 ** 20, "/".join(ex.plan()), st["held_bytes"] / 1024, st["keep_all_bytes"] / 1024,
             st["recompute_runs"]))
    if args.save:
        g.save_checkpoint(args.save, params, opt, scaler)
        print("checkpoint written to", args.save)
    result = {"first_loss": losses[0], "last_loss": losses[-1], "samples_per_s": seen / elapsed,
              "peak_bytes": float(peak), "accuracy": acc}
    ex.close()
    opt.close()
    scaler.close()
    ctx.close()
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
