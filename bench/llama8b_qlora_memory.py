#!/usr/bin/env python3
"""llama8b_qlora_memory.py — host memory of QLoRA on a Llama-3-8B-shaped model (32 layers, width 4096,
32/8 heads, FFN 14336, vocabulary 128256, untied head): writes the folder (random bf16 weights in 4 GiB
safetensors shards, about 16 GB; qlora_fixture.py), then, in a fresh process, loads it with
quantize="nf4" (bf16 compute) and reports the peak RSS (VmHWM) after loading, then after one QLoRA step
(r 16, alpha 32 on every linear layer, checkpointing "recompute_all", AdamW on the adapters) at
B1 T512, with the time of each. The folder is deleted afterwards unless --keep.

  llama8b_qlora_memory.py [--dir DIR] [--keep] [--batch 1] [--seq 512] [--policy recompute_all]

Needs the gpucore binding on PYTHONPATH (python/) and GPUCORE_LIBRARY naming a release build's
libgpucore.so. Prints one JSON line per figure (bench "qlora_memory") and a summary on stderr.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.realpath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "peers"))
from proc_memory import peak_rss_bytes  # noqa: E402
import qlora_fixture as fx  # noqa: E402

SHAPE = "llama3-8b"


def row(metric, value, unit, case):
    print(json.dumps({"bench": "qlora_memory", "case": case, "device": "cpu", "metric": metric,
                      "value": value, "unit": unit}), flush=True)


def child(a):
    import gpucore
    from gpucore import models
    case = "%s nf4 bf16 B%d T%d r16 all linears %s" % (SHAPE, a.batch, a.seq, a.policy)
    t0 = time.time()
    m = models.from_pretrained(a.dir, quantize="nf4", dtype="bfloat16")
    row("load_s", time.time() - t0, "s", case)
    row("peak_rss_after_load_bytes", peak_rss_bytes(), "bytes", case)
    row("weight_bytes", m.memory_footprint(), "bytes", case)
    m.add_lora(r=16, lora_alpha=32, target_modules=fx.lora_targets())
    m.set_checkpoint_policy(a.policy)
    opt = gpucore.AdamW(m.trainable_parameters(), lr=1e-4, weight_decay=0.0)
    ids = fx.batch(a.dir, 0, a.batch, a.seq)
    t0 = time.time()
    loss = m.forward_backward(ids)
    t1 = time.time()
    opt.step(m.gradients())
    m.context.synchronize()
    t2 = time.time()
    row("forward_backward_s", t1 - t0, "s", case)
    row("step_s", t2 - t0, "s", case)
    row("loss", loss, "nat", case)
    row("peak_rss_after_step_bytes", peak_rss_bytes(), "bytes", case)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=os.path.join(os.environ.get("TMPDIR") or "/tmp", "gpucore-llama8b"))
    ap.add_argument("--keep", action="store_true", help="keep the written folder")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--policy", default="recompute_all")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a)
    t0 = time.time()
    fx.write_folder(a.dir, SHAPE)
    disk = sum(os.path.getsize(os.path.join(a.dir, f)) for f in os.listdir(a.dir))
    row("write_s", time.time() - t0, "s", SHAPE)
    row("params", fx.param_count(SHAPE), "count", SHAPE)
    row("folder_bytes", disk, "bytes", SHAPE)
    try:
        rc = subprocess.call([sys.executable, os.path.realpath(__file__), "--child", "--dir", a.dir, "--batch",
                              str(a.batch), "--seq", str(a.seq), "--policy", a.policy])
    finally:
        if not a.keep:
            shutil.rmtree(a.dir, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
