#!/usr/bin/env python3
"""torch_attention.py — the peer of bench_attention: torch.nn.functional.scaled_dot_product_attention
forward, backward and forward+backward on bench_attention's cases (same case names and options, same
dense-equivalent FLOP count: forward 4·B·H·S²·D, backward 2.5× that, halved when causal, forward+backward
over the sum of the two medians), on the GPU when one is usable (CUDA-event
timing, torch.cuda.max_memory_allocated for the peak beyond the inputs), else on the CPU (wall-clock
timing; no peak figure). Medians after warm-up. Prints bench_attention's JSON lines so gpucore-bench
joins them. Prints nothing and exits 0 without PyTorch.

    torch_attention.py [--json] [--quick|--full] [--device cpu|cuda] [--dtype f32|f16|bf16]
                       [--seqs S1,S2,...] [--batch B] [--heads H]
"""
import json
import sys
import time


def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv[:-1] else default


def main():
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return 0
    full = "--full" in sys.argv
    dev = arg("--device", "cuda" if torch.cuda.is_available() else "cpu")
    if dev.startswith("cuda") and not torch.cuda.is_available():
        return 0
    dts = arg("--dtype", "f32")
    dt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[dts]
    cpu = dev == "cpu"
    if not cpu:
        torch.backends.cuda.matmul.allow_tf32 = False
    seqs = [128, 256, 512, 1024][: 4 if full else 3] if cpu else [512, 1024, 2048, 4096, 8192][: 5 if full else 3]
    seqs = [int(x) for x in arg("--seqs", ",".join(map(str, seqs))).split(",")]
    B, H = (1, 4) if cpu else (4, 16)
    B, H = int(arg("--batch", B)), int(arg("--heads", H))
    reps = 3 if cpu else 10
    device_name = "cpu" if cpu else torch.cuda.get_device_name()

    def timed(fn):
        fn()
        times = []
        for _ in range(reps):
            if cpu:
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
            else:
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                fn()
                e1.record()
                e1.synchronize()
                times.append(e0.elapsed_time(e1))
        return sorted(times)[len(times) // 2]

    for s in seqs:
        for d in (64, 128):
            for causal in (False, True):
                q, k, v = (torch.rand(B, H, s, d, device=dev, dtype=dt, requires_grad=True) * 2 - 1 for _ in range(3))
                q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
                dout = torch.rand(B, H, s, d, device=dev, dtype=dt)
                case = f"b{B} h{H} s{s} d{d} {'causal' if causal else 'full'} {dts}"
                flops = 4.0 * B * H * s * s * d * (0.5 if causal else 1.0)
                if not cpu:
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                    base = torch.cuda.memory_allocated()
                with torch.no_grad():
                    fms = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
                out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                bms = timed(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True))
                rows = [("fwd", flops / (fms * 1e-3) / 1e12, "TFLOP/s"), ("bwd", 2.5 * flops / (bms * 1e-3) / 1e12, "TFLOP/s"),
                        ("fwd+bwd", 3.5 * flops / ((fms + bms) * 1e-3) / 1e12, "TFLOP/s")]
                if not cpu:
                    rows.append(("peak_extra", (torch.cuda.max_memory_allocated() - base) / 2 ** 20, "MiB"))
                for metric, value, unit in rows:
                    r = {"bench": "attention", "case": case, "device": device_name, "metric": metric,
                         "value": round(value, 4), "unit": unit, "peer": "torch sdpa"}
                    print(json.dumps(r) if "--json" in sys.argv else "%-40s %-10s %12.4f %s (torch)" % (case, metric, value, unit))
                del out
    return 0


if __name__ == "__main__":
    sys.exit(main())
