#!/usr/bin/env python3
"""PyTorch twin of examples/train_gpt.c: the same byte-level GPT (token embedding, pre-norm
layers of RMSNorm -> QKV -> half-split RoPE -> causal attention -> output projection -> residual
and RMSNorm -> SwiGLU MLP -> residual, final RMSNorm, untied head, cross-entropy; no biases),
initialised from the safetensors file train_gpt writes with --save-init, fed the same batches
(the same splitmix64 counter hash of (seed, step, sample) picks each window), trained with the
same AdamW (weight decay 0), global-norm clipping and learning rate, in f32 on the CPU.

  torch_gpt.py --init INIT.safetensors [--data PATH] [--layers 2 --width 64 --heads 4 --seq 64
               --batch 8 --steps 30 --seed 1234 --lr 3e-3 --clip 1.0]
      one JSON line per step: {"phase":"base","step":N,"loss":X}
  torch_gpt.py --bench [--checkpoint] [--lora-rank R] ...
      tokens/s of the training steps and the process's peak-RSS growth, as JSON rows of the
      bench contract (peak RSS is what the CPU offers PyTorch; it is not our allocator's
      figure). With --checkpoint each layer's two blocks run under torch.utils.checkpoint;
      with --lora-rank R the base is frozen and rank-R adapters train on the attention
      projections (A random, B zero: the twin's own init, so only speed is compared).

  torch_gpt.py --compare build/examples/train_gpt [--steps 20 ...]
      runs train_gpt (--f32) and this twin (each case in its own process) for four cases —
      base and LoRA fine-tuning, each without and with activation checkpointing (every block
      recomputed) — and prints the bench contract's rows: tokens/s with the peer's figure and
      the speedup, and peak memory: ours the allocator's peak allocated bytes, the twin's its
      peak-RSS growth (different measures, so no speedup on those rows). With --repeat N each
      side runs N times, alternately, and its fastest run is reported (a loaded machine's noise
      only ever slows a run down).

Prints nothing and exits 0 when PyTorch is absent.
"""
import os
import subprocess
import argparse
import json
import math
import struct
import sys
import time

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint
except ImportError:  # no PyTorch here: nothing to compare with
    sys.exit(0)
from proc_memory import peak_rss_bytes  # noqa: E402  (beside this script)

MASK64 = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def draw(seed, step, sample, i):
    """train_common.c's train_draw: the value depends only on its arguments."""
    return splitmix64(splitmix64(splitmix64(seed) ^ (step & MASK64)) ^ (((sample << 20) | i) & MASK64))


def batch(text, seed, step, B, S):
    tok = np.empty((B, S), np.int64)
    tgt = np.empty((B, S), np.int64)
    for g in range(B):
        off = draw(seed, step, g, 0) % (len(text) - S - 1)
        tok[g] = text[off:off + S]
        tgt[g] = text[off + 1:off + S + 1]
    return torch.from_numpy(tok), torch.from_numpy(tgt)


def read_safetensors(path):
    """The safetensors format by hand (8-byte length, JSON header, data): F32, BF16, I32, I64."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        raw = data[a:b]
        if info["dtype"] == "F32":
            arr = np.frombuffer(raw, np.float32).copy()
        elif info["dtype"] == "BF16":
            arr = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif info["dtype"] in ("I32", "I64"):
            arr = np.frombuffer(raw, np.int32 if info["dtype"] == "I32" else np.int64).copy()
        else:
            raise ValueError("%s: dtype %s not handled" % (name, info["dtype"]))
        out[name] = torch.from_numpy(arr.reshape(info["shape"]))
    return out


def rms_norm(x, w, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, cos, sin):
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


class GPT:
    def __init__(self, p, L, D, H, S, lora_rank=0, lora_scale=1.0):
        self.p, self.L, self.D, self.H, self.S = p, L, D, H, S
        hd = D // H
        k = torch.arange(hd // 2, dtype=torch.float64)
        ang = torch.arange(S, dtype=torch.float64)[:, None] * 10000.0 ** (-k / (hd // 2))
        self.cos, self.sin = torch.cos(ang).float(), torch.sin(ang).float()  # the C side rounds f64 -> f32 too
        self.lora, self.lora_scale = {}, lora_scale
        if lora_rank:
            gen = torch.Generator().manual_seed(0)
            for l in range(L):
                for name, out_f in (("qkv", 3 * D), ("out", D)):
                    self.lora["%d.%s.a" % (l, name)] = (torch.randn(lora_rank, D, generator=gen) / math.sqrt(D))
                    self.lora["%d.%s.b" % (l, name)] = torch.zeros(out_f, lora_rank)

    def trainable(self):
        return list(self.lora.values()) if self.lora else list(self.p.values())

    def proj(self, x, l, name, w):
        y = x @ w.t()
        if self.lora:
            y = y + self.lora_scale * (x @ self.lora["%d.%s.a" % (l, name)].t()) @ self.lora["%d.%s.b" % (l, name)].t()
        return y

    def attn_block(self, x, l):
        B, S, D = x.shape
        H, hd, p = self.H, D // self.H, self.p
        pre = "layers.%d." % l
        qkv = self.proj(rms_norm(x, p[pre + "attn_norm.weight"]), l, "qkv", p[pre + "attn.w_qkv"])
        qkv = qkv.view(B, S, 3 * H, hd).transpose(1, 2)
        q, k, v = qkv[:, :H], qkv[:, H:2 * H], qkv[:, 2 * H:]
        cos, sin = self.cos[:S], self.sin[:S]
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        s = s.masked_fill(torch.triu(torch.ones(S, S, dtype=torch.bool), 1), float("-inf"))
        att = torch.softmax(s, -1) @ v
        return x + self.proj(att.transpose(1, 2).reshape(B, S, D), l, "out", p[pre + "attn.w_out"])

    def mlp_block(self, x, l):
        p, pre = self.p, "layers.%d." % l
        u = rms_norm(x, p[pre + "mlp_norm.weight"]) @ p[pre + "mlp.w_fc1"].t()
        gate, up = u.chunk(2, -1)
        return x + (F.silu(gate) * up) @ p[pre + "mlp.w_fc2"].t()

    def loss(self, tok, tgt, use_checkpoint=False):
        p = self.p
        x = p["tok_emb.weight"][tok]
        for l in range(self.L):
            if use_checkpoint:
                x = checkpoint(self.attn_block, x, l, use_reentrant=False)
                x = checkpoint(self.mlp_block, x, l, use_reentrant=False)
            else:
                x = self.mlp_block(self.attn_block(x, l), l)
        logits = rms_norm(x, p["norm_f.weight"]) @ p["head.weight"].t()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), tgt.view(-1))


def compare(a):
    """Our train_gpt against this twin on the same shapes: JSON rows per DESIGN.md."""
    shape = ["--layers", str(a.layers), "--width", str(a.width), "--heads", str(a.heads), "--seq", str(a.seq),
             "--batch", str(a.batch), "--seed", str(a.seed), "--lr", str(a.lr)]
    rank = a.lora_rank or 4
    for lora in (False, True):
        for ckpt in (False, True):
            case = "L%d_D%d_S%d_B%d_%s%s" % (a.layers, a.width, a.seq, a.batch, "lora%d" % rank if lora else "base",
                                             "_ckpt" if ckpt else "")
            steps = ["--steps", "1", "--finetune-steps", str(a.steps)] if lora else ["--steps", str(a.steps),
                                                                                     "--finetune-steps", "0"]
            key = "lora" if lora else "base"
            best_ours, best_peer = None, None
            for _ in range(max(a.repeat, 1)):  # alternately, keeping each side's fastest run
                ours = subprocess.run([a.compare, "--f32", "--device", "cpu", "--sample", "0", "--no-profile",
                                       "--log-json", "--lora-rank", str(rank),
                                       "--checkpoint-policy", "all" if ckpt else "none"]
                                      + shape + steps, capture_output=True, text=True, check=True)
                summ = [json.loads(l) for l in ours.stdout.splitlines() if '"summary"' in l][0]
                if best_ours is None or summ[key + "_tokens_per_s"] > best_ours[key + "_tokens_per_s"]:
                    best_ours = summ
                twin = subprocess.run([sys.executable, os.path.abspath(__file__), "--bench", "--steps", str(a.steps),
                                       "--data", a.data, "--lora-rank", str(rank if lora else 0)]
                                      + (["--checkpoint"] if ckpt else [])
                                      + (["--threads", str(a.threads)] if a.threads else [])
                                      + shape, capture_output=True, text=True, check=True)
                peer = {r["metric"]: r["value"] for r in map(json.loads, twin.stdout.splitlines())}
                if best_peer is None or peer["tokens_per_s"] > best_peer["tokens_per_s"]:
                    best_peer = peer
            summ, peer = best_ours, best_peer
            tps = summ[key + "_tokens_per_s"]
            print(json.dumps({"bench": "gpt", "case": case, "device": "cpu", "metric": "tokens_per_s", "value": tps,
                              "unit": "tokens/s", "peer": "torch", "peer_value": peer["tokens_per_s"],
                              "speedup": tps / peer["tokens_per_s"]}))
            print(json.dumps({"bench": "gpt", "case": case, "device": "cpu", "metric": "peak_allocated_bytes",
                              "value": summ[key + "_peak_allocated_bytes"], "unit": "bytes",
                              "peer": "torch_peak_rss_growth", "peer_value": peer["peak_rss_growth"]}), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--init", help="safetensors from train_gpt --save-init (default: random, --bench only)")
    ap.add_argument("--data", default="/usr/share/common-licenses/GPL-3")
    for name, default in (("layers", 2), ("width", 64), ("heads", 4), ("seq", 64), ("batch", 8), ("steps", 30),
                          ("seed", 1234), ("lora-rank", 0), ("threads", 0), ("repeat", 1)):
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--lora-alpha", type=float, default=8.0)
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--checkpoint", action="store_true")
    ap.add_argument("--compare", metavar="TRAIN_GPT", help="run our train_gpt beside the twin (see above)")
    a = ap.parse_args()
    if a.compare:
        return compare(a)
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    text = np.frombuffer(open(a.data, "rb").read(), np.uint8)
    L, D, H, S = a.layers, a.width, a.heads, a.seq
    if a.init:
        params = read_safetensors(a.init)
    else:
        shapes = {"tok_emb.weight": (256, D), "norm_f.weight": (D,), "head.weight": (256, D)}
        for l in range(L):
            shapes.update({"layers.%d.attn_norm.weight" % l: (D,), "layers.%d.attn.w_qkv" % l: (3 * D, D),
                           "layers.%d.attn.w_out" % l: (D, D), "layers.%d.mlp_norm.weight" % l: (D,),
                           "layers.%d.mlp.w_fc1" % l: (4 * D, D), "layers.%d.mlp.w_fc2" % l: (D, 2 * D)})
        params = {k: (torch.ones(s) if len(s) == 1 else 0.02 * torch.randn(*s)) for k, s in shapes.items()}
    model = GPT(params, L, D, H, S, a.lora_rank, a.lora_alpha / max(a.lora_rank, 1))
    train = model.trainable()
    for t in train:
        t.requires_grad_(True)
    opt = torch.optim.AdamW(train, lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    rss0 = peak_rss_bytes()
    t0 = None
    for step in range(a.steps):
        if step == 1:
            t0 = time.perf_counter()  # the first step warms up
        tok, tgt = batch(text, a.seed, step, a.batch, S)
        loss = model.loss(tok, tgt, a.checkpoint)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(train, a.clip)
        opt.step()
        if not a.bench:
            print(json.dumps({"phase": "lora" if a.lora_rank else "base", "step": step, "loss": float(loss)}),
                  flush=True)
    if a.bench and a.steps > 1:
        secs = time.perf_counter() - t0
        case = "L%d_D%d_S%d_B%d%s%s" % (L, D, S, a.batch, "_ckpt" if a.checkpoint else "",
                                        "_lora%d" % a.lora_rank if a.lora_rank else "")
        print(json.dumps({"bench": "gpt", "case": case, "device": "cpu", "metric": "tokens_per_s",
                          "value": (a.steps - 1) * a.batch * S / secs, "unit": "tokens/s", "impl": "torch"}))
        print(json.dumps({"bench": "gpt", "case": case, "device": "cpu", "metric": "peak_rss_growth",
                          "value": peak_rss_bytes() - rss0, "unit": "bytes", "impl": "torch"}))


if __name__ == "__main__":
    main()
