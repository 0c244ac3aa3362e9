#!/usr/bin/env python3
"""numpy_matmul.py — the CPU peer of bench_matmul: numpy's matmul (OpenBLAS) on the
same cases, printing the same JSON lines (DESIGN.md contract) so gpucore-bench can
join them. f16 and bf16 have no fast numpy GEMM, so those cases are timed as numpy
computes them: f16 natively (slow path), bf16 skipped (numpy has no bf16).

    numpy_matmul.py [--json] [--quick|--full]
"""
import json
import sys
import time

import numpy as np


def cases():
    out = []
    for dt in ("f32", "f16"):
        for s in (256, 512, 1024):
            out.append((dt, 1, s, s, s, False))
        out.append((dt, 1, 512, 3072, 768, False))
        out.append((dt, 8, 256, 256, 64, False))
    out.append(("f32", 1, 512, 3072, 768, True))
    return out


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


def main():
    as_json = "--json" in sys.argv
    rng = np.random.default_rng(0)
    for dt, b, m, n, k, fused in cases():
        if dt == "f16" and m * n * k > 512 ** 3:
            continue  # numpy's f16 matmul is a scalar loop: too slow to time at this size
        npdt = np.float32 if dt == "f32" else np.float16
        shape = (b, m, k) if b > 1 else (m, k)
        a = rng.standard_normal(shape).astype(npdt)
        w = (0.05 * rng.standard_normal((n, k))).astype(npdt)
        bias = rng.standard_normal(n).astype(npdt)
        wt = w.T
        def run():
            y = a @ wt
            if fused:
                y = gelu_tanh(y + bias)
            return y
        run()
        run()
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            run()
            times.append(time.perf_counter() - t0)
        times.sort()
        med = times[len(times) // 2]
        rate = 2.0 * b * m * n * k / med / 1e9
        dims = f"{b}x{m}x{n}x{k}" if b > 1 else f"{m}x{n}x{k}"
        name = f"{dt} {dims}" + (" linear+bias+gelu" if fused else "")
        if as_json:
            print(json.dumps({"bench": "matmul", "case": name, "device": "cpu", "metric": "GFLOP/s",
                              "value": round(rate, 3), "unit": "GFLOP/s", "peer": "numpy"}))
        else:
            print(f"{name:40s} {rate:10.3f} GFLOP/s (numpy)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
