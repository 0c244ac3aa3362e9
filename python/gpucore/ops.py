"""Tensor ops: elementwise math, activations, casts, dropout, reductions and the row
ops (softmax, norms, cross-entropy, embedding), each with its backward.

Names and argument orders follow PyTorch where they overlap (``relu``, ``gelu``,
``softmax``, ``log_softmax``, ``layer_norm``, ``rms_norm``, ``cross_entropy``,
``dropout``, ``embedding``, ``sum``, ``mean``, ...). There is no autograd: every
backward is its own function (``gelu_backward``, ``layer_norm_backward``, ...)
taking the gradient of the output and what the forward saved.

Common rules (from include/gpucore.h):
  * data tensors are f32, f16 or bf16 (math in f32, rounded to nearest even on
    store; f64 inside on the CPU backend for the row ops), all on one context;
  * inputs broadcast numpy-style to the output's shape (elementwise ops);
  * any strides are accepted; ``out=`` may be the same view as an input (in place)
    but must not otherwise overlap one;
  * every call is asynchronous on ``stream`` (None: the context's current stream);
    reading the result through ``numpy()`` waits for it.

Every function returns its result tensor (a new one unless ``out`` is given).
"""
from __future__ import annotations

from ctypes import c_int, c_void_p
from typing import Any, Optional, Sequence, Tuple, Union

from . import dtypes as _dt
from ._lib import C
from ._op_args import Number, TensorOrNumber, _out, _same_ctx, _stream, _tensor  # noqa: F401 (types: re-exported)
from ._validate import check_dim
from .context import Stream
from .errors import InvalidArgumentError, InvalidArgumentTypeError, ShapeMismatchError
from .ops_elementwise import _cast_to, _promoted_dtype
from .tensor import Tensor, empty  # noqa: F401 (empty: re-exported)

# This module holds the reductions, cat and softmax. It re-exports, with the library's op codes, the
# elementwise ops (ops_elementwise.py), LayerNorm and RMSNorm (ops_norm.py), and cross_entropy and
# embedding, the ops indexed by integer targets (ops_index.py).
from ._op_args import ACTIVATIONS  # noqa: F401,E402
from .ops_elementwise import (ABS, ADD, DIV, DIV_FLOOR, DIV_TRUNC, EXP, LOG, MAXIMUM, MINIMUM, MUL,  # noqa: F401
                              NEG, RSQRT, SQRT, SQUARE, SUB, abs, activation, activation_backward, add, axpy_,
                              bias_act, cast, clamp, div, dropout, dropout_backward, exp, gelu, gelu_backward, log,
                              maximum, minimum, mul, neg, relu, relu_backward, rsqrt, scale, sigmoid,
                              sigmoid_backward, silu, silu_backward, sqrt, square, sub, tanh, tanh_backward)
from .ops_index import (LOSS_REDUCTIONS, cross_entropy, cross_entropy_backward, embedding,  # noqa: F401
                        embedding_backward)
from .ops_norm import layer_norm, layer_norm_backward, rms_norm, rms_norm_backward  # noqa: F401

__all__ = [
    "cat", "add", "sub", "mul", "div", "maximum", "minimum", "exp", "log", "sqrt", "rsqrt", "abs", "neg", "square", "scale", "axpy_", "clamp",
    "activation", "activation_backward", "relu", "gelu", "silu", "sigmoid", "tanh", "relu_backward",
    "gelu_backward", "silu_backward", "sigmoid_backward", "tanh_backward", "bias_act", "cast", "dropout",
    "dropout_backward", "sum", "mean", "amax", "amin", "argmax", "sum_of_squares", "reduce", "bias_grad",
    "softmax", "log_softmax", "softmax_backward", "log_softmax_backward", "layer_norm",
    "layer_norm_backward", "rms_norm", "rms_norm_backward", "cross_entropy", "cross_entropy_backward",
    "embedding", "embedding_backward", "Number", "TensorOrNumber",
]

REDUCTIONS = {"sum": 0, "mean": 1, "max": 2, "min": 3, "argmax": 4, "sumsq": 5}
ALL_AXES = 0x7FFFFFFF


# ---------------------------------------------------------------- reductions

DimArg = Union[None, int, Sequence[int]]


def _reduced_dims(dim: DimArg, ndim: int) -> Optional[Tuple[int, ...]]:
    """PyTorch's dim argument as sorted dim indices (None: every element, flat)."""
    if dim is None:
        return None
    if isinstance(dim, (list, tuple)):
        if len(dim) == 0:  # dim=(): every dim
            return tuple(range(ndim))
        ds = [check_dim(d, max(ndim, 1)) for d in dim]
        if len(set(ds)) != len(ds):
            raise InvalidArgumentError("dim %s names a dim twice" % (tuple(dim),))
        return tuple(sorted(ds))
    return (check_dim(dim, max(ndim, 1)),)


def _with_dtype(a: Tensor, dtype: Any, stream: Optional[Stream]) -> Tensor:
    """PyTorch's dtype= argument: the input cast to dtype first (None: as it is)."""
    if dtype is None:
        return a
    dt = _dt.as_dtype(dtype)
    return a if dt == a.dtype else cast(a, dt, stream=stream)


def reduce(input: Tensor, op: str, dim: DimArg = None, keepdim: bool = False,
           out: Optional[Tensor] = None, stream: Optional[Stream] = None) -> Tensor:
    """Reduce over ``dim``: one dim, a tuple of dims (one pass over the merged dims; ``()``
    means every dim) or None (every element). op: "sum", "mean", "max", "min", "argmax"
    (one dim or None only), "sumsq". Deterministic. The result has input's dtype (i64 for
    argmax)."""
    a = _tensor(input, "input")
    if op not in REDUCTIONS:
        raise InvalidArgumentError("reduce: op must be one of %s, not %r" % (", ".join(REDUCTIONS), op))
    sh = a.shape
    dims = _reduced_dims(dim, len(sh))
    if dims is None or not sh:
        oshape: Tuple[int, ...] = tuple(1 for _ in sh) if keepdim else ()
    else:
        oshape = tuple(1 if i in dims else s for i, s in enumerate(sh)) if keepdim else \
            tuple(s for i, s in enumerate(sh) if i not in dims)
    _same_ctx(a._ctx, (out, "out"))
    o = _out(out, oshape, "int64" if op == "argmax" else a.dtype, a._ctx)
    st = _stream(a._ctx, stream)
    if dims is None or not sh:
        C.gpucore_reduce(REDUCTIONS[op], o.handle, a.handle, ALL_AXES, st)
    elif len(dims) == 1:
        C.gpucore_reduce(REDUCTIONS[op], o.handle, a.handle, dims[0], st)
    else:
        C.gpucore_reduce_dims(REDUCTIONS[op], o.handle, a.handle, (c_int * len(dims))(*dims), len(dims), st)
    return o


def sum(input: Tensor, dim: DimArg = None, keepdim: bool = False,  # noqa: A001
        dtype: Any = None, out: Optional[Tensor] = None, stream: Optional[Stream] = None) -> Tensor:
    """Sum over ``dim`` (an int, a tuple of dims, () or None: all elements); ``dtype``: cast
    the input to it first and return that dtype (PyTorch's rule)."""
    return reduce(_with_dtype(input, dtype, stream), "sum", dim, keepdim, out, stream)


def mean(input: Tensor, dim: DimArg = None, keepdim: bool = False, dtype: Any = None,
         out: Optional[Tensor] = None, stream: Optional[Stream] = None) -> Tensor:
    """Mean over ``dim`` (as :func:`sum`); NaN for an empty dim; ``dtype`` as :func:`sum`."""
    return reduce(_with_dtype(input, dtype, stream), "mean", dim, keepdim, out, stream)


def amax(input: Tensor, dim: DimArg = (), keepdim: bool = False, out: Optional[Tensor] = None,
         stream: Optional[Stream] = None) -> Tensor:
    """Maximum over ``dim`` (an int, a tuple, or () / None: all); NaN propagates."""
    return reduce(input, "max", dim, keepdim, out, stream)


def amin(input: Tensor, dim: DimArg = (), keepdim: bool = False, out: Optional[Tensor] = None,
         stream: Optional[Stream] = None) -> Tensor:
    """Minimum over ``dim`` (an int, a tuple, or () / None: all); NaN propagates."""
    return reduce(input, "min", dim, keepdim, out, stream)


def argmax(input: Tensor, dim: Optional[int] = None, keepdim: bool = False, out: Optional[Tensor] = None,
           stream: Optional[Stream] = None) -> Tensor:
    """Index (i64) of the first maximum over ``dim`` (None: flat index; keepdim then keeps
    every dim as 1, as PyTorch)."""
    return reduce(input, "argmax", dim, keepdim, out, stream)


def sum_of_squares(input: Tensor, dim: DimArg = None, keepdim: bool = False,
                   out: Optional[Tensor] = None, stream: Optional[Stream] = None) -> Tensor:
    """Sum of squares over ``dim`` (as :func:`sum`)."""
    return reduce(input, "sumsq", dim, keepdim, out, stream)


def bias_grad(grad_output: Tensor, out: Optional[Tensor] = None, stream: Optional[Stream] = None) -> Tensor:
    """Column sums: db[c] = sum of grad_output[..., c] (the bias gradient of a [..., C] output)."""
    dy = _tensor(grad_output, "grad_output")
    if not dy.shape:
        raise ShapeMismatchError("bias_grad: grad_output must have at least 1 dim")
    _same_ctx(dy._ctx, (out, "out"))
    o = _out(out, (dy.shape[-1],), dy.dtype, dy._ctx)
    C.gpucore_bias_grad(o.handle, dy.handle, _stream(dy._ctx, stream))
    return o


def cat(tensors: Sequence[Tensor], dim: int = 0, out: Optional[Tensor] = None,
        stream: Optional[Stream] = None) -> Tensor:
    """Concatenate tensors along ``dim`` (torch.cat). All share a dtype and context and
    match in every other dim; any strides. Returns ``out`` (a new tensor unless given)."""
    if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)):
        raise InvalidArgumentTypeError("cat: tensors must be a list or tuple of gpucore.Tensor")
    ts = [_tensor(t, "tensors[%d]" % i) for i, t in enumerate(tensors)]
    if not ts:
        raise InvalidArgumentError("cat: tensors is empty; give at least one tensor")
    first = ts[0]
    _same_ctx(first._ctx, *[(t, "tensors[%d]" % i) for i, t in enumerate(ts)], (out, "out"))
    if any(t._dtype is not first._dtype for t in ts) and out is None:
        dt = _promoted_dtype("cat", [t._dtype for t in ts])  # PyTorch's promotion, as for a + b
        ts = [_cast_to(t, dt, stream) for t in ts]
        first = ts[0]
    d = check_dim(dim, len(first.shape))
    shape = list(first.shape)
    total = 0  # (this module defines its own sum)
    for t in ts:
        total += t.shape[d] if len(t.shape) == len(shape) else 0
    shape[d] = total
    o = _out(out, tuple(shape), first.dtype, first._ctx)
    arr = (c_void_p * len(ts))(*[t.handle for t in ts])
    C.gpucore_concat(o.handle, arr, len(ts), d, _stream(first._ctx, stream))
    return o


# ---------------------------------------------------------------- row ops

def _last_dim_views(x: Tensor, o: Tensor, dim: int) -> Tuple[Tensor, Tensor]:
    d = check_dim(dim, len(x.shape))
    if d == len(x.shape) - 1:
        return x, o
    return x.transpose(d, -1), o.transpose(d, -1)


def _softmax_fwd(input: Tensor, dim: int, dtype: Any, out: Optional[Tensor], stream: Optional[Stream],
                 log_: int) -> Tensor:
    x = _with_dtype(_tensor(input, "input"), dtype, stream)
    _same_ctx(x._ctx, (out, "out"))
    o = result = _out(out, x.shape, x.dtype, x._ctx)
    if not x.shape:  # a 0-d tensor is one row of one element (PyTorch takes dim 0 or -1)
        check_dim(dim, 1)
        x, o = x.reshape((1,)), o.reshape((1,))
        dim = 0
    xv, ov = _last_dim_views(x, o, dim)
    C.gpucore_softmax(ov.handle, xv.handle, log_, _stream(x._ctx, stream))
    return result


def softmax(input: Tensor, dim: int = -1, out: Optional[Tensor] = None,
            stream: Optional[Stream] = None, dtype: Any = None) -> Tensor:
    """softmax along ``dim`` (numerically stable; -inf entries are masked out). out may be input.
    ``dtype``: cast the input to it first, compute and return in it (PyTorch's rule)."""
    return _softmax_fwd(input, dim, dtype, out, stream, 0)


def log_softmax(input: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                stream: Optional[Stream] = None, dtype: Any = None) -> Tensor:
    """log(softmax(input)) along ``dim``, computed stably; ``dtype`` as :func:`softmax`."""
    return _softmax_fwd(input, dim, dtype, out, stream, 1)


def _softmax_bw(dy: Tensor, y: Tensor, dim: int, log_: int, out: Optional[Tensor],
                stream: Optional[Stream]) -> Tensor:
    dy = _tensor(dy, "grad_output")
    y = _tensor(y, "output")
    _same_ctx(dy._ctx, (y, "output"), (out, "out"))
    o = _out(out, dy.shape, dy.dtype, dy._ctx)
    if not dy.shape:  # 0-d: one row of one element, as the forward
        check_dim(dim, 1)
        _softmax_bw(dy.reshape((1,)), y.reshape((1,)), 0, log_, o.reshape((1,)), stream)
        return o
    d = check_dim(dim, len(dy.shape))
    if d != len(dy.shape) - 1:
        dyv, yv, ov = dy.transpose(d, -1), y.transpose(d, -1), o.transpose(d, -1)
    else:
        dyv, yv, ov = dy, y, o
    C.gpucore_softmax_backward(ov.handle, dyv.handle, yv.handle, log_, _stream(dy._ctx, stream))
    return o


def softmax_backward(grad_output: Tensor, output: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                     stream: Optional[Stream] = None) -> Tensor:
    """dx = y * (dy - sum(dy * y)) from the forward OUTPUT y. out may be grad_output."""
    return _softmax_bw(grad_output, output, dim, 0, out, stream)


def log_softmax_backward(grad_output: Tensor, output: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                         stream: Optional[Stream] = None) -> Tensor:
    """dx = dy - exp(y) * sum(dy) from the forward OUTPUT y of log_softmax."""
    return _softmax_bw(grad_output, output, dim, 1, out, stream)
