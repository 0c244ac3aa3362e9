#!/usr/bin/env python3
"""torch_conv.py — the PyTorch peer of bench_conv: torch convolution forward, backward-data and
backward-filter on bench_conv's shapes and case names, so gpucore-bench joins them.
On a GPU (when torch sees one and GPUCORE_DEVICE is not cpu): cudnn.benchmark on, channels_last
for NHWC, CUDA-event timing, median of 20 after 3 warm-up calls, TF32 off for f32 as in
libgpucore's default. On the CPU: the shapes bench_conv times on the CPU (--quick: its short
list; --full: all of them) at batch 32, torch using every core, wall-clock timing with as many
timed calls as bench_conv makes (1 --quick, 3 --full; median) after one warm-up call.
Each row carries the torch version ("peer_version"). Prints nothing and exits 0 without PyTorch.

    torch_conv.py [--json] [--quick|--full]
"""
import json
import os
import sys
import time

from torch_ops import import_torch  # the same torch look-up (Debian's dist-packages too)

SHAPES = [  # name, C, H, W, K, R, stride, pad, groups, in the CPU's --quick list (bench_conv.c's table)
    ("conv1_7x7s2", 3, 224, 224, 64, 7, 2, 3, 1, 0),
    ("res2_1x1_64-256", 64, 56, 56, 256, 1, 1, 0, 1, 1),
    ("res2_3x3_64", 64, 56, 56, 64, 3, 1, 1, 1, 0),
    ("res3_3x3s2_128", 128, 56, 56, 128, 3, 2, 1, 1, 0),
    ("res3_3x3_128", 128, 28, 28, 128, 3, 1, 1, 1, 0),
    ("res4_3x3_256", 256, 14, 14, 256, 3, 1, 1, 1, 1),
    ("res4_1x1_1024-256", 1024, 14, 14, 256, 1, 1, 0, 1, 0),
    ("res5_3x3_512", 512, 7, 7, 512, 3, 1, 1, 1, 0),
    ("mbv2_dw3x3_144", 144, 56, 56, 144, 3, 1, 1, 144, 1),
]


def wanted_on_cpu(full, dname, groups, c, quick_flag):
    """bench_conv's CPU selection: --full all; --quick its short list, f32 dense, bf16 for res4 and depthwise."""
    if full:
        return True
    if not quick_flag:
        return False
    if dname == "f32" and groups > 1:
        return False
    return not (dname == "bf16" and groups == 1 and c != 256)


def timer(torch, cuda):
    """Milliseconds of one call of fn."""
    if cuda:
        def run(fn):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            fn()
            e1.record()
            e1.synchronize()
            return e0.elapsed_time(e1)
    else:
        def run(fn):
            t0 = time.perf_counter()
            fn()
            return (time.perf_counter() - t0) * 1e3
    return run


def main():
    torch = import_torch()
    if torch is None:
        return 0
    cuda = torch.cuda.is_available() and os.environ.get("GPUCORE_DEVICE", "auto").split(":")[0] != "cpu"
    full = "--full" in sys.argv
    if cuda:
        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.allow_tf32 = False
        device, batch, warm, reps = "cuda", 256 if full else 32, 3, 20
    else:
        torch.set_num_threads(os.cpu_count() or 1)
        device, batch, warm, reps = "cpu", 32, 1, 3 if full else 1
    print(f"torch_conv: torch {torch.__version__} ({os.path.dirname(torch.__file__)}) on {device}, batch {batch}",
          file=sys.stderr)
    time_ms = timer(torch, cuda)
    grad = torch.nn.grad
    for dname, dt, nhwc in (("f32", torch.float32, False), ("bf16", torch.bfloat16, True)):
        fmt = torch.channels_last if nhwc else torch.contiguous_format
        for name, c, h, w, k, r, stride, pad, groups, quick in SHAPES:
            if not cuda and not wanted_on_cpu(full, dname, groups, c, quick):
                continue
            case = f"{name} b{batch} {dname} {'NHWC' if nhwc else 'NCHW'}"
            try:
                x = torch.randn(batch, c, h, w, device=device, dtype=dt).to(memory_format=fmt)
                wt = (0.1 * torch.randn(k, c // groups, r, r, device=device, dtype=dt)).to(memory_format=fmt)
                y = torch.nn.functional.conv2d(x, wt, None, stride, pad, 1, groups)
                dy = torch.randn_like(y).to(memory_format=fmt)
            except RuntimeError as e:
                print(f"torch_conv: {case}: {e}", file=sys.stderr)
                continue
            ops = {
                "fwd": lambda: torch.nn.functional.conv2d(x, wt, None, stride, pad, 1, groups),
                "bwd_data": lambda: grad.conv2d_input(x.shape, wt, dy, stride, pad, 1, groups),
                "bwd_filter": lambda: grad.conv2d_weight(x, wt.shape, dy, stride, pad, 1, groups),
            }
            flops = 2.0 * batch * k * y.shape[2] * y.shape[3] * (c // groups) * r * r
            for op, fn in ops.items():
                try:
                    with torch.no_grad():
                        for _ in range(warm):
                            fn()
                        if cuda:
                            torch.cuda.synchronize()
                        times = sorted(time_ms(fn) for _ in range(reps))
                except RuntimeError as e:
                    print(f"torch_conv: {case} {op}: {e}", file=sys.stderr)
                    continue
                ms = times[len(times) // 2]
                for metric, value, unit in ((f"{op}_ms", ms, "ms"), (f"{op}_TFLOP/s", flops / (ms * 1e-3) / 1e12, "TFLOP/s")):
                    print(json.dumps({"bench": "conv", "case": case, "device": "cuda:0" if cuda else "cpu", "metric": metric,
                                      "value": round(value, 6), "unit": unit, "peer": "torch",
                                      "peer_version": torch.__version__}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
