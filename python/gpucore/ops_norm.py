"""LayerNorm and RMSNorm with PyTorch's arguments (normalisation over several trailing dims,
rows of no elements) and their backwards. Re-exported by :mod:`gpucore.ops`; the common rules
there apply.
"""
from __future__ import annotations

import numbers
from typing import Any, Optional, Tuple

import numpy as np

from ._lib import C
from ._op_args import _opt, _out, _same_ctx, _stream, _tensor
from ._validate import to_float
from .context import Stream
from .errors import InvalidArgumentError, ShapeMismatchError
from .tensor import Tensor, empty, full

__all__ = ["layer_norm", "layer_norm_backward", "rms_norm", "rms_norm_backward"]


def _normalized_dims(x: Tensor, normalized_shape: Any, fn: str) -> int:
    """How many trailing dims of x ``normalized_shape`` names (None: the last one)."""
    if normalized_shape is None:
        return 1
    ns = (normalized_shape,) if isinstance(normalized_shape, numbers.Integral) else tuple(normalized_shape)
    if not ns or len(ns) > len(x.shape) or tuple(x.shape[len(x.shape) - len(ns):]) != ns:
        raise ShapeMismatchError("%s: normalized_shape %s must be the trailing dims of the input %s" %
                                 (fn, ns, x.shape))
    return len(ns)


def _check_normalized(x: Tensor, normalized_shape: Any, fn: str) -> None:
    if _normalized_dims(x, normalized_shape, fn) != 1:
        raise ShapeMismatchError("%s: normalized_shape %s must be the last dim of the input %s (only "
                                 "normalisation over the last dim is supported)" % (fn, normalized_shape, x.shape))


def layer_norm(input: Tensor, normalized_shape: Any = None, weight: Optional[Tensor] = None,
               bias: Optional[Tensor] = None, eps: float = 1e-5, return_stats: bool = False,
               out: Optional[Tensor] = None, stream: Optional[Stream] = None) -> Any:
    """LayerNorm over the trailing dims ``normalized_shape`` names (None: the last dim):
    (x - mean) * rstd * weight + bias, rstd = 1/sqrt(var + eps) (biased variance), as
    torch.nn.functional.layer_norm. weight and bias: ``normalized_shape``, both or neither
    (their dtype may differ from the input's, e.g. f32 parameters for bf16
    activations). Several trailing dims are normalised as one row of their product. With
    ``return_stats=True`` returns ``(y, mean, rstd)`` (f32, input's leading shape) for
    :func:`layer_norm_backward`; else y."""
    x = _tensor(input, "input")
    nd = _normalized_dims(x, normalized_shape, "layer_norm")
    ctx = x._ctx
    _same_ctx(ctx, (weight, "weight"), (bias, "bias"), (out, "out"))
    lead, row = tuple(x.shape[:len(x.shape) - nd]), tuple(x.shape[len(x.shape) - nd:])
    for t, what in ((weight, "weight"), (bias, "bias")):
        if t is not None and tuple(_tensor(t, what).shape) != row:
            raise ShapeMismatchError("layer_norm: %s has shape %s but normalized_shape is %s" % (what, t.shape, row))
    if (weight is None) != (bias is None):
        raise InvalidArgumentError("layer_norm: give both weight and bias or neither")
    o = _out(out, x.shape, x.dtype, ctx)
    if not all(row):  # rows of no elements (PyTorch: an empty result; the statistics are NaN)
        if return_stats:
            return o, full(lead, float("nan"), "float32", device=ctx), full(lead, float("nan"), "float32", device=ctx)
        return o
    if nd != 1 or not x.shape:
        cols = int(np.prod(row)) if row else 1
        xr = x.reshape(lead + (cols,))
        w = weight.reshape((cols,)) if weight is not None else None
        b = bias.reshape((cols,)) if bias is not None else None
        res = layer_norm(xr, None, w, b, eps, return_stats, stream=stream)
        y = (res[0] if return_stats else res).reshape(x.shape)
        if out is not None:
            o.copy_(y, stream=stream)
            y = o
        return (y,) + tuple(res[1:]) if return_stats else y
    mu = rs = None
    if return_stats:
        mu = empty(lead, "float32", device=ctx)
        rs = empty(lead, "float32", device=ctx)
    C.gpucore_layer_norm(o.handle, _opt(mu, "mean"), _opt(rs, "rstd"), x.handle, _opt(weight, "weight"),
                         _opt(bias, "bias"), to_float(eps, "eps"), _stream(ctx, stream))
    return (o, mu, rs) if return_stats else o


def layer_norm_backward(grad_output: Tensor, input: Tensor, mean: Tensor, rstd: Tensor,
                        weight: Optional[Tensor] = None, input_grad: bool = True, weight_grad: bool = True,
                        stream: Optional[Stream] = None) -> Tuple[Optional[Tensor], Optional[Tensor],
                                                                  Optional[Tensor]]:
    """Returns (dx, dweight, dbias) of :func:`layer_norm` (mean/rstd from return_stats=True).
    dweight/dbias are None without weight or with weight_grad=False; dx None with input_grad=False."""
    dy = _tensor(grad_output, "grad_output")
    x = _tensor(input, "input")
    ctx = dy._ctx
    _same_ctx(ctx, (x, "input"), (mean, "mean"), (rstd, "rstd"), (weight, "weight"))
    lead = tuple(_tensor(mean, "mean").shape)
    if len(lead) != len(x.shape) - 1 and len(lead) < len(x.shape) and tuple(x.shape[:len(lead)]) == lead:
        # several trailing dims normalised (mean has x's leading shape): rows of their product
        row = tuple(x.shape[len(lead):])
        cols = int(np.prod(row))
        w = None if weight is None else _tensor(weight, "weight").reshape((cols,))
        res = layer_norm_backward(dy.reshape(lead + (cols,)), x.reshape(lead + (cols,)), mean, rstd, w, input_grad,
                                  weight_grad, stream)
        return tuple(None if t is None else t.reshape(x.shape if i == 0 else row) for i, t in enumerate(res))
    dx = empty(x.shape, x.dtype, device=ctx) if input_grad else None
    dw = db = None
    if weight is not None and weight_grad:
        w = _tensor(weight, "weight")
        dw = empty(w.shape, w.dtype, device=ctx)
        db = empty(w.shape, w.dtype, device=ctx)
    C.gpucore_layer_norm_backward(_opt(dx, "dx"), _opt(dw, "dw"), _opt(db, "db"), dy.handle, x.handle,
                                  _tensor(mean, "mean").handle, _tensor(rstd, "rstd").handle,
                                  _opt(weight, "weight"), _stream(ctx, stream))
    return dx, dw, db


def rms_norm(input: Tensor, normalized_shape: Any = None, weight: Optional[Tensor] = None, eps: float = 1e-6,
             return_stats: bool = False, out: Optional[Tensor] = None,
             stream: Optional[Stream] = None) -> Any:
    """RMSNorm over the last dim: x * rstd * weight, rstd = 1/sqrt(mean(x^2) + eps); weight
    [C] or None. With ``return_stats=True`` returns ``(y, rstd)`` for :func:`rms_norm_backward`."""
    x = _tensor(input, "input")
    _check_normalized(x, normalized_shape, "rms_norm")
    ctx = x._ctx
    _same_ctx(ctx, (weight, "weight"), (out, "out"))
    o = _out(out, x.shape, x.dtype, ctx)
    rs = empty(x.shape[:-1], "float32", device=ctx) if return_stats else None
    C.gpucore_rms_norm(o.handle, _opt(rs, "rstd"), x.handle, _opt(weight, "weight"), to_float(eps, "eps"),
                       _stream(ctx, stream))
    return (o, rs) if return_stats else o


def rms_norm_backward(grad_output: Tensor, input: Tensor, rstd: Tensor, weight: Optional[Tensor] = None,
                      input_grad: bool = True, weight_grad: bool = True,
                      stream: Optional[Stream] = None) -> Tuple[Optional[Tensor], Optional[Tensor]]:
    """Returns (dx, dweight) of :func:`rms_norm` (rstd from return_stats=True)."""
    dy = _tensor(grad_output, "grad_output")
    x = _tensor(input, "input")
    ctx = dy._ctx
    _same_ctx(ctx, (x, "input"), (rstd, "rstd"), (weight, "weight"))
    dx = empty(x.shape, x.dtype, device=ctx) if input_grad else None
    dw = None
    if weight is not None and weight_grad:
        w = _tensor(weight, "weight")
        dw = empty(w.shape, w.dtype, device=ctx)
    C.gpucore_rms_norm_backward(_opt(dx, "dx"), _opt(dw, "dw"), dy.handle, x.handle,
                                _tensor(rstd, "rstd").handle, _opt(weight, "weight"), _stream(ctx, stream))
    return dx, dw
