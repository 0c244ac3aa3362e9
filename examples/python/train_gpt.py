#!/usr/bin/env python3
"""A byte-level GPT trained from Python with libgpucore, then LoRA-fine-tuned: the Python side
of examples/train_gpt.c, on the same building blocks.

* Each layer is two built-in segments of the checkpoint executor: an attention block (RMSNorm,
  QKV projection, RoPE, causal attention, output projection, residual) and a SwiGLU MLP block.
  The embedding, the final RMSNorm, the head and the cross-entropy run around the executor.
* bf16 parameters with f32 AdamW masters (or --f32), dynamic loss scaling, clipping, a
  checkpointing policy; no autograd and no host sync in a step except reading the loss.
* Then the base is frozen and rank-r LoRA adapters on the attention projections are trained
  on a second text; the adapters are saved as safetensors; text is sampled at the end.

    GPUCORE_LIBRARY=build/src/libgpucore.so PYTHONPATH=python \\
        python3 examples/python/train_gpt.py --steps 30 --finetune-steps 10 --device cpu
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Dict, List, Optional

import numpy as np

import gpucore as g


def init_params(ctx: g.Context, L: int, D: int, dtype: str, rng: np.random.Generator) -> Dict[str, g.Tensor]:
    """The same shapes and names as train_gpt.c (normal(0, 0.02), residual projections scaled)."""
    shapes = {"tok_emb.weight": (256, D)}
    for l in range(L):
        shapes.update({"layers.%d.attn_norm.weight" % l: (D,), "layers.%d.attn.w_qkv" % l: (3 * D, D),
                       "layers.%d.attn.w_out" % l: (D, D), "layers.%d.mlp_norm.weight" % l: (D,),
                       "layers.%d.mlp.w_fc1" % l: (4 * D, D), "layers.%d.mlp.w_fc2" % l: (D, 2 * D)})
    shapes.update({"norm_f.weight": (D,), "head.weight": (256, D)})
    out = {}
    for k, s in shapes.items():
        sd = 0.02 / math.sqrt(2 * L) if k.endswith(("w_out", "w_fc2")) else 0.02
        v = np.ones(s, np.float32) if len(s) == 1 else (sd * rng.standard_normal(s)).astype(np.float32)
        out[k] = g.cast(ctx.tensor(v), dtype)
    return out


def build(ctx: g.Context, p, grads, lora, dlora, L: int, H: int, cos, sin, policy: str, lora_scale: float):
    """The layers as executor segments; with adapters (lora given) only they train."""
    ex = g.CheckpointExecutor(ctx, "gpt_lora" if lora else "gpt")
    for l in range(L):
        pre = "layers.%d." % l
        kw = dict(heads=H, norm_weight=p[pre + "attn_norm.weight"], w_qkv=p[pre + "attn.w_qkv"],
                  w_out=p[pre + "attn.w_out"], rope_cos=cos, rope_sin=sin)
        if lora:
            kw.update(lora_qkv_a=lora[pre + "qkv.a"], lora_qkv_b=lora[pre + "qkv.b"], lora_out_a=lora[pre + "out.a"],
                      lora_out_b=lora[pre + "out.b"], d_lora_qkv_a=dlora[pre + "qkv.a"],
                      d_lora_qkv_b=dlora[pre + "qkv.b"], d_lora_out_a=dlora[pre + "out.a"],
                      d_lora_out_b=dlora[pre + "out.b"], lora_scale=lora_scale)
        else:
            kw.update(d_norm_weight=grads[pre + "attn_norm.weight"], dw_qkv=grads[pre + "attn.w_qkv"],
                      dw_out=grads[pre + "attn.w_out"])
        ex.add_attention_block("layer%d.attn" % l, **kw)
        kw = dict(swiglu=True, norm_weight=p[pre + "mlp_norm.weight"], w_fc1=p[pre + "mlp.w_fc1"],
                  w_fc2=p[pre + "mlp.w_fc2"])
        if not lora:
            kw.update(d_norm_weight=grads[pre + "mlp_norm.weight"], dw_fc1=grads[pre + "mlp.w_fc1"],
                      dw_fc2=grads[pre + "mlp.w_fc2"])
        ex.add_mlp_block("layer%d.mlp" % l, **kw)
    ex.set_policy(policy)
    return ex


def logits_of(p, h: g.Tensor):
    hn, rstd = g.rms_norm(h, weight=p["norm_f.weight"], eps=1e-5, return_stats=True)
    return hn, rstd, g.linear(hn.reshape(-1, hn.shape[-1]), p["head.weight"])


def train(ctx, ex, p, grads: Optional[dict], train_list, grad_list, text, args, name: str) -> List[float]:
    """Steps of one phase; grads None: the embedding, final norm and head are frozen."""
    opt = g.AdamW(train_list, lr=args.lr, weight_decay=0.0)
    scaler = g.LossScaler(ctx, growth_interval=50)
    rng = np.random.default_rng(args.seed + (1 if grads is None else 0))
    losses, t0, S = [], time.perf_counter(), args.seq
    for step in range(args.steps if grads is not None else args.finetune_steps):
        off = rng.integers(0, len(text) - S - 1, args.batch)
        tok = ctx.tensor(np.stack([text[o:o + S] for o in off]).astype(np.int32))
        tgt = ctx.tensor(np.stack([text[o + 1:o + S + 1] for o in off]).reshape(-1).astype(np.int32))
        h = ex.forward(g.embedding(tok, p["tok_emb.weight"]))
        hn, rstd, logits = logits_of(p, h)
        loss = g.cross_entropy(logits, tgt)
        dlogits = g.cross_entropy_backward(logits, tgt, scaler.scale_tensor)
        dhn, dhead, _ = g.linear_backward(dlogits, hn.reshape(-1, hn.shape[-1]), p["head.weight"],
                                          weight_grad=grads is not None, bias_grad=False)
        dh, dnorm = g.rms_norm_backward(dhn.reshape(*h.shape), h, rstd, p["norm_f.weight"],
                                        weight_grad=grads is not None)
        demb = ex.backward(dh, input_grad=grads is not None)
        if grads is not None:
            grads["head.weight"].copy_(dhead)
            grads["norm_f.weight"].copy_(dnorm)
            grads["tok_emb.weight"].copy_(g.embedding_backward(demb, tok, 256))
        scaler.unscale_(grad_list)
        g.clip_grad_norm_(grad_list, args.clip)
        opt.step(grad_list, found_inf=scaler.found_inf)
        scaler.update()
        losses.append(loss.item())
        print("%s step %d loss %.4f" % (name, step, losses[-1]))
    ctx.synchronize()
    n = len(losses)
    if n:
        print("%s: %.0f tokens/s, peak %.2f MiB allocated" % (name, n * args.batch * S / (time.perf_counter() - t0),
                                                              g.max_memory_allocated(ctx) / 2 ** 20))
    opt.close()
    scaler.close()
    return losses


def sample(ctx, ex, p, n: int, S: int, seed: int) -> str:
    rng, seq = np.random.default_rng(seed), list(b"The ")
    ex.set_policy("keep_all")
    for _ in range(n):
        ctxt = seq[-S:]
        h = ex.forward(g.embedding(ctx.tensor(np.array([ctxt], np.int32)), p["tok_emb.weight"]))
        row = g.cast(logits_of(p, h)[2], "float32").numpy()[-1].astype(np.float64) / 0.8
        ex.reset()
        pr = np.exp(row - row.max())
        seq.append(int(rng.choice(256, p=pr / pr.sum())))
    return bytes(seq).decode("latin-1")


def main(argv: Optional[List[str]] = None) -> Dict[str, List[float]]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default=None)
    for k, v in (("layers", 2), ("width", 64), ("heads", 4), ("seq", 64), ("batch", 8), ("steps", 30),
                 ("finetune-steps", 10), ("lora-rank", 4), ("sample", 80), ("seed", 0)):
        ap.add_argument("--" + k, type=int, default=v)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--lora-alpha", type=float, default=8.0)
    ap.add_argument("--policy", default="sqrt_n", choices=sorted(g.checkpoint.POLICIES))
    ap.add_argument("--f32", action="store_true")
    ap.add_argument("--data", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("--finetune-data", default="/usr/share/common-licenses/Apache-2.0")
    ap.add_argument("--save-adapter", default=None)
    args = ap.parse_args(argv)
    ctx = g.Context(args.device)
    dtype = "float32" if args.f32 else "bfloat16"
    L, D, H, S = args.layers, args.width, args.heads, args.seq
    rng = np.random.default_rng(args.seed)
    p = init_params(ctx, L, D, dtype, rng)
    grads = {k: ctx.zeros(v.shape, v.dtype) for k, v in p.items()}
    hd = D // H
    ang = np.arange(S)[:, None] * 10000.0 ** (-np.arange(hd // 2) / (hd // 2))
    cos, sin = ctx.tensor(np.cos(ang).astype(np.float32)), ctx.tensor(np.sin(ang).astype(np.float32))
    print("gpucore %s on %s: GPT %d layers x %d wide, %d heads, seq %d, %s, policy %s"
          % (g.version_string(), ctx.device, L, D, H, S, dtype, args.policy))
    ex = build(ctx, p, grads, None, None, L, H, cos, sin, args.policy, 1.0)
    base_text = np.frombuffer(open(args.data, "rb").read(), np.uint8)
    base = train(ctx, ex, p, grads, list(p.values()), [grads[k] for k in p], base_text, args, "base")
    lora, dlora = {}, {}
    for l in range(L):
        for part, out_f in (("qkv", 3 * D), ("out", D)):
            k = "layers.%d.%s." % (l, part)
            a = (rng.standard_normal((args.lora_rank, D)) / math.sqrt(D)).astype(np.float32)
            lora[k + "a"], lora[k + "b"] = g.cast(ctx.tensor(a), dtype), ctx.zeros((out_f, args.lora_rank), dtype)
    dlora = {k: ctx.zeros(v.shape, v.dtype) for k, v in lora.items()}
    ex2 = build(ctx, p, grads, lora, dlora, L, H, cos, sin, args.policy, args.lora_alpha / args.lora_rank)
    tune_text = np.frombuffer(open(args.finetune_data, "rb").read(), np.uint8)
    tuned = train(ctx, ex2, p, None, list(lora.values()), list(dlora.values()), tune_text, args, "lora")
    if args.save_adapter:
        g.save_file(lora, args.save_adapter)
    if args.sample:
        print("sample:", repr(sample(ctx, ex2, p, args.sample, S, args.seed)))
    ex.close()
    ex2.close()
    ctx.close()
    return {"base": base, "lora": tuned}


if __name__ == "__main__":
    main(sys.argv[1:])
