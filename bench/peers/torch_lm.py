#!/usr/bin/env python3
"""Peer of bench_lm: transformers' GPT2LMHeadModel trained with torch.optim.AdamW, full
fine-tuning on Hugging Face's causal-LM loss, on the SAME weights and token batches as
bench_lm: the GPT-2 124M folder and token ids that bench_lm writes into DIR (--dir, else
$GPUCORE_BENCH_LM_DIR, else $TMPDIR/gpucore-bench-lm; run bench_lm first). Step s of a
(B, T) case takes the B*T ids at offset s*B*T of the stream (wrapping), as bench_lm does.

Cases "B4 T64 f32", "B4 T256 f32", "B4 T64 bf16", "B4 T256 bf16" (bench_lm's names, so
gpucore-bench joins the rows). f32: the model in f32. bf16: torch.autocast("cpu", bfloat16)
over forward and loss with the f32 weights as master (PyTorch's mixed precision; ours holds
bf16 weights with f32 master copies in the optimizer). AdamW lr 1e-4 (--lr), weight decay
0.01, betas (0.9, 0.999), eps 1e-8, as bench_lm. The model is in train mode; the config has
no dropout.

Rows (bench contract, "peer": "torch <version>"): tokens_per_s, step_ms_median / _min / _max,
mfu (6 N tokens/s over the FMA peak bench_lm measured, read from DIR/ours.jsonl), peak_rss_bytes
(VmHWM, reset per case through /proc/self/clear_refs), loss_step_<k> for the first steps, and,
where DIR/ours.jsonl holds bench_lm's losses for the same case and steps,
loss_max_rel_diff_vs_libgpucore: max_s |ours_s - torch_s| / |torch_s|.

  torch_lm.py [--json] [--quick|--full] [--dir DIR] [--dtype f32,bf16] [--seq 64,256]
              [--batch 4] [--warmup W] [--steps N] [--lr LR] [--threads N]

Prints nothing and exits 0 when torch or transformers is absent, or DIR has no model.
"""
import argparse
import gc
import json
import os
import statistics
import sys
import time

from proc_memory import peak_rss_bytes, reset_peak_rss  # beside this script

NTOK = 1 << 16  # ids in bench_lm's token stream


def read_ours(path):
    """bench_lm's rows: the FMA peak (GFLOP/s) and every case's losses."""
    peak, losses = None, {}
    try:
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                if r.get("metric") == "GFLOP/s" and str(r.get("case", "")).startswith("f32 fma peak"):
                    peak = r["value"]
                elif r.get("metric") == "losses":
                    losses[r["case"]] = r["values"]
    except (OSError, ValueError):
        pass
    return peak, losses


def default_dir():
    d = os.environ.get("GPUCORE_BENCH_LM_DIR")
    return d or os.path.join(os.environ.get("TMPDIR") or "/tmp", "gpucore-bench-lm")


def load_peer(name, folder, threads):
    """numpy, torch, transformers and the token stream of folder, or None (said on stderr) when
    torch or transformers is absent or folder holds no model; shared by the language-model peers."""
    try:
        import numpy as np
        import torch
        import transformers
    except ImportError as e:  # nothing to compare with here
        print("%s: %s; skipped" % (name, e), file=sys.stderr)
        return None
    if not os.path.exists(os.path.join(folder, "fixture.txt")):
        print("%s: %s has no model: run bench_lm or bench_generate first (they write the model and the token ids)"
              % (name, folder), file=sys.stderr)
        return None
    transformers.logging.set_verbosity_error()
    if threads:
        torch.set_num_threads(threads)
    tokens = np.fromfile(os.path.join(folder, "tokens.i64"), dtype="<i8")
    assert tokens.size == NTOK, "tokens.i64 holds %d ids, expected %d" % (tokens.size, NTOK)
    return np, torch, transformers, tokens


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="JSON lines (always; the driver's calling convention)")
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="1 warm-up + 3 measured steps (default)")
    size.add_argument("--full", action="store_true", help="2 warm-up + 10 measured steps")
    ap.add_argument("--dir", default=default_dir())
    ap.add_argument("--dtype", default="f32,bf16")
    ap.add_argument("--seq", default="64,256")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=-1)
    ap.add_argument("--steps", type=int, default=-1)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    a = ap.parse_args()
    warmup = a.warmup if a.warmup >= 0 else (2 if a.full else 1)
    steps = a.steps if a.steps >= 1 else (10 if a.full else 3)
    got = load_peer("torch_lm", a.dir, a.threads)
    if got is None:
        return 0
    np, torch, transformers, tokens = got
    peer = "torch %s" % torch.__version__
    peak, ours_losses = read_ours(os.path.join(a.dir, "ours.jsonl"))

    def row(case, metric, value, unit):
        print(json.dumps({"bench": "lm", "case": case, "device": "cpu", "metric": metric, "value": value,
                          "unit": unit, "peer": peer, "impl": "transformers %s GPT2LMHeadModel + torch.optim.AdamW"
                          % transformers.__version__}), flush=True)

    for dt in a.dtype.split(","):
        for T in (int(t) for t in a.seq.split(",")):
            B = a.batch
            case = "B%d T%d %s" % (B, T, dt)
            gc.collect()  # the previous case's model and optimizer state gone before the RSS peak restarts
            rss_reset = reset_peak_rss()
            model = transformers.GPT2LMHeadModel.from_pretrained(a.dir, torch_dtype=torch.float32)
            model.train()
            nparams = sum(p.numel() for p in model.parameters())  # the tied head counted once
            opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
            ms, losses = [], []
            n = B * T
            for s in range(warmup + steps):
                ids = torch.from_numpy(tokens[(s * n + np.arange(n)) % NTOK].reshape(B, T).copy())
                t0 = time.perf_counter()
                if dt == "bf16":
                    with torch.autocast("cpu", dtype=torch.bfloat16):
                        loss = model(ids, labels=ids).loss
                else:
                    loss = model(ids, labels=ids).loss
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                ms.append((time.perf_counter() - t0) * 1e3)
                losses.append(loss.item())
                print("torch_lm: %s step %d%s: %.1f ms, loss %.6f" % (case, s, " (warm-up)" if s < warmup else "",
                                                                     ms[-1], losses[-1]), file=sys.stderr, flush=True)
            timed = sorted(ms[warmup:])
            med = statistics.median(timed)
            tps = n / (med * 1e-3)
            row(case, "tokens_per_s", tps, "tokens/s")
            row(case, "step_ms_median", med, "ms")
            row(case, "step_ms_min", timed[0], "ms")
            row(case, "step_ms_max", timed[-1], "ms")
            if peak:
                row(case, "mfu", 6.0 * nparams * tps / (peak * 1e9), "ratio")
            row(case, "peak_rss_bytes" if rss_reset else "peak_rss_bytes_process", peak_rss_bytes(), "bytes")
            for s in range(min(len(losses), 5)):
                row(case, "loss_step_%d" % s, losses[s], "nats")
            mine = ours_losses.get(case)
            if mine and len(mine) == len(losses):
                diff = max(abs(o - t) / abs(t) for o, t in zip(mine, losses))
                row(case, "loss_max_rel_diff_vs_libgpucore", diff, "ratio")
            del model, opt
    return 0


if __name__ == "__main__":
    sys.exit(main())
