"""probe_head_chunks.py — a training step's peak memory with the head and loss in one chunk (the whole
[B, T, vocab] logits, their gradient written over them) against the default chunks, on a Qwen2-0.5B-shaped
model cut to a few layers (vocab 151936, hidden 896, 14 heads, 2 key/value heads, intermediate 4864; tied
head), LoRA r 8 on q_proj/v_proj, f32, CPU backend. Prints, per setting: the allocator's peak rise over the
step (gpucore.max_memory_allocated after reset_peak_memory_stats, minus what was allocated before), the
process's VmHWM rise (reset through /proc/self/clear_refs), the step's time and its loss. Run against a
build from before the chunks (with that tree's python/ first on PYTHONPATH), it measures that build's
unfused head (the whole logits and a gradient of their size).

    GPUCORE_LIBRARY=build/src/libgpucore.so PYTHONPATH=python:build-pydeps:python/torch_tests:bench/peers \
        /usr/bin/python3 bench/results/2026-12-07-lm-head-chunks/probe_head_chunks.py [--batch 1 --seq 1024 --layers 2 --warm 1 --rows R,R]
"""
import argparse
import tempfile
import time

import numpy as np

import gpucore
import hf_fixtures
from proc_memory import peak_rss_bytes, reset_peak_rss
from gpucore import models


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--warm", type=int, default=1, help="0: no warm-up step (big shapes)")
    ap.add_argument("--rows", default="", help="comma-separated chunk rows to time besides one chunk and the default")
    a = ap.parse_args()
    d = tempfile.mkdtemp()
    folder, _ = hf_fixtures.make_model("qwen2", d, vocab_size=151936, hidden_size=896, intermediate_size=4864,
                                       num_hidden_layers=a.layers, num_attention_heads=14, num_key_value_heads=2,
                                       max_position_embeddings=4096)
    ctx = gpucore.Context("cpu")
    m = models.from_pretrained(folder, device=ctx)
    m.add_lora(r=8, lora_alpha=16, target_modules=("q_proj", "v_proj"), seed=1)
    ids = np.random.default_rng(0).integers(0, m.vocab_size, size=(a.batch, a.seq))
    n = a.batch * a.seq
    logits = n * m.vocab_size * 4
    print("qwen2-shaped, %d layers, B %d T %d, LoRA r 8, f32: logits [%d, %d, %d] = %d bytes (%.1f MiB)" % (
        a.layers, a.batch, a.seq, a.batch, a.seq, m.vocab_size, logits, logits / 2**20))
    print("%-28s %14s %14s %9s %12s" % ("head and loss", "peak rise B", "VmHWM rise B", "step s", "loss"))
    settings = [("one chunk (whole logits)", n), ("default chunks", 0)]
    settings += [("chunks of %s rows" % r, int(r)) for r in a.rows.split(",") if r]
    if not hasattr(m, "set_head_chunk_rows"):  # a build from before the chunks (its own binding)
        settings = [("unfused (before chunks)", None)]
    for label, rows in settings:
        if rows is not None:
            m.set_head_chunk_rows(rows)
        if a.warm:
            m.forward_backward(ids)  # warm: executor, gradients, cached blocks
        gpucore.empty_cache(ctx)
        gpucore.reset_peak_memory_stats(ctx)
        before = gpucore.memory_allocated(ctx)
        hwm = reset_peak_rss()
        h0 = peak_rss_bytes()
        t0 = time.perf_counter()
        loss = m.forward_backward(ids)
        dt = time.perf_counter() - t0
        rise = gpucore.max_memory_allocated(ctx) - before
        hrise = peak_rss_bytes() - h0 if hwm else -1
        print("%-28s %14d %14d %9.2f %12.6f" % (label, rise, hrise, dt, loss))


if __name__ == "__main__":
    main()
