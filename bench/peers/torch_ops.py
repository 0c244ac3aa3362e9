#!/usr/bin/env python3
"""torch_ops.py — libgpucore's CPU backend against PyTorch on the CPU, side by side in one
process: the same shapes through gpucore's Python API and through torch (same thread count),
for the op cases (elementwise, reductions, row ops, matmul, conv, AdamW, and the
per-op Python overhead). Prints one JSON line per case (DESIGN.md's contract: value = our
milliseconds, peer "torch-cpu", peer_value = torch's, speedup = torch/ours, > 1: we are ahead;
paired_speedup = the median of torch/ours over batch pairs run back to back).

Each side runs its op in a batch of calls, then (ours) one synchronize; the figure is the median
over batches of the per-call time, after a warm-up, the two sides' batches alternating. Runs only on the CPU device; exits quietly
without PyTorch (Debian's python3-torch is looked for in /usr/lib/python3/dist-packages too).
The library is $GPUCORE_LIBRARY when set, else the checkout's own build (build-release/, then
build/: src/libgpucore.so), else wherever the binding finds one; stderr names it and torch's version.

    torch_ops.py [--json] [--quick|--full] [--only SUBSTRING] [--best] [--batches N] [--ours-only] [--settle-ms MS]

--best reports each side's fastest batch instead of the median (on a shared, loaded machine the
fastest batch is the one least disturbed by other processes); --batches sets the batch count.
--ours-only times only libgpucore's side (torch still builds the cases; peer_value is null), for
comparing one build of the library with another (bench/compare_builds.py). --settle-ms sets the
sleep before each batch (default 20; 0: batches back to back, as this script ran before it slept).
"""
import json
import os
import sys
import time


def import_torch():
    try:
        import torch
        return torch
    except ImportError:
        pass
    dist = "/usr/lib/python3/dist-packages"  # Debian's python3-torch, when this python is another build
    if os.path.isdir(os.path.join(dist, "torch")) and dist not in sys.path:
        sys.path.append(dist)
        try:
            import warnings
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                import torch
            return torch
        except Exception:  # noqa: BLE001  (a torch built for another python or numpy)
            return None
    return None


def locate_library():
    """Point the binding at this checkout's build unless $GPUCORE_LIBRARY already names a library."""
    if os.environ.get("GPUCORE_LIBRARY"):
        return
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    for build in ("build-release", "build"):
        lib = os.path.normpath(os.path.join(root, build, "src", "libgpucore.so"))
        if os.path.exists(lib):
            os.environ["GPUCORE_LIBRARY"] = lib
            return


def import_gpucore():
    locate_library()
    try:
        import gpucore
        return gpucore
    except ImportError:
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path.insert(0, os.path.join(here, "..", "..", "python"))
        import gpucore
        return gpucore


def calls_for(fn, sync, calls, budget_ms):
    """Run fn once (warm-up); the number of calls per batch that keeps a batch near budget_ms."""
    t0 = time.perf_counter()
    fn()
    sync()
    once = (time.perf_counter() - t0) * 1e3
    return max(1, min(calls, int(budget_ms / max(once, 1e-3)))), once


SETTLE_S = 0.02  # longer than libgomp's default spin (300,000 pauses: 3-10 ms)


def batch_ms(fn, sync, calls):
    if SETTLE_S:
        time.sleep(SETTLE_S)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - t0) * 1e3 / calls


def side_by_side(ours, theirs, sync, calls, batches, budget_ms, best=False):
    """Median (best: fastest) per-call ms of (ours, theirs), their batches alternating so that
    both sides see the same machine load, and the median over batch pairs of torch/ours (each
    pair ran back to back, so a slow spell of the machine cancels out of its ratio); a side
    whose single call takes seconds runs one batch. Each batch starts after SETTLE_S of sleep:
    torch and this library each bring an OpenMP runtime whose idle threads may spin for
    milliseconds after a parallel region (libgomp's default), and a batch that started while
    the other side's threads still spun would lose a core to them for its first calls."""
    co, once_o = calls_for(ours, sync, calls, budget_ms)
    if theirs is None:  # --ours-only
        to = sorted(batch_ms(ours, sync, co) for _ in range(batches if once_o < 25 * budget_ms else 1))
        return (to[0] if best else to[len(to) // 2]), None, None
    ct, once_t = calls_for(theirs, lambda: None, calls, budget_ms)
    to, tt, pairs = [], [], []
    for b in range(batches):
        o = t = None
        if b == 0 or once_o < 25 * budget_ms:
            o = batch_ms(ours, sync, co)
            to.append(o)
        if b == 0 or once_t < 25 * budget_ms:
            t = batch_ms(theirs, lambda: None, ct)
            tt.append(t)
        if o and t:
            pairs.append(t / o)
    to.sort()
    tt.sort()
    pairs.sort()
    paired = pairs[len(pairs) // 2] if pairs else 0.0
    if best:
        return to[0], tt[0], paired
    return to[len(to) // 2], tt[len(tt) // 2], paired


def cases(g, torch, ctx, full):
    """(name, ours, theirs, calls) per case; each side builds its own inputs of the same shape."""
    F = torch.nn.functional
    tdt = {"f32": torch.float32, "bf16": torch.bfloat16}
    gdt = {"f32": "float32", "bf16": "bfloat16"}
    n = (16 if full else 4) * 1024 * 1024
    R, Cc = 4096, 1024

    def gr(shape, dt="f32", seed=1, lo=-1.0, hi=1.0):
        return ctx.empty(shape, gdt[dt]).uniform_(lo, hi, seed=seed)

    def tr(shape, dt="f32", lo=-1.0, hi=1.0):
        return (torch.rand(shape, dtype=torch.float32) * (hi - lo) + lo).to(tdt[dt])

    out = []
    # elementwise
    for dt in ("f32", "bf16"):
        a, b, o = gr((n,), dt, 1), gr((n,), dt, 2), gr((n,), dt, 3)
        ta, tb, to = tr((n,), dt), tr((n,), dt), tr((n,), dt)
        out.append((f"add {dt} {n >> 20}M", lambda a=a, b=b, o=o: g.add(a, b, out=o),
                    lambda ta=ta, tb=tb, to=to: torch.add(ta, tb, out=to), 10))
    x, o = gr((n,)), gr((n,), seed=3)
    tx, to = tr((n,)), tr((n,))
    out.append((f"mul f32 {n >> 20}M", lambda: g.mul(x, x, out=o), lambda: torch.mul(tx, tx, out=to), 10))
    out.append((f"gelu erf f32 {n >> 20}M", lambda: g.gelu(x, out=o), lambda: torch.ops.aten.gelu.out(tx, out=to), 5))
    out.append((f"gelu tanh f32 {n >> 20}M", lambda: g.gelu(x, approximate="tanh", out=o),
                lambda: torch.ops.aten.gelu.out(tx, approximate="tanh", out=to), 5))
    out.append((f"silu f32 {n >> 20}M", lambda: g.silu(x, out=o), lambda: F.silu(tx), 5))
    out.append((f"exp f32 {n >> 20}M", lambda: g.exp(x, out=o), lambda: torch.exp(tx, out=to), 5))
    hb, thb = gr((n,), "bf16"), tr((n,), "bf16")
    out.append((f"cast f32->bf16 {n >> 20}M", lambda: g.cast(x, "bfloat16", out=hb), lambda: tx.to(torch.bfloat16), 10))
    # reductions
    m, tm = gr((R, Cc)), tr((R, Cc))
    out.append((f"sum rows f32 {R}x{Cc}", lambda: g.sum(m, dim=1), lambda: tm.sum(1), 10))
    out.append((f"sum cols f32 {R}x{Cc}", lambda: g.sum(m, dim=0), lambda: tm.sum(0), 10))
    out.append((f"sum all f32 {R}x{Cc}", lambda: g.sum(m), lambda: tm.sum(), 10))
    out.append((f"amax rows f32 {R}x{Cc}", lambda: g.amax(m, dim=1), lambda: tm.amax(1), 10))
    out.append((f"argmax rows f32 {R}x{Cc}", lambda: g.argmax(m, dim=1), lambda: tm.argmax(1), 10))
    mb, tmb = gr((R, Cc), "bf16"), tr((R, Cc), "bf16")
    out.append((f"sum rows bf16 {R}x{Cc}", lambda: g.sum(mb, dim=1), lambda: tmb.sum(1), 10))
    # row ops
    w, bb, tw, tbb = gr((Cc,)), gr((Cc,), seed=5), tr((Cc,)), tr((Cc,))
    so, tso = g.softmax(m), torch.softmax(tm, 1)
    dy, tdy = gr((R, Cc), seed=6), tr((R, Cc))
    out.append((f"softmax f32 {R}x{Cc}", lambda: g.softmax(m), lambda: torch.softmax(tm, 1), 5))
    out.append((f"log_softmax f32 {R}x{Cc}", lambda: g.log_softmax(m), lambda: torch.log_softmax(tm, 1), 5))
    out.append((f"softmax backward f32 {R}x{Cc}", lambda: g.softmax_backward(dy, so),
                lambda: torch.ops.aten._softmax_backward_data(tdy, tso, 1, torch.float32), 5))
    out.append((f"layer_norm f32 {R}x{Cc}", lambda: g.layer_norm(m, (Cc,), w, bb),
                lambda: F.layer_norm(tm, (Cc,), tw, tbb), 5))
    V, B = 32000, 128
    lg, tlg = gr((B, V), lo=-5, hi=5), tr((B, V), lo=-5, hi=5)
    tg = g.tensor([i * 7 % V for i in range(B)], "int64", device=ctx)
    ttg = torch.tensor([i * 7 % V for i in range(B)], dtype=torch.int64)
    tlg_r = tlg.clone().requires_grad_(True)
    out.append((f"cross_entropy fwd f32 {B}x{V}", lambda: g.cross_entropy(lg, tg), lambda: F.cross_entropy(tlg, ttg), 5))

    def torch_ce_bwd():
        tlg_r.grad = None
        F.cross_entropy(tlg_r, ttg).backward()
    out.append((f"cross_entropy fwd+bwd f32 {B}x{V}",
                lambda: (g.cross_entropy(lg, tg), g.cross_entropy_backward(lg, tg)),
                torch_ce_bwd, 5))
    # matmul / linear
    for dt in ("f32", "bf16"):
        xa, wa, ba = gr((512, 768), dt), gr((3072, 768), dt, 2, -0.05, 0.05), gr((3072,), dt, 3)
        txa, twa, tba = tr((512, 768), dt), tr((3072, 768), dt, -0.05, 0.05), tr((3072,), dt)
        out.append((f"linear {dt} 512x768->3072", lambda xa=xa, wa=wa: g.linear(xa, wa),
                    lambda txa=txa, twa=twa: F.linear(txa, twa), 3))
        out.append((f"linear+bias+gelu {dt} 512x768->3072", lambda xa=xa, wa=wa, ba=ba: g.linear(xa, wa, ba, "gelu"),
                    lambda txa=txa, twa=twa, tba=tba: F.gelu(F.linear(txa, twa, tba), approximate="tanh"), 3))
    sq, tsq = gr((1024, 1024)), tr((1024, 1024))
    out.append(("matmul f32 1024^3", lambda: g.matmul(sq, sq), lambda: torch.matmul(tsq, tsq), 3))
    # convolution (batch 1, NCHW)
    convs = [("conv 3x3 64ch 56x56", (1, 64, 56, 56), (64, 64, 3, 3), 1, 1, 1),
             ("conv 1x1 256->64 56x56", (1, 256, 56, 56), (64, 256, 1, 1), 1, 0, 1),
             ("conv depthwise 3x3 144ch 56x56", (1, 144, 56, 56), (144, 1, 3, 3), 1, 1, 144),
             ("conv stem 7x7/2 3->64 224x224", (1, 3, 224, 224), (64, 3, 7, 7), 2, 3, 1)]
    for name, xs, ws, st, pd, gp in convs:
        cx, cw, tcx, tcw = gr(xs), gr(ws, seed=2, lo=-0.1, hi=0.1), tr(xs), tr(ws, lo=-0.1, hi=0.1)
        out.append((name + " f32", lambda cx=cx, cw=cw, st=st, pd=pd, gp=gp: g.conv2d(cx, cw, None, st, pd, 1, gp),
                    lambda tcx=tcx, tcw=tcw, st=st, pd=pd, gp=gp: F.conv2d(tcx, tcw, None, st, pd, 1, gp), 3))
    # AdamW over 4 tensors of 1M
    ps = [gr((1 << 20,), seed=10 + i) for i in range(4)]
    gs = [gr((1 << 20,), seed=20 + i) for i in range(4)]
    opt = g.AdamW(ps, lr=1e-3)
    tps = [torch.nn.Parameter(tr((1 << 20,))) for _ in range(4)]
    for p in tps:
        p.grad = tr((1 << 20,))
    topt = torch.optim.AdamW(tps, lr=1e-3, foreach=True)
    out.append(("adamw f32 4x1M", lambda: opt.step(gs), lambda: topt.step(), 5))
    # per-op overhead on a tiny tensor
    s, s2, ts, ts2 = gr((16,)), gr((16,), seed=2), tr((16,)), tr((16,))
    out.append(("add f32 16 elements (overhead)", lambda: g.add(s, s2), lambda: torch.add(ts, ts2), 200))
    out.append(("add f32 16 + synchronize", lambda: (g.add(s, s2), ctx.synchronize()), lambda: torch.add(ts, ts2), 200))
    return out


def main():
    as_json = "--json" in sys.argv
    full = "--full" in sys.argv
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    best = "--best" in sys.argv
    ours_only = "--ours-only" in sys.argv
    if "--settle-ms" in sys.argv:
        global SETTLE_S
        SETTLE_S = max(0.0, float(sys.argv[sys.argv.index("--settle-ms") + 1])) / 1e3
    torch = import_torch()
    if torch is None:
        print("torch_ops: PyTorch is not installed; skipped", file=sys.stderr)
        return 0
    g = import_gpucore()
    ctx = g.Context(os.environ.get("GPUCORE_DEVICE") if os.environ.get("GPUCORE_DEVICE") not in (None, "", "auto") else None)
    if str(ctx.device).split(":")[0] != "cpu":
        print("torch_ops: the CPU peer compares the cpu device only; skipped on %s" % ctx.device, file=sys.stderr)
        return 0
    threads = os.cpu_count() or 1
    torch.set_num_threads(threads)
    print(f"torch_ops: torch {torch.__version__} ({os.path.dirname(torch.__file__)}) with {threads} threads against "
          f"libgpucore on {ctx.device} ({os.environ.get('GPUCORE_LIBRARY') or 'found by the binding'})", file=sys.stderr)
    batches, budget = (9, 200.0) if full else (3, 30.0)
    if "--batches" in sys.argv:
        batches = max(1, int(sys.argv[sys.argv.index("--batches") + 1]))
    for name, ours, theirs, calls in cases(g, torch, ctx, full):
        if only and only not in name:
            continue
        with torch.no_grad() if "bwd" not in name else torch.enable_grad():
            ms_o, ms_t, paired = side_by_side(ours, None if ours_only else theirs, ctx.synchronize, calls, batches,
                                              budget, best)
        row = {"bench": "ops-torch-cpu", "case": name, "device": "cpu", "metric": "time", "value": round(ms_o, 5),
               "unit": "ms", "peer": None, "peer_value": None}
        if ms_t is not None:
            row.update({"peer": "torch-cpu", "peer_value": round(ms_t, 5),
                        "speedup": round(ms_t / ms_o, 3) if ms_o > 0 else 0, "paired_speedup": round(paired, 3),
                        "peer_version": torch.__version__})
        if best:
            row["statistic"] = "best of %d batches" % batches
        if as_json:
            print(json.dumps(row), flush=True)
        elif ms_t is None:
            print(f"{name:42s} ours {ms_o:9.4f} ms", flush=True)
        else:
            print(f"{name:42s} ours {ms_o:9.4f} ms  torch {ms_t:9.4f} ms  ratio {ms_t / ms_o:6.2f}  paired {paired:6.2f}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
