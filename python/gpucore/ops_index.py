"""The ops indexed by integer targets or indices, with PyTorch's arguments:
cross_entropy (class weight, label smoothing, probability targets, the (N, C, d1, ...)
and (C,) layouts) and its backward, embedding (padding_idx, max_norm) and its backward
(padding_idx, scale_grad_by_freq). Re-exported by :mod:`gpucore.ops`; the common rules
there apply.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from . import dtypes as _dt
from ._lib import C
from ._validate import to_float, to_int
from .context import Context, Stream
from ._op_args import TensorOrNumber, _is_number, _out, _same_ctx, _stream, _tensor
from .errors import InvalidArgumentError, ShapeMismatchError
from .ops_elementwise import cast, mul
from .tensor import Tensor, empty, full
from .tensor import tensor as _tensor_from_host

__all__ = ["cross_entropy", "cross_entropy_backward", "embedding", "embedding_backward"]


_CLASS_DIM_TORCH = 1000  # GPUCORE_CE_CLASS_DIM_TORCH: class dim 1, or 0 for (C,) logits
_FLOATS = (_dt.float32, _dt.float16, _dt.bfloat16, _dt.float64)
LOSS_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


def _loss_reduction(reduction: str) -> int:
    if reduction not in LOSS_REDUCTIONS:
        raise InvalidArgumentError("reduction must be 'none', 'mean' or 'sum', not %r" % (reduction,))
    return LOSS_REDUCTIONS[reduction]


def cross_entropy(input: Tensor, target: Tensor, weight: Optional[Tensor] = None, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0, out: Optional[Tensor] = None,
                  stream: Optional[Stream] = None) -> Tensor:
    """torch.nn.functional.cross_entropy: cross-entropy of softmax(input) against ``target``.

    input: logits (N, C), (N, C, d1, ...) (class dim 1) or unbatched (C,), any strides.
    target: integer classes (i32/i64, input's shape without the class dim) or class
    probabilities (a float tensor of input's shape). ``weight``: a [C] rescaling of each
    class (None: 1). ``label_smoothing`` ε in [0, 1]: the target mixes (1-ε)·target with ε/C
    uniform. Rows whose integer target is ``ignore_index`` count 0 and are not counted by
    "mean". "mean" divides by the summed weights of the counted targets (integer targets) or
    by the row count (probabilities). reduction "none" gives one loss per row (input's dtype,
    target's shape); "mean"/"sum" a 0-d f32 tensor. One fused, stable kernel for every case
    (gpucore_cross_entropy_forward_ex: no host sync, no copy of contiguous logits). A target
    outside [0, C) other than ignore_index gives NaN for its row (not checked on the host)."""
    x = _tensor(input, "input")
    t = _tensor(target, "target")
    r = _loss_reduction(reduction)
    eps = to_float(label_smoothing, "label_smoothing")
    if not 0.0 <= eps <= 1.0:
        raise InvalidArgumentError("cross_entropy: label_smoothing must be in [0, 1], not %r" % (eps,))
    ctx = x._ctx
    _same_ctx(ctx, (t, "target"), (weight, "weight"), (out, "out"))
    if not x.shape:
        raise ShapeMismatchError("cross_entropy: input must be (C,), (N, C) or (N, C, d1, ...), not 0-d")
    if t.dtype in _FLOATS and t.dtype != x.dtype:
        t = cast(t, x.dtype, stream=stream)
    rshape = tuple(x.shape[:1] + x.shape[2:]) if len(x.shape) > 1 else ()
    if out is None:
        o = empty(rshape, x.dtype, device=ctx) if r == 0 else empty((), "float32", device=ctx)
    else:
        o = _tensor(out, "out")
    C.gpucore_cross_entropy_forward_ex(o.handle, x.handle, t.handle,
                                       None if weight is None else _tensor(weight, "weight").handle,
                                       to_int(ignore_index, "ignore_index"), r, eps, _CLASS_DIM_TORCH,
                                       _stream(ctx, stream))
    return o


def cross_entropy_backward(input: Tensor, target: Tensor, grad_output: TensorOrNumber = 1.0,
                           ignore_index: int = -100, reduction: str = "mean", out: Optional[Tensor] = None,
                           stream: Optional[Stream] = None, *, weight: Optional[Tensor] = None,
                           label_smoothing: float = 0.0) -> Tensor:
    """d loss / d input of :func:`cross_entropy` with the same arguments: with q the row's
    target mass (class index t: w_c ε/C + [c = t] (1-ε) w_t; probabilities p: w_c ((1-ε) p_c +
    ε/C)), dx = grad * (Σ_c q_c · softmax(input) - q); 0 on ignored rows; "mean" divides by the
    summed weight of the counted targets (indices) or by the row count (probabilities). The
    layouts of :func:`cross_entropy` ((N, C), (N, C, d1, ...) with class dim 1, (C,)), in one
    kernel (gpucore_cross_entropy_backward_ex). ``grad_output``: the loss's gradient (a tensor
    of the loss's shape, or a number for a reduced loss, e.g. the loss scale). out may be
    input (in place)."""
    x = _tensor(input, "input")
    t = _tensor(target, "target")
    r = _loss_reduction(reduction)
    eps = to_float(label_smoothing, "label_smoothing")
    if not 0.0 <= eps <= 1.0:
        raise InvalidArgumentError("cross_entropy_backward: label_smoothing must be in [0, 1], not %r" % (eps,))
    ctx = x._ctx
    rshape = tuple(x.shape[:1] + x.shape[2:]) if len(x.shape) > 1 else ()
    if _is_number(grad_output):
        if r == 0:
            dl = full(rshape, float(grad_output), x.dtype, device=ctx)  # type: ignore[arg-type]
        else:
            dl = full((), float(grad_output), "float32", device=ctx)  # type: ignore[arg-type]
    else:
        dl = _tensor(grad_output, "grad_output")
    _same_ctx(ctx, (t, "target"), (dl, "grad_output"), (out, "out"), (weight, "weight"))
    o = _out(out, x.shape, x.dtype, ctx)
    if t.dtype in _FLOATS and t.dtype != x.dtype:
        t = cast(t, x.dtype, stream=stream)
    C.gpucore_cross_entropy_backward_ex(o.handle, dl.handle, x.handle, t.handle,
                                        None if weight is None else _tensor(weight, "weight").handle,
                                        to_int(ignore_index, "ignore_index"), r, eps, _CLASS_DIM_TORCH,
                                        _stream(ctx, stream))
    return o


def embedding(input: Tensor, weight: Tensor, out: Optional[Tensor] = None,
              stream: Optional[Stream] = None, *, padding_idx: Optional[int] = None,
              max_norm: Optional[float] = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
              sparse: bool = False) -> Tensor:
    """out[i..., :] = weight[input[i...], :]; input: i32/i64 indices of any shape, weight [V, D].
    An index outside [0, V) gives a row of NaN (not checked on the host).

    PyTorch's options (torch.nn.functional.embedding): ``padding_idx`` (negative counts from
    the end) and ``scale_grad_by_freq`` only change the gradient (pass them to
    :func:`embedding_backward`); ``max_norm``: first renormalise, in place in ``weight``, each
    row that ``input`` references and whose ``norm_type``-norm exceeds max_norm, to
    max_norm / (norm + 1e-7) times itself, as PyTorch (a host round trip for the indices and
    norms). ``sparse`` is accepted for PyTorch code: there is no autograd here, and
    :func:`embedding_backward` gives the dense gradient."""
    idx = _tensor(input, "input")
    w = _tensor(weight, "weight")
    if len(w.shape) != 2:
        raise ShapeMismatchError("embedding: weight must be [V, D], not %s" % (w.shape,))
    if padding_idx is not None:
        _padding_row(padding_idx, w.shape[0])
    ctx = w._ctx
    _same_ctx(ctx, (idx, "input"), (out, "out"))
    if max_norm is not None:
        _embedding_renorm_(w, idx, to_float(max_norm, "max_norm"), to_float(norm_type, "norm_type"), stream)
    o = _out(out, tuple(idx.shape) + (w.shape[1],), w.dtype, ctx)
    C.gpucore_embedding(o.handle, w.handle, idx.handle, _stream(ctx, stream))
    return o


def _host_tensor(a: np.ndarray, dtype: Any, ctx: Context) -> Tensor:
    """A host float64 array as a new tensor of dtype (rounded through f32) on ctx."""
    return _tensor_from_host(np.ascontiguousarray(a, np.float32), dtype=dtype, device=ctx)


def _padding_row(padding_idx: int, num_weights: int) -> int:
    """PyTorch's padding_idx as a row index (negative counts from the end)."""
    p = to_int(padding_idx, "padding_idx", -num_weights, num_weights - 1)
    return p + num_weights if p < 0 else p


def _embedding_renorm_(w: Tensor, idx: Tensor, max_norm: float, norm_type: float, stream: Optional[Stream]) -> None:
    """torch.embedding_renorm_: rows of w that idx references with norm > max_norm scaled
    in place by max_norm / (norm + 1e-7)."""
    if not norm_type > 0:
        raise InvalidArgumentError("embedding: norm_type must be > 0, not %r" % (norm_type,))
    wh = np.asarray(cast(w, _dt.float64, stream=stream).numpy(), np.float64)
    rows = np.unique(np.asarray(idx.numpy()).reshape(-1).astype(np.int64))
    rows = rows[(rows >= 0) & (rows < w.shape[0])]
    norms = np.linalg.norm(wh[rows], ord=norm_type, axis=1) if rows.size else np.zeros(0)
    factor = np.ones((w.shape[0], 1))
    big = norms > max_norm
    factor[rows[big], 0] = max_norm / (norms[big] + 1e-7)
    if big.any():
        mul(w, _host_tensor(factor, w.dtype, w._ctx), out=w, stream=stream)


def embedding_backward(grad_output: Tensor, input: Tensor, num_weights: int, out: Optional[Tensor] = None,
                       stream: Optional[Stream] = None, *, padding_idx: Optional[int] = None,
                       scale_grad_by_freq: bool = False) -> Tensor:
    """dweight [num_weights, D]: row v sums grad_output rows whose index is v (deterministic;
    every row written, 0 where no index hits; out-of-range indices add nothing).
    ``padding_idx``: that row's gradient is 0 (PyTorch's padding entry is never trained).
    ``scale_grad_by_freq``: each gradient row divided by how often its index occurs in input
    (counted on the host)."""
    dy = _tensor(grad_output, "grad_output")
    idx = _tensor(input, "input")
    ctx = dy._ctx
    if not dy.shape:
        raise ShapeMismatchError("embedding_backward: grad_output must be [..., D]")
    _same_ctx(ctx, (idx, "input"), (out, "out"))
    nw = to_int(num_weights, "num_weights", 0)
    o = _out(out, (nw, dy.shape[-1]), dy.dtype, ctx)
    if scale_grad_by_freq:
        ih = np.asarray(idx.numpy()).reshape(-1).astype(np.int64)
        ok = (ih >= 0) & (ih < nw)
        counts = np.bincount(ih[ok], minlength=nw) if nw else np.zeros(0, np.int64)
        inv = np.ones(ih.shape)
        inv[ok] = 1.0 / counts[ih[ok]]
        dy = mul(dy, _host_tensor(inv.reshape(tuple(idx.shape) + (1,)), dy.dtype, ctx), stream=stream)
    if padding_idx is None:
        C.gpucore_embedding_backward(o.handle, dy.handle, idx.handle, _stream(ctx, stream))
    else:
        C.gpucore_embedding_backward_padding(o.handle, dy.handle, idx.handle, to_int(padding_idx, "padding_idx"),
                                             _stream(ctx, stream))
    return o
