"""Transformer ops with PyTorch's names: fused scaled dot-product attention (forward and
backward) over ``gpucore_attention_forward`` / ``_backward`` (include/gpucore.h,
"attention and transformer ops").

Tensors are ``[batch, heads, seq, head_dim]`` with any strides: a ``[B, S, H, D]``
projection passed as ``x.permute(0, 2, 1, 3)`` is read in place. f32/f16/bf16 with f32
accumulation; head_dim up to 256. There is no autograd: the backward is its own function
taking the forward's output and its per-row log-sum-exp (``return_stats=True``).
"""
from __future__ import annotations

import ctypes
import math
from ctypes import byref, c_double, c_int32, c_int64, c_uint64, c_void_p
from typing import Any, Optional, Tuple

from ._lib import C
from ._op_args import _opt, _out, _same_ctx, _stream, _tensor
from ._validate import UINT64_MAX, to_float, to_int
from .context import DeviceLike, Stream, get_context
from .errors import InvalidArgumentError, ShapeMismatchError
from .nn import fallback_stats
from .quant import QWeight
from .tensor import Tensor, _generator, empty

__all__ = ["AttentionOptions", "scaled_dot_product_attention", "scaled_dot_product_attention_backward",
           "attention_stats"]


class AttentionOptions(ctypes.Structure):
    """ctypes mirror of ``gpucore_attention_options``."""
    _fields_ = [("struct_size", c_int64), ("scale", c_double), ("is_causal", c_int32), ("algo", c_int32),
                ("dropout_p", c_double), ("seed", c_uint64), ("offset", c_uint64)]


_FALLBACK_REASONS = 10  # GPUCORE_ATTN_FALLBACK_REASONS


class AttentionStats(ctypes.Structure):
    """ctypes mirror of ``gpucore_attention_stats``."""
    _fields_ = [("struct_size", c_int64), ("cudnn_calls", c_int64), ("fallback_calls", c_int64),
                ("fallback_by_reason", c_int64 * _FALLBACK_REASONS)]


def attention_stats(device: DeviceLike = None, reset: bool = False) -> dict:
    """How the device's attention calls ran (CUDA): ``cudnn_calls`` on cuDNN's SDPA engines,
    ``fallback_calls`` on the kernel although cuDNN was wanted, and ``fallback_by_reason``
    ({reason text: count}, nonzero ones). Zeros on the CPU. ``reset``: zero them after reading."""
    s, by = fallback_stats(get_context(device), AttentionStats, C.gpucore_attention_get_stats,
                           C.gpucore_attention_reset_stats, C.gpucore_attention_fallback_reason_text, reset)
    return {"cudnn_calls": s.cudnn_calls, "fallback_calls": s.fallback_calls, "fallback_by_reason": by}


def _options(q: Tensor, dropout_p: float, is_causal: bool, scale: Optional[float], seed: int,
             offset: int) -> AttentionOptions:
    o = AttentionOptions()
    C.gpucore_attention_options_init(byref(o))
    if scale is not None:
        sv = to_float(scale, "scale")
        if not sv > 0 or math.isinf(sv):
            raise InvalidArgumentError("scale must be a finite number > 0, not %r" % (scale,))
        o.scale = sv
    o.is_causal = 1 if is_causal else 0
    o.dropout_p = to_float(dropout_p, "dropout_p")
    o.seed = seed
    o.offset = offset
    return o


def _qkv(query: Any, key: Any, value: Any, enable_gqa: bool) -> Tuple[Tensor, Tensor, Tensor]:
    q, k, v = _tensor(query, "query"), _tensor(key, "key"), _tensor(value, "value")
    for t, n in ((q, "query"), (k, "key"), (value, "value")):
        if len(t.shape) != 4:
            raise ShapeMismatchError("%s has shape %s; attention takes 4-d [batch, heads, seq, head_dim] "
                                     "tensors (permute a [B, S, H, D] projection with .permute(0, 2, 1, 3))"
                                     % (n, tuple(t.shape)))
    if q.shape[1] != k.shape[1] and not enable_gqa:
        raise ShapeMismatchError("query has %d heads and key %d; pass enable_gqa=True for grouped-query "
                                 "attention" % (q.shape[1], k.shape[1]))
    _same_ctx(q._ctx, (k, "key"), (v, "value"))
    return q, k, v


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Optional[Tensor] = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: Optional[float] = None,
                                 enable_gqa: bool = False, return_stats: bool = False, *,
                                 seed: Optional[int] = None, offset: Optional[int] = None,
                                 kv_lengths: Optional[Tensor] = None, out: Optional[Tensor] = None,
                                 stream: Optional[Stream] = None) -> Any:
    """softmax(query·keyᵀ·scale + mask)·value, as ``torch.nn.functional.scaled_dot_product_attention``.

    query [B, H, L, E], key [B, Hkv, S, E], value [B, Hkv, S, Ev] -> [B, H, L, Ev]. ``attn_mask``
    broadcasts to [B, H, L, S]: f32 / the query's dtype (added; -inf masks out) or uint8 (boolean,
    nonzero = attend, PyTorch's bool masks). ``is_causal``: key j > query i is masked (top-left
    aligned, as PyTorch). ``scale`` None: 1/sqrt(E). ``enable_gqa``: Hkv may divide H.
    ``kv_lengths`` (int32/int64 [B], an extension): keys past each length are masked. A row that
    admits no key gives 0 (PyTorch's math path gives NaN).

    Dropout uses Philox (seed, offset) like :func:`gpucore.dropout`; without ``seed`` the default
    generator is used and advanced. To run the backward with dropout, pass seed/offset yourself
    and give the same ones to :func:`scaled_dot_product_attention_backward`.

    ``return_stats=True`` returns ``(out, lse)``: lse is the f32 [B, H, L] log-sum-exp of each
    score row, which the backward needs (memory O(seq): no L×S matrix is ever stored)."""
    q, k, v = _qkv(query, key, value, enable_gqa)
    ctx = q._ctx
    _same_ctx(ctx, (attn_mask, "attn_mask"), (kv_lengths, "kv_lengths"), (out, "out"))
    B, H, L, _ = q.shape
    o = _out(out, (B, H, L, v.shape[3]), q.dtype, ctx)
    lse = empty((B, H, L), "float32", device=ctx) if return_stats else None
    pv = to_float(dropout_p, "dropout_p")
    if seed is None:
        sd = _generator["seed"]
        off = _generator["offset"] if offset is None else to_int(offset, "offset", 0, UINT64_MAX)
        if pv > 0:
            _generator["offset"] = (off + C.gpucore_random_offset_advance(B * H * L * k.shape[2], 0)) & UINT64_MAX
    else:
        sd = to_int(seed, "seed", 0, UINT64_MAX)
        off = 0 if offset is None else to_int(offset, "offset", 0, UINT64_MAX)
    opts = _options(q, pv, is_causal, scale, sd, off)
    C.gpucore_attention_forward(o.handle, _opt(lse, "lse"), q.handle, k.handle, v.handle, _opt(attn_mask, "attn_mask"),
                                _opt(kv_lengths, "kv_lengths"), byref(opts), _stream(ctx, stream))
    return (o, lse) if return_stats else o


def scaled_dot_product_attention_backward(grad_out: Tensor, query: Tensor, key: Tensor, value: Tensor, out: Tensor,
                                          lse: Tensor, attn_mask: Optional[Tensor] = None, dropout_p: float = 0.0,
                                          is_causal: bool = False, scale: Optional[float] = None,
                                          enable_gqa: bool = False, *, seed: int = 0, offset: int = 0,
                                          kv_lengths: Optional[Tensor] = None, need_query_grad: bool = True,
                                          need_kv_grad: bool = True,
                                          stream: Optional[Stream] = None) -> Tuple[Optional[Tensor], ...]:
    """Returns (dq, dk, dv) of :func:`scaled_dot_product_attention` given grad_out and the forward's
    out and lse (``return_stats=True``), with the forward's mask, causality, scale, dropout and
    (seed, offset). With GQA, dk/dv sum over each group's query heads. The probabilities are
    recomputed (O(seq) memory); the result does not depend on the thread count or run."""
    q, k, v = _qkv(query, key, value, enable_gqa)
    ctx = q._ctx
    g, o, ls = _tensor(grad_out, "grad_out"), _tensor(out, "out"), _tensor(lse, "lse")
    _same_ctx(ctx, (g, "grad_out"), (o, "out"), (ls, "lse"), (attn_mask, "attn_mask"), (kv_lengths, "kv_lengths"))
    dq = empty(q.shape, q.dtype, device=ctx) if need_query_grad else None
    dk = empty(k.shape, k.dtype, device=ctx) if need_kv_grad else None
    dv = empty(v.shape, v.dtype, device=ctx) if need_kv_grad else None
    opts = _options(q, to_float(dropout_p, "dropout_p"), is_causal, scale, to_int(seed, "seed", 0, UINT64_MAX),
                    to_int(offset, "offset", 0, UINT64_MAX))
    C.gpucore_attention_backward(_opt(dq, "dq"), _opt(dk, "dk"), _opt(dv, "dv"), g.handle, q.handle, k.handle,
                                 v.handle, o.handle, ls.handle, _opt(attn_mask, "attn_mask"),
                                 _opt(kv_lengths, "kv_lengths"), byref(opts), _stream(ctx, stream))
    return dq, dk, dv


# ---------------------------------------------------------------- RoPE, GLU, residual + norm

GLU_KINDS = {"swiglu": 0, "silu": 0, "geglu": 1, "gelu_tanh": 1, "tanh": 1, "gelu": 2, "gelu_erf": 2, "none": 2}


def rotary_embedding(x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool = False, out: Optional[Tensor] = None,
                     inplace: bool = False, stream: Optional[Stream] = None) -> Tensor:
    """Rotary position embedding of x [B, H, S, D] (any strides, e.g. a q/k view) with cos and sin
    [S, R/2] (R <= D rotary dims; the rest are copied). interleaved: pairs (2p, 2p+1) (GPT-J), else
    (p, p + R/2) (GPT-NeoX / LLaMA). ``inplace=True`` rotates x itself."""
    t = _tensor(x, "x")
    _same_ctx(t._ctx, (cos, "cos"), (sin, "sin"), (out, "out"))
    o = t if inplace else _out(out, t.shape, t.dtype, t._ctx)
    C.gpucore_rotary_embedding(o.handle, t.handle, _tensor(cos, "cos").handle, _tensor(sin, "sin").handle,
                               1 if interleaved else 0, _stream(t._ctx, stream))
    return o


def rotary_embedding_backward(grad_out: Tensor, cos: Tensor, sin: Tensor, interleaved: bool = False,
                              out: Optional[Tensor] = None, stream: Optional[Stream] = None) -> Tensor:
    """Gradient of :func:`rotary_embedding`: grad_out rotated back (by -theta)."""
    t = _tensor(grad_out, "grad_out")
    _same_ctx(t._ctx, (cos, "cos"), (sin, "sin"), (out, "out"))
    o = _out(out, t.shape, t.dtype, t._ctx)
    C.gpucore_rotary_embedding_backward(o.handle, t.handle, _tensor(cos, "cos").handle, _tensor(sin, "sin").handle,
                                        1 if interleaved else 0, _stream(t._ctx, stream))
    return o


def _glu_kind(activation: str) -> int:
    k = GLU_KINDS.get(str(activation).lower())
    if k is None:
        raise InvalidArgumentError("unknown GLU activation %r; use one of %s" % (activation, ", ".join(GLU_KINDS)))
    return k


def glu(gate: Tensor, up: Tensor, activation: str = "swiglu", out: Optional[Tensor] = None,
        stream: Optional[Stream] = None) -> Tensor:
    """act(gate) * up: "swiglu" (SiLU), "geglu" (GELU tanh form) or "gelu_erf"."""
    g, u = _tensor(gate, "gate"), _tensor(up, "up")
    _same_ctx(g._ctx, (u, "up"), (out, "out"))
    o = _out(out, g.shape, g.dtype, g._ctx)
    C.gpucore_glu(o.handle, g.handle, u.handle, _glu_kind(activation), _stream(g._ctx, stream))
    return o


def glu_backward(grad_out: Tensor, gate: Tensor, up: Tensor, activation: str = "swiglu",
                 stream: Optional[Stream] = None) -> Tuple[Tensor, Tensor]:
    """(dgate, dup) of :func:`glu`."""
    d, g, u = _tensor(grad_out, "grad_out"), _tensor(gate, "gate"), _tensor(up, "up")
    _same_ctx(g._ctx, (u, "up"), (d, "grad_out"))
    dg, du = empty(g.shape, g.dtype, device=g._ctx), empty(g.shape, g.dtype, device=g._ctx)
    C.gpucore_glu_backward(dg.handle, du.handle, d.handle, g.handle, u.handle, _glu_kind(activation),
                           _stream(g._ctx, stream))
    return dg, du


def swiglu(gate: Tensor, up: Tensor, out: Optional[Tensor] = None, stream: Optional[Stream] = None) -> Tensor:
    """silu(gate) * up (LLaMA's feed-forward gate)."""
    return glu(gate, up, "swiglu", out, stream)


def swiglu_backward(grad_out: Tensor, gate: Tensor, up: Tensor,
                    stream: Optional[Stream] = None) -> Tuple[Tensor, Tensor]:
    """(dgate, dup) of :func:`swiglu`."""
    return glu_backward(grad_out, gate, up, "swiglu", stream)


def residual_norm(x: Tensor, residual: Tensor, weight: Optional[Tensor] = None, bias: Optional[Tensor] = None,
                  eps: float = 1e-5, norm: str = "rms", inplace: bool = False, return_stats: bool = False,
                  stream: Optional[Stream] = None) -> Any:
    """Fused h = x + residual; y = RMSNorm(h) (norm="rms") or LayerNorm(h) (norm="layer") over the
    last dim, in one pass. Returns (y, h), or (y, h, mean, rstd) with return_stats (mean None for
    RMSNorm) for :func:`residual_norm_backward`. ``inplace=True`` writes h into residual."""
    t, r = _tensor(x, "x"), _tensor(residual, "residual")
    if norm not in ("rms", "layer"):
        raise InvalidArgumentError("norm must be 'rms' or 'layer', not %r" % (norm,))
    ctx = t._ctx
    _same_ctx(ctx, (r, "residual"), (weight, "weight"), (bias, "bias"))
    y = empty(t.shape, t.dtype, device=ctx)
    h = r if inplace else empty(t.shape, t.dtype, device=ctx)
    mu = rs = None
    if return_stats:
        rs = empty(t.shape[:-1], "float32", device=ctx)
        mu = empty(t.shape[:-1], "float32", device=ctx) if norm == "layer" else None
    C.gpucore_residual_norm(y.handle, h.handle, _opt(mu, "mean"), _opt(rs, "rstd"), t.handle, r.handle,
                            _opt(weight, "weight"), _opt(bias, "bias"), 1 if norm == "layer" else 0, to_float(eps, "eps"),
                            _stream(ctx, stream))
    return (y, h, mu, rs) if return_stats else (y, h)


def residual_norm_backward(grad_y: Tensor, grad_h: Optional[Tensor], h: Tensor, mean: Optional[Tensor], rstd: Tensor,
                           weight: Optional[Tensor] = None, norm: str = "rms", weight_grad: bool = True,
                           stream: Optional[Stream] = None) -> Tuple[Tensor, Optional[Tensor], Optional[Tensor]]:
    """(dx, dweight, dbias) of :func:`residual_norm`: dx (also the residual's gradient) is the norm's
    backward of grad_y plus grad_h (the gradient reaching h; None: 0)."""
    dy, hh = _tensor(grad_y, "grad_y"), _tensor(h, "h")
    ctx = hh._ctx
    _same_ctx(ctx, (dy, "grad_y"), (grad_h, "grad_h"), (mean, "mean"), (rstd, "rstd"), (weight, "weight"))
    dx = empty(hh.shape, hh.dtype, device=ctx)
    dw = db = None
    if weight is not None and weight_grad:
        w = _tensor(weight, "weight")
        dw = empty(w.shape, w.dtype, device=ctx)
        db = empty(w.shape, w.dtype, device=ctx) if norm == "layer" else None
    C.gpucore_residual_norm_backward(dx.handle, _opt(dw, "dweight"), _opt(db, "dbias"), dy.handle, _opt(grad_h, "grad_h"),
                                     hh.handle, _opt(mean, "mean"), _opt(rstd, "rstd"), _opt(weight, "weight"),
                                     1 if norm == "layer" else 0, _stream(ctx, stream))
    return dx, dw, db


__all__ += ["rotary_embedding", "rotary_embedding_backward", "glu", "glu_backward", "swiglu", "swiglu_backward",
            "residual_norm", "residual_norm_backward"]


# ---------------------------------------------------------------- LoRA linear

class LoraOptions(ctypes.Structure):
    """ctypes mirror of ``gpucore_lora_options``."""
    _fields_ = [("struct_size", c_int64), ("scale", c_double), ("dropout_p", c_double), ("seed", c_uint64),
                ("offset", c_uint64), ("w_scale", c_void_p), ("w_quant", c_void_p)]


def _lora_options(scale: float, dropout_p: float, seed: int, offset: int,
                  weight_scale: Optional[Tensor] = None, weight: Any = None) -> LoraOptions:
    o = LoraOptions()
    C.gpucore_lora_options_init(byref(o))
    o.scale = to_float(scale, "scale")
    o.dropout_p = to_float(dropout_p, "dropout_p")
    o.seed = to_int(seed, "seed", 0, UINT64_MAX)
    o.offset = to_int(offset, "offset", 0, UINT64_MAX)
    o.w_scale = _opt(weight_scale, "weight_scale")
    if isinstance(weight, QWeight):  # a quantized base: read from w_quant, the w argument NULL
        o.w_quant = ctypes.addressof(weight._c)
    return o


def _base(weight: Any) -> Tuple[Any, Tuple[int, int], Any]:
    """(what the C call's w argument gets, W's [out, in], the tensor for the context check)."""
    if isinstance(weight, QWeight):
        return None, weight.shape, weight.data
    w = _tensor(weight, "weight")
    return w.handle, tuple(w.shape), w


def lora_linear(x: Tensor, weight: Tensor, bias: Optional[Tensor], lora_a: Tensor, lora_b: Tensor,
                scale: float = 1.0, dropout_p: float = 0.0, *, seed: Optional[int] = None,
                offset: Optional[int] = None, return_xa: bool = False, out: Optional[Tensor] = None,
                weight_scale: Optional[Tensor] = None, stream: Optional[Stream] = None) -> Any:
    """y = x·weightᵀ + bias + scale·(dropout(x)·lora_aᵀ)·lora_bᵀ (``gpucore_lora_forward``).

    x [..., in], weight [out, in] (frozen), bias [out] or None, lora_a [r, in], lora_b [out, r];
    one dtype (float32/float16/bfloat16), except that weight may be a :class:`gpucore.QWeight`
    (QLoRA: the quantized base is never dequantized whole) or float8_e4m3/float8_e5m2 with
    ``weight_scale`` (a one-element float32 tensor, required then): the base is
    decode(weight)·weight_scale, dequantised to x's dtype for each call. ``scale`` is LoRA's alpha/r. Dropout acts on the
    adapter's input only, with Philox (seed, offset) as :func:`gpucore.dropout`; without ``seed``
    the default generator is used and advanced (pass seed/offset yourself to replay it in
    :func:`lora_linear_backward`). ``return_xa=True`` returns ``(y, xa)``, xa = dropout(x)·lora_aᵀ
    [..., r], which the backward can reuse."""
    t, a, b = _tensor(x, "x"), _tensor(lora_a, "lora_a"), _tensor(lora_b, "lora_b")
    wh, wshape, w = _base(weight)
    ctx = t._ctx
    _same_ctx(ctx, (w, "weight"), (bias, "bias"), (a, "lora_a"), (b, "lora_b"), (out, "out"),
              (weight_scale, "weight_scale"))
    if len(t.shape) < 1 or len(wshape) != 2 or len(a.shape) != 2:
        raise ShapeMismatchError("lora_linear: x must be [..., in], weight [out, in] and lora_a [r, in]; got %s, %s, %s"
                                 % (tuple(t.shape), wshape, tuple(a.shape)))
    y = _out(out, tuple(t.shape[:-1]) + (wshape[0],), t.dtype, ctx)
    xa = empty(tuple(t.shape[:-1]) + (a.shape[0],), t.dtype, device=ctx) if return_xa else None
    pv = to_float(dropout_p, "dropout_p")
    if seed is None:
        sd = _generator["seed"]
        off = _generator["offset"] if offset is None else to_int(offset, "offset", 0, UINT64_MAX)
        if pv > 0:
            _generator["offset"] = (off + C.gpucore_random_offset_advance(t.numel(), 0)) & UINT64_MAX
    else:
        sd, off = seed, 0 if offset is None else offset
    opts = _lora_options(scale, pv, sd, off, weight_scale, weight)
    C.gpucore_lora_forward(y.handle, _opt(xa, "xa"), t.handle, wh, _opt(bias, "bias"), a.handle, b.handle,
                           byref(opts), _stream(ctx, stream))
    return (y, xa) if return_xa else y


def lora_linear_backward(grad_out: Tensor, x: Tensor, weight: Tensor, lora_a: Tensor, lora_b: Tensor,
                         scale: float = 1.0, dropout_p: float = 0.0, *, seed: int = 0, offset: int = 0,
                         xa: Optional[Tensor] = None, need_input_grad: bool = True,
                         weight_scale: Optional[Tensor] = None,
                         stream: Optional[Stream] = None) -> Tuple[Optional[Tensor], Tensor, Tensor]:
    """(dx, dlora_a, dlora_b) of :func:`lora_linear` (no gradient for the frozen weight and bias),
    with the forward's scale, dropout_p, seed and offset; xa: the forward's ``return_xa`` output
    (None: recomputed); weight_scale: as the forward's (an fp8 weight). ``need_input_grad=False``
    skips dx (returns None for it)."""
    g, t = _tensor(grad_out, "grad_out"), _tensor(x, "x")
    wh, _, w = _base(weight)
    a, b = _tensor(lora_a, "lora_a"), _tensor(lora_b, "lora_b")
    ctx = t._ctx
    _same_ctx(ctx, (g, "grad_out"), (w, "weight"), (a, "lora_a"), (b, "lora_b"), (xa, "xa"),
              (weight_scale, "weight_scale"))
    dx = empty(t.shape, t.dtype, device=ctx) if need_input_grad else None
    da, db = empty(a.shape, a.dtype, device=ctx), empty(b.shape, b.dtype, device=ctx)
    opts = _lora_options(scale, dropout_p, seed, offset, weight_scale, weight)
    C.gpucore_lora_backward(_opt(dx, "dx"), da.handle, db.handle, g.handle, t.handle, wh, a.handle, b.handle,
                            _opt(xa, "xa"), byref(opts), _stream(ctx, stream))
    return dx, da, db


def lora_merge(weight: Tensor, lora_a: Tensor, lora_b: Tensor, scale: float = 1.0,
               stream: Optional[Stream] = None) -> Tensor:
    """weight += scale·lora_b·lora_a in place (then a plain linear layer computes the adapted
    layer); returns weight. :func:`lora_unmerge` takes the adapter out again."""
    w = _tensor(weight, "weight")
    _same_ctx(w._ctx, (lora_a, "lora_a"), (lora_b, "lora_b"))
    C.gpucore_lora_merge(w.handle, _tensor(lora_a, "lora_a").handle, _tensor(lora_b, "lora_b").handle,
                         to_float(scale, "scale"), _stream(w._ctx, stream))
    return w


def lora_unmerge(weight: Tensor, lora_a: Tensor, lora_b: Tensor, scale: float = 1.0,
                 stream: Optional[Stream] = None) -> Tensor:
    """weight -= scale·lora_b·lora_a in place (the inverse of :func:`lora_merge`); returns weight."""
    w = _tensor(weight, "weight")
    _same_ctx(w._ctx, (lora_a, "lora_a"), (lora_b, "lora_b"))
    C.gpucore_lora_unmerge(w.handle, _tensor(lora_a, "lora_a").handle, _tensor(lora_b, "lora_b").handle,
                           to_float(scale, "scale"), _stream(w._ctx, stream))
    return w


__all__ += ["LoraOptions", "lora_linear", "lora_linear_backward", "lora_merge", "lora_unmerge"]
