"""qlora_fixture.py — the Llama-shaped Hugging Face folders that the QLoRA benchmarks load (bench_qlora,
its peer peers/torch_qlora.py, llama8b_qlora_memory.py): config.json of a LlamaForCausalLM and random
bf16 weights in safetensors shards (with model.safetensors.index.json when there are several), plus
tokens.i64, the token ids every side trains on; and the case loop that bench_qlora and its peer share
(the same folders, ids, warm-up and timed steps, peak-memory reset). Not a benchmark itself.

The weights are N(0, 0.02) values (norm weights 1) drawn once into a pool of POOL values from the seed;
each tensor is the pool read from a seeded offset, wrapping. The files are written tensor by tensor
straight from the pool, so writing an 8B-shaped model holds no more than the pool in memory.
"""
import argparse
import gc
import json
import os
import statistics
import struct
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "peers"))
from proc_memory import peak_rss_bytes, reset_peak_rss  # noqa: E402

POOL = 1 << 24
NTOK = 1 << 16  # ids in tokens.i64

# name -> (layers, hidden, heads, kv heads, FFN, vocab, tied, rope theta)
SHAPES = {
    "smollm2-135m": (30, 576, 9, 3, 1536, 49152, True, 100000.0),
    "llama3.2-1b": (16, 2048, 32, 8, 8192, 128256, True, 500000.0),
    "llama3-8b": (32, 4096, 32, 8, 14336, 128256, False, 500000.0),
}


def config(shape):
    layers, hidden, heads, kv, ffn, vocab, tied, theta = SHAPES[shape]
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
            "intermediate_size": ffn, "num_hidden_layers": layers, "num_attention_heads": heads,
            "num_key_value_heads": kv, "head_dim": hidden // heads, "vocab_size": vocab,
            "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": theta, "rope_scaling": None,
            "hidden_act": "silu", "tie_word_embeddings": tied, "attention_bias": False, "mlp_bias": False,
            "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2, "use_cache": False}


def tensors(shape):
    """[(name, shape, is_norm)] in Hugging Face's Llama names, layer by layer."""
    layers, hidden, heads, kv, ffn, vocab, tied, _ = SHAPES[shape]
    hd = hidden // heads
    out = [("model.embed_tokens.weight", (vocab, hidden), False)]
    for i in range(layers):
        p = "model.layers.%d." % i
        out += [(p + "input_layernorm.weight", (hidden,), True),
                (p + "self_attn.q_proj.weight", (heads * hd, hidden), False),
                (p + "self_attn.k_proj.weight", (kv * hd, hidden), False),
                (p + "self_attn.v_proj.weight", (kv * hd, hidden), False),
                (p + "self_attn.o_proj.weight", (hidden, heads * hd), False),
                (p + "post_attention_layernorm.weight", (hidden,), True),
                (p + "mlp.gate_proj.weight", (ffn, hidden), False),
                (p + "mlp.up_proj.weight", (ffn, hidden), False),
                (p + "mlp.down_proj.weight", (hidden, ffn), False)]
    out.append(("model.norm.weight", (hidden,), True))
    if not tied:
        out.append(("lm_head.weight", (vocab, hidden), False))
    return out


def param_count(shape):
    return sum(int(np.prod(s)) for _, s, _ in tensors(shape))


def _write_shard(path, items, pool, rng):
    """One safetensors file of items [(name, shape, is_norm)], each tensor streamed from the pool."""
    header, off = {"__metadata__": {"format": "pt"}}, 0  # transformers requires the format
    for name, shp, _ in items:
        n = int(np.prod(shp)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shp), "data_offsets": [off, off + n]}
        off += n
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    one = np.ones(1, np.uint16) * 0x3F80  # bf16 1.0
    tmp = path + ".part"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head)
        for _, shp, norm in items:
            n = int(np.prod(shp))
            if norm:
                f.write(np.repeat(one, n).tobytes())
                continue
            at = int(rng.integers(0, POOL))
            while n:
                k = min(n, POOL - at)
                f.write(pool[at:at + k].tobytes())
                n -= k
                at = 0
    os.replace(tmp, path)


def write_folder(folder, shape, seed=0, shard_bytes=4 << 30):
    """Write the folder (unless fixture.txt says it holds this shape and seed already); returns folder."""
    stamp = "%s seed %d pool %d ntok %d\n" % (shape, seed, POOL, NTOK)
    stamp_path = os.path.join(folder, "fixture.txt")
    try:
        with open(stamp_path) as f:
            if f.read() == stamp:
                return folder
    except OSError:
        pass
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(seed)
    pool32 = rng.standard_normal(POOL, dtype=np.float32) * np.float32(0.02)
    pool = ((pool32.view(np.uint32) + 0x7FFF + ((pool32.view(np.uint32) >> 16) & 1)) >> 16).astype(np.uint16)
    del pool32
    shards, cur, size = [], [], 0
    for t in tensors(shape):
        n = int(np.prod(t[1])) * 2
        if cur and size + n > shard_bytes:
            shards.append(cur)
            cur, size = [], 0
        cur.append(t)
        size += n
    shards.append(cur)
    names = (["model.safetensors"] if len(shards) == 1 else
             ["model-%05d-of-%05d.safetensors" % (i + 1, len(shards)) for i in range(len(shards))])
    for name, items in zip(names, shards):
        _write_shard(os.path.join(folder, name), items, pool, rng)
    if len(shards) > 1:
        index = {"metadata": {"total_size": 2 * param_count(shape)},
                 "weight_map": {t[0]: name for name, items in zip(names, shards) for t in items}}
        with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
            json.dump(index, f, indent=1)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config(shape), f, indent=1)
    rng.integers(0, SHAPES[shape][5], NTOK, dtype=np.int64).tofile(os.path.join(folder, "tokens.i64"))
    with open(stamp_path, "w") as f:
        f.write(stamp)
    return folder


def batch(folder, step, B, T):
    """Step's (B, T) ids: the B*T ids at offset step*B*T of tokens.i64, wrapping (as bench_lm)."""
    tokens = np.fromfile(os.path.join(folder, "tokens.i64"), dtype="<i8")
    idx = (step * B * T + np.arange(B * T)) % tokens.size
    return tokens[idx].reshape(B, T)


def lora_targets():
    return ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


# case name -> (shape, batch, seq)
CASES = {"135M B4 T256": ("smollm2-135m", 4, 256), "1B B1 T256": ("llama3.2-1b", 1, 256)}


def default_dir():
    return os.environ.get("GPUCORE_BENCH_QLORA_DIR") or os.path.join(os.environ.get("TMPDIR") or "/tmp",
                                                                       "gpucore-bench-qlora")


def parse(doc, argv=None):
    """The options both sides take (the driver passes --json and --quick or --full)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="JSON lines (always; the driver's calling convention)")
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="1 warm-up + 2 timed steps (default)")
    size.add_argument("--full", action="store_true", help="1 warm-up + 5 timed steps")
    ap.add_argument("--dir", default=default_dir())
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", type=int, default=-1)
    a = ap.parse_args(argv)
    a.steps = a.steps if a.steps >= 1 else (5 if a.full else 2)
    a.cases = [c.strip() for c in a.cases.split(",") if c.strip()]
    bad = [c for c in a.cases if c not in CASES]
    if bad:
        ap.error("unknown case(s) %s; choose from %s" % (", ".join(bad), ", ".join(CASES)))
    return a


def run_cases(a, who, load, step, row):
    """The shared loop of both sides: per case, the folder, a peak reset, load (timed), warm-up and timed
    steps on the same ids, then the rows. load(folder) -> (model, state); step(model, state, ids) -> loss."""
    for case in a.cases:
        shape, B, T = CASES[case]
        folder = write_folder(os.path.join(a.dir, shape), shape)
        gc.collect()
        reset_peak_rss()
        t0 = time.time()
        model, state = load(folder)
        row(case, "load_s", time.time() - t0, "s")
        times, losses = [], []
        for s in range(a.warmup + a.steps):
            ids = batch(folder, s, B, T)
            t0 = time.time()
            losses.append(step(model, state, ids))
            dt = time.time() - t0
            print("%s %s step %d: %.2f s, loss %.4f" % (who, case, s, dt, losses[-1]), file=sys.stderr, flush=True)
            if s >= a.warmup:
                times.append(dt)
        med = statistics.median(times)
        row(case, "tokens_per_s", B * T / med, "tokens/s")
        row(case, "step_s_median", med, "s")
        row(case, "step_s_min", min(times), "s")
        row(case, "step_s_max", max(times), "s")
        row(case, "peak_rss_bytes", peak_rss_bytes(), "bytes")
        for k, v in enumerate(losses):
            row(case, "loss_step_%d" % k, v, "nat")
        del model, state
        gc.collect()
