#!/usr/bin/env python3
"""torch_conv.py — the GPU peer of bench_conv: torch convolution (cudnn.benchmark on,
channels_last for NHWC) forward, backward-data and backward-filter on the same shapes,
timed with CUDA events (median after warm-up). Prints bench_conv's JSON lines so
gpucore-bench joins them. Prints nothing and exits 0 without PyTorch or a GPU.
TF32 is off for f32, as in libgpucore's default.

    torch_conv.py [--json] [--quick|--full]
"""
import json
import sys

SHAPES = [  # name, C, H, W, K, R, stride, pad, groups  (bench_conv.c's table)
    ("conv1_7x7s2", 3, 224, 224, 64, 7, 2, 3, 1),
    ("res2_1x1_64-256", 64, 56, 56, 256, 1, 1, 0, 1),
    ("res2_3x3_64", 64, 56, 56, 64, 3, 1, 1, 1),
    ("res3_3x3s2_128", 128, 56, 56, 128, 3, 2, 1, 1),
    ("res3_3x3_128", 128, 28, 28, 128, 3, 1, 1, 1),
    ("res4_3x3_256", 256, 14, 14, 256, 3, 1, 1, 1),
    ("res4_1x1_1024-256", 1024, 14, 14, 256, 1, 1, 0, 1),
    ("res5_3x3_512", 512, 7, 7, 512, 3, 1, 1, 1),
    ("mbv2_dw3x3_144", 144, 56, 56, 144, 3, 1, 1, 144),
]


def main():
    try:
        import torch
    except ImportError:
        return 0
    if not torch.cuda.is_available():
        return 0
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    full = "--full" in sys.argv
    batch = 256 if full else 32
    grad = torch.nn.grad
    for dname, dt, nhwc in (("f32", torch.float32, False), ("bf16", torch.bfloat16, True)):
        fmt = torch.channels_last if nhwc else torch.contiguous_format
        for name, c, h, w, k, r, stride, pad, groups in SHAPES:
            x = torch.randn(batch, c, h, w, device="cuda", dtype=dt).to(memory_format=fmt)
            wt = (0.1 * torch.randn(k, c // groups, r, r, device="cuda", dtype=dt)).to(memory_format=fmt)
            y = torch.nn.functional.conv2d(x, wt, None, stride, pad, 1, groups)
            dy = torch.randn_like(y).to(memory_format=fmt)
            ops = {
                "fwd": lambda: torch.nn.functional.conv2d(x, wt, None, stride, pad, 1, groups),
                "bwd_data": lambda: grad.conv2d_input(x.shape, wt, dy, stride, pad, 1, groups),
                "bwd_filter": lambda: grad.conv2d_weight(x, wt.shape, dy, stride, pad, 1, groups),
            }
            case = f"{name} b{batch} {dname} {'NHWC' if nhwc else 'NCHW'}"
            flops = 2.0 * batch * k * y.shape[2] * y.shape[3] * (c // groups) * r * r
            for op, fn in ops.items():
                for _ in range(3):
                    fn()
                torch.cuda.synchronize()
                times = []
                for _ in range(20):
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    e0.record()
                    fn()
                    e1.record()
                    e1.synchronize()
                    times.append(e0.elapsed_time(e1))
                times.sort()
                ms = times[len(times) // 2]
                for metric, value, unit in ((f"{op}_ms", ms, "ms"), (f"{op}_TFLOP/s", flops / (ms * 1e-3) / 1e12, "TFLOP/s")):
                    print(json.dumps({"bench": "conv", "case": case, "device": "cuda:0", "metric": metric,
                                      "value": round(value, 6), "unit": unit, "peer": "torch"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
