#!/usr/bin/env python3
"""Train an MLP classifier data-parallel with the ZeRO trainer (stages 0-3).

Each rank takes its 1/N of every global batch; gradients are reduce-scattered per layer
as soon as backward has produced them (one bucket per layer), each rank steps its shard
of the f32 AdamW state, and at --zero 3 a layer's parameters exist on a rank only while
it is gathered: just before its forward and again before its backward (the next layer
prefetched on the communicator's stream), released right after. Dynamic loss scaling
and global-norm clipping work across shards.

    GPUCORE_LIBRARY=build/src/libgpucore.so PYTHONPATH=python \\
        mpirun --allow-run-as-root --oversubscribe -np 2 \\
        python3 examples/python/train_mlp_zero.py --zero 3 --steps 100

Without mpirun it runs as a single rank. --check exits 1 unless the loss fell.
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import os
import sys
import time
from typing import Dict, List, Optional

import gpucore as g


def _load_sibling(name: str):
    """The other example in this folder (its synthetic data set), by path."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                     name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


make_data = _load_sibling("train_mlp").make_data  # the same teacher-labelled problem as train_mlp.py


class ShardedMLP:
    """Linear layers (ReLU between) whose parameters live in a ZeroTrainer: forward and
    backward ask it for each layer's weights, gathering and releasing them at stage 3."""

    def __init__(self, ctx: g.Context, comm: g.Communicator, dims: List[int], stage: int, lr: float, seed: int):
        params, units = [], []
        for i, (fan_in, fan_out) in enumerate(zip(dims[:-1], dims[1:])):
            bound = 1.0 / math.sqrt(fan_in)
            params += [ctx.empty((fan_out, fan_in), "float32").uniform_(-bound, bound, seed=seed + i),
                       ctx.zeros((fan_out,), "float32")]
            units += [i, i]
        self.layers = len(dims) - 1
        self.trainer = g.ZeroTrainer(comm, params, stage=stage, lr=lr, weight_decay=1e-4, units=units,
                                     max_grad_norm=1.0)
        self.bucket = [self.trainer.bucket_of(2 * i) for i in range(self.layers)]
        del params  # at stage 3 the trainer holds the only (sharded) copy

    def _weights(self, layer: int, prefetch: Optional[int]):
        t = self.trainer
        t.gather(self.bucket[layer])
        if prefetch is not None:
            t.gather(self.bucket[prefetch])  # overlaps this layer's compute
        return t.param(2 * layer), t.param(2 * layer + 1)

    def forward(self, x: g.Tensor):
        saved = []
        for i in range(self.layers):
            w, b = self._weights(i, i + 1 if i + 1 < self.layers else None)
            y = g.linear(x, w, b, "relu" if i + 1 < self.layers else "none")
            saved.append((x, y))
            del w, b
            self.trainer.release(self.bucket[i])
            x = y
        return x, saved

    def backward(self, dlogits: g.Tensor, saved) -> None:
        t = self.trainer
        dy = dlogits
        for i in reversed(range(self.layers)):
            x, y = saved[i]
            if i + 1 < self.layers:
                dy = g.relu_backward(dy, y)
            w, _ = self._weights(i, i - 1 if i > 0 else None)
            dx, dw, db = g.linear_backward(dy, x, w, input_grad=i > 0)
            del w
            for k, grad in ((2 * i, dw), (2 * i + 1, db)):
                buf = t.grad(k)
                buf.copy_(grad)
                del buf  # stages 2/3: the bucket's full gradient lives only until its reduce-scatter
                t.mark_ready(k)
            t.release(self.bucket[i])
            dy = dx


def main(argv: Optional[List[str]] = None) -> Dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--zero", type=int, default=1, choices=[0, 1, 2, 3], help="ZeRO stage")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch", type=int, default=256, help="global batch (split over the ranks)")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--save", default=None, help="write a sharded checkpoint with this prefix at the end")
    ap.add_argument("--check", action="store_true", help="exit 1 unless the loss fell by half")
    args = ap.parse_args(argv)

    ctx = g.Context(args.device)
    under_mpi = "OMPI_COMM_WORLD_SIZE" in os.environ or "PMI_SIZE" in os.environ
    comm = g.Communicator.from_mpi(ctx) if under_mpi else g.Communicator.local([ctx])[0]
    rank, size = comm.rank, comm.size
    if args.batch % size:
        ap.error("--batch must be a multiple of the rank count (%d)" % size)
    features, classes = 32, 10
    dims = [features] + [args.hidden] * (args.layers - 1) + [classes]
    model = ShardedMLP(ctx, comm, dims, args.zero, args.lr, args.seed)
    scaler = g.LossScaler(ctx, init_scale=2.0 ** 12, growth_interval=100)

    local = args.batch // size
    xs, ys = make_data(args.batch * 8, features, classes, args.seed + 1)
    batches = []
    for i in range(8):
        lo = i * args.batch + rank * local
        batches.append((ctx.tensor(xs[lo:lo + local]), ctx.tensor(ys[lo:lo + local])))
    if rank == 0:
        print("gpucore %s: MLP %s, ZeRO stage %d on %d rank(s), %d samples per rank per step"
              % (g.version_string(), "-".join(map(str, dims)), args.zero, size, local))
    g.reset_peak_memory_stats(ctx)
    losses: List[float] = []
    mean_loss = ctx.zeros((), "float32")
    t0 = time.perf_counter()
    for step in range(1, args.steps + 1):
        xb, yb = batches[step % len(batches)]
        logits, saved = model.forward(xb)
        loss = g.cross_entropy(logits, yb)
        dlogits = g.cross_entropy_backward(logits, yb, scaler.scale_tensor)
        del logits
        model.backward(dlogits, saved)
        del saved, dlogits
        model.trainer.step(scaler)  # averages over ranks: the gradient of the global-batch mean loss
        scaler.update()
        if step % args.log_every == 0 or step == 1 or step == args.steps:
            comm.all_reduce(loss, "avg", out=mean_loss)
            comm.wait()
            lv = mean_loss.item()
            losses.append(lv)
            if rank == 0:
                print("step %5d  loss %.4f  scale %g  %.1f ms/step" % (step, lv, scaler.scale,
                                                                     1e3 * (time.perf_counter() - t0) / step))
    ctx.synchronize()
    elapsed = time.perf_counter() - t0
    st = model.trainer.stats()
    peak = g.max_memory_allocated(ctx)
    print("rank %d/%d: stage %d holds params %d B, grads %d B, optimizer state %d B (shard of %d of %d "
          "elements); peak allocated %.2f MiB; %.1f ms/step"
          % (rank, size, args.zero, st["param_bytes"], st["grad_bytes"], st["state_bytes"], st["shard_numel"],
             st["numel"], peak / 2 ** 20, 1e3 * elapsed / args.steps), flush=True)
    if args.save:
        model.trainer.save_sharded(args.save, scaler)
        if rank == 0:
            print("sharded checkpoint written to %s.rank*.safetensors (+ index.json)" % args.save)
    result = {"first_loss": losses[0], "last_loss": losses[-1], "ms_per_step": 1e3 * elapsed / args.steps,
              "peak_bytes": float(peak), "state_bytes": float(st["state_bytes"])}
    model.trainer.close()
    scaler.close()
    comm.close()
    ctx.close()
    if args.check and not result["last_loss"] < 0.5 * result["first_loss"]:
        print("rank %d: the loss did not fall by half (%.4f -> %.4f)" % (rank, losses[0], losses[-1]))
        sys.exit(1)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
