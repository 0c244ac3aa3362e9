#!/usr/bin/env python3
"""torch_matmul.py — the GPU peer of bench_matmul: torch.matmul in the same
linear-layer layout (x @ W.T), and the unfused F.linear + gelu(tanh) for the fused
case, timed with CUDA events (median after warm-up). Prints bench_matmul's JSON
lines so gpucore-bench joins them. Exits quietly without a GPU or PyTorch.
TF32 is off for f32, as in libgpucore's default.

    torch_matmul.py [--json] [--quick|--full]
"""
import json
import sys


def main():
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("torch_matmul: PyTorch is not installed; skipped", file=sys.stderr)
        return 0
    if not torch.cuda.is_available():
        print("torch_matmul: no CUDA device; skipped", file=sys.stderr)
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    as_json = "--json" in sys.argv
    full = "--full" in sys.argv
    dts = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
    squares = [1024, 2048, 4096, 8192] + ([16384] if full else [])
    for name, dt in dts.items():
        cases = [(1, s, s, s, False) for s in squares]
        cases += [(1, 8192, 3072, 768, False), (1, 8192, 768, 3072, False), (32, 1024, 1024, 64, False),
                  (1, 8192, 3072, 768, True)]
        for b, m, n, k, fused in cases:
            shape = (b, m, k) if b > 1 else (m, k)
            a = torch.randn(shape, device="cuda", dtype=dt)
            w = 0.05 * torch.randn((n, k), device="cuda", dtype=dt)
            bias = torch.randn(n, device="cuda", dtype=dt)
            def run():
                if fused:
                    return F.gelu(F.linear(a, w, bias), approximate="tanh")
                return torch.matmul(a, w.t())
            for _ in range(3):
                run()
            torch.cuda.synchronize()
            times = []
            for _ in range(20):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                run()
                e1.record()
                e1.synchronize()
                times.append(e0.elapsed_time(e1))
            times.sort()
            ms = times[len(times) // 2]
            rate = 2.0 * b * m * n * k / (ms * 1e-3) / 1e12
            dims = f"{b}x{m}x{n}x{k}" if b > 1 else f"{m}x{n}x{k}"
            case = f"{name} {dims}" + (" linear+bias+gelu" if fused else "")
            if as_json:
                print(json.dumps({"bench": "matmul", "case": case, "device": "cuda:0", "metric": "TFLOP/s",
                                  "value": round(rate, 3), "unit": "TFLOP/s", "peer": "torch"}))
            else:
                print(f"{case:40s} {rate:10.3f} TFLOP/s (torch)")
            del a, w, bias
    return 0


if __name__ == "__main__":
    sys.exit(main())
