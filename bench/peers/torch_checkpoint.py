#!/usr/bin/env python3
"""Peer for bench_checkpoint: torch.utils.checkpoint (non-reentrant) on the same
models — a deep MLP of equal Linear layers with ReLU between (24 layers --quick,
48 default, 96 --full; width 1024, batch 4096 on the GPU) and a ResNet-style CNN
(stem conv + residual blocks of conv-ReLU-conv; 64 channels, 56x56, batch 64).
Policies: keep_all (plain autograd), recompute_all (each layer checkpointed),
every_4 and sqrt_n (torch.utils.checkpoint.checkpoint_sequential with n/k
segments). Per policy: step time (forward + backward, CUDA events, median of 5
after a warm-up) and peak allocated bytes (torch.cuda.max_memory_allocated),
as JSON lines in the bench contract with "peer":"keep_all" and case names that
match bench_checkpoint's GPU cases. Prints nothing when PyTorch or a GPU is absent.
"""
import argparse
import json
import math
import statistics
import sys

try:
    import torch
    import torch.nn as nn
    from torch.utils.checkpoint import checkpoint, checkpoint_sequential
except ImportError:  # no PyTorch here: nothing to compare with
    sys.exit(0)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.a = nn.Conv2d(c, c, 3, padding=1)
        self.b = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return x + self.b(torch.relu(self.a(x)))


def mlp(layers, width):
    mods = []
    for i in range(layers):
        mods.append(nn.Linear(width, width))
        if i + 1 < layers:
            mods.append(nn.ReLU())
    # group Linear+ReLU as one segment, as the library's linear segment is
    return nn.Sequential(*[nn.Sequential(*mods[i:i + 2]) for i in range(0, len(mods), 2)])


def cnn(blocks, c):
    return nn.Sequential(nn.Sequential(nn.Conv2d(3, c, 3, padding=1), nn.ReLU()), *[Block(c) for _ in range(blocks)])


def run(model, x, dy, policy):
    n = len(model)
    if policy == "keep_all":
        y = model(x)
    elif policy == "recompute_all":
        y = x
        for m in model:
            y = checkpoint(m, y, use_reentrant=False)
    else:
        k = 4 if policy == "every_4" else math.ceil(math.sqrt(n))
        y = checkpoint_sequential(model, max(1, math.ceil(n / k)), x, use_reentrant=False)
    y.backward(dy)


def measure(model, x, dy, policy, reps):
    run(model, x, dy, policy)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        run(model, x, dy, policy)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times), torch.cuda.max_memory_allocated(), torch.cuda.max_memory_allocated() - base


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        return
    mode = 0 if args.quick else 2 if args.full else 1
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda:0"
    layers = (24, 48, 96)[mode]
    blocks = (4, 8, 16)[mode]
    cases = [
        ("mlp%d_w1024_b4096" % layers, mlp(layers, 1024), (4096, 1024), (4096, 1024)),
        ("resnet%d_c64_56x56_b64" % (2 * blocks + 1), cnn(blocks, 64), (64, 3, 56, 56), (64, 64, 56, 56)),
    ]
    for name, model, xs, ys in cases:
        model = model.to(dev)
        x = torch.randn(*xs, device=dev)
        dy = torch.randn(*ys, device=dev)
        res = {}
        for policy in ("keep_all", "recompute_all", "every_4", "sqrt_n"):
            res[policy] = measure(model, x, dy, policy, 5)
        for policy, (ms, peak, extra) in res.items():
            k_ms, k_peak, k_extra = res["keep_all"]
            for metric, v, pv, unit, sp in (
                ("step_ms", ms, k_ms, "ms", k_ms / ms),
                ("peak_allocated", peak, k_peak, "bytes", k_peak / peak),
                ("activation_peak", extra, k_extra, "bytes", k_extra / extra if extra else 0),
            ):
                print(json.dumps({"bench": "checkpoint", "case": "torch:%s/%s" % (name, policy), "device": dev,
                                  "metric": metric, "value": v, "unit": unit, "peer": "keep_all",
                                  "peer_value": pv, "speedup": sp}))
        del model, x, dy
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
