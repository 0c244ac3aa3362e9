"""gpucore.scaled_dot_product_attention and its backward against a numpy float64
reference (f32: 1e-5 relative norm; bf16: 1e-2): causal, masks, GQA, a [B,S,H,D]
projection used as a permuted view, dropout replayed by the backward, bad input."""
import numpy as np
import pytest

import gpucore as g

RNG = np.random.default_rng(20)


def rel(got, ref):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    n = np.linalg.norm(ref)
    return np.linalg.norm(got - ref) / (n if n else 1.0)


def ref_sdpa(q, k, v, bias, scale, dout=None, keep=None):
    """out, lse and (with dout) dq, dk, dv in float64; bias [.., L, S] additive (-inf masks)."""
    G = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, G, axis=1), np.repeat(v, G, axis=1)
    s = scale * q @ np.swapaxes(k, -1, -2) + bias
    m = s.max(-1, keepdims=True)
    e = np.exp(s - m)
    lse = (m + np.log(e.sum(-1, keepdims=True)))[..., 0]
    p = e / e.sum(-1, keepdims=True)
    keep = np.ones_like(p) if keep is None else keep
    out = (p * keep) @ v
    if dout is None:
        return out, lse
    dv = np.swapaxes(p * keep, -1, -2) @ dout
    dp = dout @ np.swapaxes(v, -1, -2) * keep
    ds = p * (dp - (dout * out).sum(-1, keepdims=True))
    dq, dk = scale * ds @ k, scale * np.swapaxes(ds, -1, -2) @ q
    fold = lambda t: t.reshape(t.shape[0], -1, G, *t.shape[2:]).sum(2)
    return out, lse, dq, fold(dk), fold(dv)


def test_sdpa_forward_backward_causal_mask_gqa(ctx):
    B, H, Hkv, L, S, D = 2, 4, 2, 23, 31, 40
    q, k, v = (RNG.uniform(-1.5, 1.5, (B, h, n, D)).astype(np.float32) for h, n in ((H, L), (Hkv, S), (Hkv, S)))
    mask = RNG.uniform(-2, 1, (L, S)).astype(np.float32)
    dout = RNG.uniform(-1, 1, (B, H, L, D)).astype(np.float32)
    tq, tk, tv, tm, tg = (ctx.tensor(a) for a in (q, k, v, mask, dout))
    for causal in (False, True):
        bias = mask.astype(np.float64) + (np.triu(np.full((L, S), -np.inf), 1) if causal else 0)
        out, lse = g.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm, is_causal=causal, enable_gqa=True,
                                                  return_stats=True)
        r_out, r_lse, r_dq, r_dk, r_dv = ref_sdpa(q.astype(np.float64), k.astype(np.float64),
                                                  v.astype(np.float64), bias, D ** -0.5, dout.astype(np.float64))
        assert rel(out.numpy(), r_out) < 1e-5 and rel(lse.numpy(), r_lse) < 1e-5
        dq, dk, dv = g.scaled_dot_product_attention_backward(tg, tq, tk, tv, out, lse, attn_mask=tm,
                                                             is_causal=causal, enable_gqa=True)
        assert rel(dq.numpy(), r_dq) < 1e-5 and rel(dk.numpy(), r_dk) < 1e-5 and rel(dv.numpy(), r_dv) < 1e-5


def test_sdpa_projection_view_bool_mask_bf16(ctx):
    B, L, H, D = 2, 17, 3, 24
    proj = RNG.uniform(-1, 1, (B, L, 3, H, D)).astype(np.float32)
    t = g.cast(ctx.tensor(proj), g.bfloat16)  # one fused QKV projection, [B, L, 3, H, D]
    q, k, v = (t[:, :, i].permute(0, 2, 1, 3) for i in range(3))  # strided [B, H, L, D] views, no copies
    keep = RNG.uniform(size=(B, 1, 1, L)) > 0.3
    keep[..., 0] = True
    out = g.scaled_dot_product_attention(q, k, v, attn_mask=ctx.tensor(keep.astype(np.uint8)), scale=0.2)
    qa, ka, va = (np.asarray(g.cast(x, g.float32).numpy(), np.float64) for x in (q, k, v))
    r_out, _ = ref_sdpa(qa, ka, va, np.where(keep, 0.0, -np.inf), 0.2)
    assert out.dtype == g.bfloat16 and rel(g.cast(out, g.float32).numpy(), r_out) < 1e-2


def test_sdpa_dropout_replays_in_backward(ctx):
    B, H, L, D = 1, 2, 19, 16
    q, k, v, dout = (RNG.uniform(-1, 1, (B, H, L, D)).astype(np.float32) for _ in range(4))
    tq, tk, tv, tg = (ctx.tensor(a) for a in (q, k, v, dout))
    out, lse = g.scaled_dot_product_attention(tq, tk, tv, dropout_p=0.25, seed=7, offset=4, return_stats=True)
    again = g.scaled_dot_product_attention(tq, tk, tv, dropout_p=0.25, seed=7, offset=4)
    assert np.array_equal(out.numpy(), again.numpy())
    # the keep mask is gpucore.dropout's over a [B, H, L, L] tensor under the same (seed, offset)
    keep = g.dropout(ctx.tensor(np.ones((B, H, L, L), np.float32)), 0.25, seed=7, offset=4).numpy().astype(np.float64)
    r = ref_sdpa(*(a.astype(np.float64) for a in (q, k, v)), 0.0, D ** -0.5, dout.astype(np.float64), keep)
    assert rel(out.numpy(), r[0]) < 1e-5
    grads = g.scaled_dot_product_attention_backward(tg, tq, tk, tv, out, lse, dropout_p=0.25, seed=7, offset=4)
    for got, want in zip(grads, r[2:]):
        assert rel(got.numpy(), want) < 1e-5


def test_sdpa_bad_input(ctx):
    q = ctx.empty((1, 4, 8, 16))
    with pytest.raises(g.ShapeMismatchError):
        g.scaled_dot_product_attention(q, ctx.empty((1, 2, 8, 16)), ctx.empty((1, 2, 8, 16)))  # GQA not enabled
    with pytest.raises(g.ShapeMismatchError):
        g.scaled_dot_product_attention(ctx.empty((4, 8, 16)), q, q)
    with pytest.raises(g.InvalidArgumentError):
        g.scaled_dot_product_attention(q, q, q, dropout_p=1.0)
    with pytest.raises(g.ShapeMismatchError):
        g.scaled_dot_product_attention(q, q, q, attn_mask=ctx.empty((3, 8)))


def test_rope_swiglu_residual_norm(ctx):
    B, H, S, D = 2, 3, 7, 16
    x = RNG.uniform(-1, 1, (B, S, H, D)).astype(np.float32)
    ang = RNG.uniform(0, 6, (S, D // 2))
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    tx = ctx.tensor(x).permute(0, 2, 1, 3)  # a [B, H, S, D] view of a [B, S, H, D] projection
    xv = np.transpose(x, (0, 2, 1, 3)).astype(np.float64)
    y = g.rotary_embedding(tx, ctx.tensor(cos), ctx.tensor(sin)).numpy()
    x1, x2 = xv[..., :D // 2], xv[..., D // 2:]
    ref = np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)
    assert rel(y, ref) < 1e-6
    back = g.rotary_embedding_backward(ctx.tensor(y.astype(np.float32)), ctx.tensor(cos), ctx.tensor(sin)).numpy()
    assert rel(back, xv) < 1e-6  # the inverse rotation

    gate, up, dout = (RNG.uniform(-3, 3, (5, 9)).astype(np.float32) for _ in range(3))
    sig = 1 / (1 + np.exp(-gate.astype(np.float64)))
    assert rel(g.swiglu(ctx.tensor(gate), ctx.tensor(up)).numpy(), gate * sig * up) < 1e-6
    dg, du = g.swiglu_backward(ctx.tensor(dout), ctx.tensor(gate), ctx.tensor(up))
    assert rel(dg.numpy(), dout * up * sig * (1 + gate * (1 - sig))) < 1e-6
    assert rel(du.numpy(), dout * gate * sig) < 1e-6

    a, r = (RNG.uniform(-2, 2, (4, 32)).astype(np.float32) for _ in range(2))
    w = RNG.uniform(0.5, 1.5, 32).astype(np.float32)
    yt, h, mu, rs = g.residual_norm(ctx.tensor(a), ctx.tensor(r), ctx.tensor(w), eps=1e-6, return_stats=True)
    hv = (a + r).astype(np.float64)
    assert rel(h.numpy(), hv) < 1e-6 and mu is None
    assert rel(yt.numpy(), hv / np.sqrt((hv ** 2).mean(-1, keepdims=True) + 1e-6) * w) < 1e-5
    dx, dw, db = g.residual_norm_backward(ctx.tensor(dout[:4, :8].repeat(4, 1)), None, h, None, rs, ctx.tensor(w))
    assert dx.shape == (4, 32) and dw.shape == (32,) and db is None


def ref_lora(x, w, bias, a, b, scale, keep, dy):
    """y, xa and (dx, da, db) of the LoRA linear layer in float64; keep: the dropout multiplier."""
    xd = x * keep
    xa = xd @ a.T
    y = x @ w.T + (0 if bias is None else bias) + scale * xa @ b.T
    dh = scale * dy @ b
    dx = dy @ w + (dh @ a) * keep
    return y, xa, dx, dh.reshape(-1, a.shape[0]).T @ xd.reshape(-1, a.shape[1]), \
        scale * dy.reshape(-1, b.shape[0]).T @ xa.reshape(-1, a.shape[0])


@pytest.mark.parametrize("dropout_p", [0.0, 0.25])
def test_lora_linear_forward_backward_merge(ctx, dropout_p):
    x, dy = RNG.uniform(-1, 1, (2, 7, 16)), RNG.uniform(-1, 1, (2, 7, 10))
    w, bias = RNG.uniform(-1, 1, (10, 16)), RNG.uniform(-1, 1, 10)
    a, b = RNG.uniform(-1, 1, (4, 16)), RNG.uniform(-1, 1, (10, 4))
    f = lambda v: ctx.tensor(v.astype(np.float32))
    tx, tw, tb, ta, tbb = f(x), f(w), f(bias), f(a), f(b)
    y, xa = g.transformer.lora_linear(tx, tw, tb, ta, tbb, scale=0.5, dropout_p=dropout_p, seed=3, offset=8,
                                      return_xa=True)
    keep = np.ones_like(x)
    if dropout_p:
        keep = g.dropout(ctx.tensor(np.ones(x.shape, np.float32)), dropout_p, seed=3, offset=8).numpy()
        keep = (keep != 0) / (1 - dropout_p)
        assert 0 < (keep == 0).mean() < 0.6
    ry, rxa, rdx, rda, rdb = ref_lora(x, w, bias, a, b, 0.5, keep, dy)
    assert rel(y.numpy(), ry) < 1e-5 and rel(xa.numpy(), rxa) < 1e-5
    for saved in (xa, None):
        dx, da, db = g.transformer.lora_linear_backward(f(dy), tx, tw, ta, tbb, scale=0.5, dropout_p=dropout_p,
                                                        seed=3, offset=8, xa=saved)
        assert rel(dx.numpy(), rdx) < 1e-5 and rel(da.numpy(), rda) < 1e-5 and rel(db.numpy(), rdb) < 1e-5
    # bf16 operands
    bf = lambda t: g.cast(t, g.bfloat16)
    yb = g.transformer.lora_linear(bf(tx), bf(tw), bf(tb), bf(ta), bf(tbb), scale=0.5, dropout_p=dropout_p,
                                   seed=3, offset=8)
    assert yb.dtype == g.bfloat16 and rel(g.cast(yb, g.float32).numpy(), ry) < 1e-2
    # merging folds the adapter into the weight; unmerging takes it out
    g.transformer.lora_merge(tw, ta, tbb, scale=0.5)
    assert rel(tw.numpy(), w + 0.5 * b @ a) < 1e-6
    g.transformer.lora_unmerge(tw, ta, tbb, scale=0.5)
    assert rel(tw.numpy(), w) < 1e-6


@pytest.mark.parametrize("fp8", ["float8_e4m3", "float8_e5m2"])
def test_lora_linear_fp8_base(ctx, fp8):
    """An fp8 base with its per-tensor scale: the reference uses the decoded codes times the scale."""
    x, dy = RNG.uniform(-1, 1, (3, 5, 16)), RNG.uniform(-1, 1, (3, 5, 10))
    bias, a, b = RNG.uniform(-1, 1, 10), RNG.uniform(-1, 1, (4, 16)), RNG.uniform(-1, 1, (10, 4))
    s = np.float32(0.0213)
    f = lambda v: ctx.tensor(np.asarray(v, np.float32))
    w8 = g.cast(f(RNG.uniform(-1, 1, (10, 16)) / s), fp8)
    w = g.fp8_to_float32(w8.numpy(), g.as_dtype(fp8)).astype(np.float64) * np.float64(s)
    ts = f(s)
    y = g.transformer.lora_linear(f(x), w8, f(bias), f(a), f(b), scale=0.5, weight_scale=ts)
    ry, _, rdx, rda, rdb = ref_lora(x, w, bias, a, b, 0.5, np.ones_like(x), dy)
    assert rel(y.numpy(), ry) < 1e-5
    dx, da, db = g.transformer.lora_linear_backward(f(dy), f(x), w8, f(a), f(b), scale=0.5, weight_scale=ts)
    assert rel(dx.numpy(), rdx) < 1e-5 and rel(da.numpy(), rda) < 1e-5 and rel(db.numpy(), rdb) < 1e-5
    bf = lambda v: g.cast(f(v), g.bfloat16)
    yb = g.transformer.lora_linear(bf(x), w8, bf(bias), bf(a), bf(b), scale=0.5, weight_scale=ts)
    assert rel(g.cast(yb, g.float32).numpy(), ry) < 1e-2
    with pytest.raises(g.InvalidArgumentError, match="w_scale is NULL"):
        g.transformer.lora_linear(f(x), w8, None, f(a), f(b))
    with pytest.raises(g.NotSupportedError, match="requantised"):
        g.transformer.lora_merge(w8, f(a), f(b))


def test_lora_linear_bad_input(ctx):
    x = ctx.tensor(np.ones((3, 8), np.float32))
    w, a, b = (ctx.tensor(np.ones(s, np.float32)) for s in ((5, 8), (2, 8), (5, 3)))
    with pytest.raises(g.ShapeMismatchError, match="b has shape"):
        g.transformer.lora_linear(x, w, None, a, b)
    with pytest.raises(g.InvalidArgumentError, match="dropout_p"):
        g.transformer.lora_linear(x, w, None, a, ctx.tensor(np.ones((5, 2), np.float32)), dropout_p=1.0, seed=1)
    with pytest.raises(g.DtypeMismatchError):
        g.transformer.lora_merge(g.cast(w, g.bfloat16), a, ctx.tensor(np.ones((5, 2), np.float32)))


def test_checkpoint_transformer_blocks_match_numpy(ctx):
    """An attention block (RMSNorm, RoPE, GQA, causal) and a SwiGLU MLP block as executor
    segments against a float64 numpy reference; recompute_all gives keep-all's gradients."""
    B, S, D, H, Hkv, hd, F = 2, 5, 16, 4, 2, 4, 12
    nq = (H + 2 * Hkv) * hd
    r = lambda *s: RNG.uniform(-0.5, 0.5, s)
    x, g1, wq, bq, wo, bo = r(B, S, D), 1 + r(D), r(nq, D), r(nq), r(D, H * hd), r(D)
    g2, w1, b1, w2, b2 = 1 + r(D), r(2 * F, D), r(2 * F), r(D, F), r(D)
    ang = np.arange(S)[:, None] * 10000.0 ** (-np.arange(hd // 2) / (hd // 2))
    cos, sin = np.cos(ang), np.sin(ang)
    f = lambda v: ctx.tensor(np.asarray(v, np.float32))
    ts = {k: f(v) for k, v in dict(g1=g1, wq=wq, bq=bq, wo=wo, bo=bo, g2=g2, w1=w1, b1=b1, w2=w2, b2=b2).items()}
    grads = {k: g.empty(t.shape, "float32", device=ctx) for k, t in ts.items()}
    ex = g.CheckpointExecutor(ctx, "layer")
    ex.add_attention_block("attn", heads=H, kv_heads=Hkv, norm_weight=ts["g1"], w_qkv=ts["wq"], b_qkv=ts["bq"],
                           w_out=ts["wo"], b_out=ts["bo"], rope_cos=f(cos), rope_sin=f(sin),
                           d_norm_weight=grads["g1"], dw_qkv=grads["wq"], db_qkv=grads["bq"], dw_out=grads["wo"],
                           db_out=grads["bo"])
    ex.add_mlp_block("mlp", swiglu=True, norm_weight=ts["g2"], w_fc1=ts["w1"], b_fc1=ts["b1"], w_fc2=ts["w2"],
                     b_fc2=ts["b2"], d_norm_weight=grads["g2"], dw_fc1=grads["w1"], db_fc1=grads["b1"],
                     dw_fc2=grads["w2"], db_fc2=grads["b2"])
    with pytest.raises(g.InvalidArgumentError, match="unknown field"):
        ex.add_mlp_block("bad", w_fc3=ts["w2"])

    rms = lambda v, w: v / np.sqrt((v ** 2).mean(-1, keepdims=True) + 1e-5) * w
    qkv = (rms(x, g1) @ wq.T + bq).reshape(B, S, H + 2 * Hkv, hd).transpose(0, 2, 1, 3)
    q, k, v = qkv[:, :H], qkv[:, H:H + Hkv], qkv[:, H + Hkv:]
    rot = lambda t: np.concatenate([t[..., :hd // 2] * cos - t[..., hd // 2:] * sin,
                                    t[..., hd // 2:] * cos + t[..., :hd // 2] * sin], -1)
    q, k = rot(q), rot(k)
    k, v = np.repeat(k, H // Hkv, 1), np.repeat(v, H // Hkv, 1)
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(hd) + np.triu(np.full((S, S), -np.inf), 1)
    p = np.exp(s - s.max(-1, keepdims=True))
    att = (p / p.sum(-1, keepdims=True)) @ v
    y1 = att.transpose(0, 2, 1, 3).reshape(B, S, H * hd) @ wo.T + bo + x
    u = rms(y1, g2) @ w1.T + b1
    gate, up = u[..., :F], u[..., F:]
    ref = (gate / (1 + np.exp(-gate)) * up) @ w2.T + b2 + y1

    tx, dy = f(x), f(r(B, S, D))
    y = ex.forward(tx)
    assert rel(y.numpy(), ref) < 1e-5
    ex.backward(dy)
    keep = {k: t.numpy().copy() for k, t in grads.items()}
    assert all(np.isfinite(a).all() for a in keep.values())
    ex.set_policy("recompute_all")
    ex.forward(tx)
    ex.backward(dy)
    assert all(np.array_equal(keep[k], grads[k].numpy()) for k in keep)


def test_python_gpt_example_trains_and_finetunes(tmp_path):
    """examples/python/train_gpt.py end to end on tiny settings: losses finite and falling, the
    adapter file written."""
    import importlib.util
    import os
    path = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python", "train_gpt.py")
    if not os.path.exists("/usr/share/common-licenses/GPL-3"):
        pytest.skip("the GPL-3 text (Debian's base-files) is absent")
    spec = importlib.util.spec_from_file_location("train_gpt_example", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = mod.main(["--device", "cpu", "--layers", "1", "--width", "32", "--seq", "16", "--steps", "6",
                    "--finetune-steps", "3", "--sample", "4", "--save-adapter", str(tmp_path / "a.safetensors")])
    assert len(out["base"]) == 6 and len(out["lora"]) == 3 and np.isfinite(out["base"] + out["lora"]).all()
    assert out["base"][-1] < out["base"][0]
    assert sorted(g.load_file(str(tmp_path / "a.safetensors"), device="cpu")) == \
        ["layers.0.out.a", "layers.0.out.b", "layers.0.qkv.a", "layers.0.qkv.b"]


def test_attention_stats_cpu_counts_nothing(ctx):
    """attention_stats: the CPU has only its kernel, so nothing counts as cuDNN or a fallback."""
    q = ctx.tensor(RNG.standard_normal((1, 2, 5, 8)).astype(np.float32))
    g.scaled_dot_product_attention(q, q, q, is_causal=True)
    st = g.attention_stats(ctx, reset=True)
    assert st == {"cudnn_calls": 0, "fallback_calls": 0, "fallback_by_reason": {}}
    assert g.transformer.C.gpucore_attention_fallback_reason_text(6).decode() == "grouped-query attention"
