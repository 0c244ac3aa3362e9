#!/usr/bin/env python3
"""Peer for bench_optim: torch.optim.AdamW(fused=True) on the GPU, same cases
(8 f32 tensors per step, 1M params upward x4), same timing (CUDA events around
R steps after a warm-up, median of 5 runs). Prints JSON lines in the bench
contract with "device":"cuda:0" and "case" names matching bench_optim, so a
driver can pair them. Needs a GPU and PyTorch; not runnable on CPU-only machines."""
import argparse
import json
import statistics
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-params", type=int, default=0)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", action="store_true", help="JSON lines (always; kept for the driver's calling convention)")
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="up to 256M parameters, as bench_optim --quick on a GPU")
    size.add_argument("--full", action="store_true", help="up to 1B parameters")
    args = ap.parse_args()
    if not args.max_params:
        args.max_params = 1 << (30 if args.full else 28)
    try:
        import torch
    except ImportError:  # no PyTorch here: nothing to compare with
        print("torch_optim: PyTorch is not installed; skipped", file=sys.stderr)
        return 0
    if not torch.cuda.is_available():
        print("torch_optim: no CUDA device; this peer runs on a GPU machine only", file=sys.stderr)
        return 0
    n = 1 << 20
    while n <= args.max_params:
        per = n // 8
        params = [torch.randn(per, device="cuda", requires_grad=True) for _ in range(8)]
        for p in params:
            p.grad = torch.randn_like(p)
        opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=1e-2, fused=True)
        opt.step()
        times = []
        for _ in range(5):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(args.reps):
                opt.step()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / args.reps)
        ms = statistics.median(times)
        total = per * 8
        case = "adamw_f32_%d" % total
        print(json.dumps({"bench": "optim", "case": case, "device": "cuda:0", "metric": "params_per_s",
                          "value": total / (ms * 1e-3), "unit": "params/s", "impl": "torch.optim.AdamW(fused=True)"}))
        print(json.dumps({"bench": "optim", "case": case, "device": "cuda:0", "metric": "bandwidth",
                          "value": 28.0 * total / (ms * 1e-3) / 1e9, "unit": "GB/s",
                          "impl": "torch.optim.AdamW(fused=True)"}), flush=True)
        del opt, params
        torch.cuda.empty_cache()
        n *= 4


if __name__ == "__main__":
    main()
