"""PyTorch habits the library has no single C op for, composed from the C ops it has.

* Comparisons ``eq ne lt le gt ge`` (and ``== != < <= > >=`` on tensors) return a *mask*:
  1.0 where true and 0.0 where false, in the operands' (promoted) float dtype — the library's
  convention for flags (a loss scaler's found_inf is a 0/1 f32 tensor). So masks compose with the
  arithmetic: ``(pred == y).mean()``, ``x * (x > 0)``, ``bool(a == b)`` for one element. NaN
  compares unequal to everything (``nan != nan`` is 1), as in PyTorch. The C ops used: a - b
  and relu's derivative (1 where its input is > 0, 0 otherwise, NaN included). This is exact
  because a - b > 0 exactly when a > b in IEEE arithmetic with subnormals (no backend flushes
  them; f16/bf16 differences are computed in f32 and never round to 0), and Inf - Inf is NaN
  (not greater, not less), with ordering (neither side NaN) told apart by |a| + |b| + 1 > 0.
* ``pow`` / ``**``: exact compositions for 0, 1, 2, 0.5, -0.5, -1 and other integer
  exponents (repeated multiplication); other exponents are exp(y * log(x)), within about
  |y * ln x| ulps of the correctly rounded result.
* ``max``/``min``: over every element, along a dim (values and indices, as torch), or
  elementwise with another tensor.
* ``arange`` (made on the host with numpy, one copy to the device), ``stack`` (unsqueeze + cat),
  ``all``/``any``.
* ``where`` refuses: the library has no select op, and no exact composition of its ops
  selects when the unselected value is Inf or NaN.
"""
from __future__ import annotations

import builtins
import collections
import math
import numbers
from typing import Any, Optional, Sequence, Union

import numpy as np

from . import dtypes as _dt
from ._lib import C
from ._validate import check_dim, to_int
from .context import DeviceLike, Stream
from ._op_args import _is_number, _tensor
from .errors import InvalidArgumentError, InvalidArgumentTypeError, ShapeMismatchError
from .ops import amax, amin, argmax, cat
from .ops_elementwise import (ADD, DIV, MUL, SUB, _binary, _FLOAT_DTYPES, _promoted_dtype, _cast_to, abs, exp, log,
                              maximum, minimum, neg, rsqrt, scale, sqrt, square)
from .tensor import Tensor, _new, empty, full, full_like, tensor

__all__ = ["eq", "ne", "lt", "le", "gt", "ge", "pow", "max", "min", "arange", "stack", "where", "all", "any"]

_RELU = 1
_COMPARE_SPELLING = {"eq": "a == b", "ne": "a != b", "lt": "a < b", "le": "a <= b", "gt": "a > b", "ge": "a >= b"}
_INT_DTYPES = (_dt.int32, _dt.int64, _dt.uint8)


# ---------------------------------------------------------------- comparisons

def _step(d: Tensor) -> Tensor:
    """1.0 where d > 0, else 0.0 (NaN gives 0): relu's derivative of d, with a gradient of ones
    (a 0-d one broadcast by stride 0)."""
    o = _new(d._ctx, d._shape, d._dtype)
    one = full((), 1.0, d._dtype, d._ctx).expand(d._shape)
    C.gpucore_activation_backward(_RELU, o.handle, one.handle, d.handle, None)
    return o


def _operands(name: str, a: Any, b: Any) -> "tuple[Tensor, Tensor]":
    """a and b as tensors of one float dtype (a number takes the tensor's dtype, as in PyTorch)."""
    what = _COMPARE_SPELLING.get(name, name)
    if isinstance(a, bool):
        a = int(a)
    if isinstance(b, bool):
        b = int(b)
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise InvalidArgumentTypeError("%s: one operand must be a gpucore.Tensor" % what)
    for t in (a, b):
        if isinstance(t, Tensor):
            _tensor(t, "a" if t is a else "b")
            if t._dtype in _INT_DTYPES:
                raise NotImplementedError(
                    "%s on %s tensors: gpucore compares float tensors only (float32, float16, bfloat16); compare "
                    "on the host, e.g. a.numpy() == b.numpy()" % (what, t._dtype.long_name))
        elif not _is_number(t):
            raise InvalidArgumentTypeError("%s: the other operand must be a gpucore.Tensor or a number, not %s"
                                           % (what, type(t).__name__))
    if not isinstance(a, Tensor):
        a = full((), float(a), b._dtype, b._ctx)
    elif not isinstance(b, Tensor):
        b = full((), float(b), a._dtype, a._ctx)
    if a._dtype is not b._dtype and (not a._shape) != (not b._shape) and a._dtype in _FLOAT_DTYPES \
            and b._dtype in _FLOAT_DTYPES:
        # a 0-d tensor beside a dimensioned one takes its dtype (as in a + b)
        a, b = (a, _cast_to(b, a._dtype, None)) if a._shape else (_cast_to(a, b._dtype, None), b)
    if a._dtype is not b._dtype:
        dt = _promoted_dtype(what, (a._dtype, b._dtype))
        a, b = _cast_to(a, dt, None), _cast_to(b, dt, None)
    return a, b


def _ordered(a: Tensor, b: Tensor) -> Tensor:
    """1.0 where neither a nor b is NaN: |a| + |b| + 1 > 0 fails only for NaN."""
    return _step(scale(_binary(ADD, abs(a), abs(b), None, None), 1.0, 1.0))


def _less(x: Tensor, y: Tensor) -> Tensor:
    """1.0 where x < y (y - x > 0; NaN, and Inf - Inf, give 0)."""
    return _step(_binary(SUB, y, x, None, None))


def _compare(name: str, a: Any, b: Any) -> Tensor:
    a, b = _operands(name, a, b)
    if name == "gt":
        return _less(b, a)
    if name == "lt":
        return _less(a, b)
    ordered = _ordered(a, b)
    if name == "ge":  # ordered and not a < b
        return _binary(SUB, ordered, _less(a, b), None, None)
    if name == "le":
        return _binary(SUB, ordered, _less(b, a), None, None)
    # ordered pairs are exactly one of <, ==, >
    equal = _binary(SUB, _binary(SUB, ordered, _less(a, b), None, None), _less(b, a), None, None)
    return equal if name == "eq" else scale(equal, -1.0, 1.0)


def _comparison(name: str) -> Any:
    def f(input: Any, other: Any) -> Tensor:
        return _compare(name, input, other)
    f.__name__ = f.__qualname__ = name
    f.__doc__ = ("%s elementwise as a 1.0/0.0 mask of the operands' dtype (broadcasts; either side may be a "
                 "number; NaN as in PyTorch: only != is true for it). See gpucore.ops_compose."
                 % _COMPARE_SPELLING[name].replace("a", "input", 1).replace("b", "other"))
    return f


eq, ne, lt, le, gt, ge = (_comparison(n) for n in ("eq", "ne", "lt", "le", "gt", "ge"))


def _compare_operator(name: str, self: Tensor, other: Any) -> Any:
    """Tensor's comparison operators (Python itself swaps 1 < t into t > 1): other types give
    NotImplemented, so == with None or a string is Python's identity answer, False, as in PyTorch."""
    if not isinstance(other, Tensor) and not (_is_number(other) or isinstance(other, bool)):
        return NotImplemented
    return _compare(name, self, other)


def all(input: Tensor, dim: Optional[int] = None, keepdim: bool = False) -> Tensor:  # noqa: A001
    """1.0 where every element (over ``dim``, or all) is non-zero, else 0.0 (an empty tensor: 1.0)."""
    return _all_any(input, dim, keepdim, amin, 1.0)


def any(input: Tensor, dim: Optional[int] = None, keepdim: bool = False) -> Tensor:  # noqa: A001
    """1.0 where some element (over ``dim``, or all) is non-zero, else 0.0 (an empty tensor: 0.0)."""
    return _all_any(input, dim, keepdim, amax, 0.0)


def _all_any(input: Tensor, dim: Optional[int], keepdim: bool, red: Any, empty_value: float) -> Tensor:
    x = _tensor(input, "input")
    if dim is None and x.numel() == 0:
        return full(tuple(1 for _ in x.shape) if keepdim else (), empty_value, x.dtype, x.context)
    return red(ne(x, 0), () if dim is None else dim, keepdim)


# ---------------------------------------------------------------- pow

def _int_power(x: Tensor, n: int) -> Tensor:
    """x ** n for an integer n >= 2 by repeated squaring."""
    result: Optional[Tensor] = None
    base = x
    while True:
        if n & 1:
            result = base if result is None else _binary(MUL, result, base, None, None)
        n >>= 1
        if not n:
            return result  # type: ignore[return-value]
        base = square(base)


def pow(input: Any, exponent: Any) -> Tensor:  # noqa: A001
    """input ** exponent, as torch.pow, for a tensor and a number (either side):

    * tensor ** number: 0 (ones, NaN included), 1 (a copy), 2, 0.5, -0.5, -1 and other
      integers exactly as repeated products; other finite exponents as exp(y * log(x))
      (NaN for x < 0, as torch). A tensor exponent refuses (NotImplementedError).
    * number ** tensor: a base > 0 as exp(tensor * ln(base)); other bases refuse.
    """
    if isinstance(input, Tensor) and isinstance(exponent, Tensor):
        raise NotImplementedError("x ** y with a tensor exponent: gpucore has no pow op; for x > 0 use "
                                  "gpucore.exp(y * gpucore.log(x)), or compute on the host with numpy.power")
    if not isinstance(input, Tensor):
        e = _tensor(exponent, "exponent")
        if not _is_number(input):
            raise InvalidArgumentTypeError("pow: the base must be a gpucore.Tensor or a number, not %s"
                                           % type(input).__name__)
        base = float(input)
        if base == 1.0:
            return full_like(e, 1.0)
        if not (base > 0.0 and math.isfinite(base)):
            raise NotImplementedError("%r ** tensor: only a finite base > 0 is supported (as exp(t * ln(base))); "
                                      "compute other bases on the host with numpy.power" % base)
        return exp(scale(e, math.log(base)))
    x = _tensor(input, "input")
    if not _is_number(exponent):
        raise InvalidArgumentTypeError("pow: the exponent must be a number or a gpucore.Tensor, not %s"
                                       % type(exponent).__name__)
    y = float(exponent)
    if not math.isfinite(y):
        raise NotImplementedError("x ** %r: non-finite exponents are not supported; compute on the host with "
                                  "numpy.power" % y)
    if y == 0.0:
        return full_like(x, 1.0)
    if y == 1.0:
        return x.clone()
    if y == 0.5:
        return sqrt(x)
    if y == -0.5:
        return rsqrt(x)
    if y == int(y) and builtins.abs(y) <= 1 << 16:
        n = int(y)
        p = x if builtins.abs(n) == 1 else _int_power(x, builtins.abs(n))
        return _binary(DIV, 1.0, p, None, None) if n < 0 else p
    return exp(scale(log(x), y))


# ---------------------------------------------------------------- max / min

MaxResult = collections.namedtuple("max", ["values", "indices"])
MinResult = collections.namedtuple("min", ["values", "indices"])


def max(input: Tensor, dim: Union[None, int, Tensor] = None, keepdim: bool = False) -> Any:  # noqa: A001
    """As torch.max: ``max(x)`` the largest element (0-d); ``max(x, dim)`` a (values, indices)
    pair along ``dim`` (indices i64, the first maximum); ``max(x, other)`` elementwise
    (gpucore.maximum). NaN propagates."""
    return _max_min(input, dim, keepdim, True)


def min(input: Tensor, dim: Union[None, int, Tensor] = None, keepdim: bool = False) -> Any:  # noqa: A001
    """As torch.min (see :func:`max`); indices are the first minimum."""
    return _max_min(input, dim, keepdim, False)


def _max_min(input: Tensor, dim: Any, keepdim: bool, is_max: bool) -> Any:
    x = _tensor(input, "input")
    if isinstance(dim, Tensor):
        return maximum(x, dim) if is_max else minimum(x, dim)
    if dim is None:
        return amax(x) if is_max else amin(x)
    if not isinstance(dim, numbers.Integral) or isinstance(dim, bool):
        raise InvalidArgumentTypeError("%s: dim must be an int (or a tensor for the elementwise form), not %s"
                                       % ("max" if is_max else "min", type(dim).__name__))
    if is_max:
        return MaxResult(amax(x, dim, keepdim), argmax(x, dim, keepdim))
    # the first minimum is the first maximum of -x (negation is exact)
    return MinResult(amin(x, dim, keepdim), argmax(neg(x), dim, keepdim))


# ---------------------------------------------------------------- makers

def arange(start: float, end: Optional[float] = None, step: float = 1, dtype: Any = None,
           device: DeviceLike = None) -> Tensor:
    """Values start, start+step, ... < end (``arange(n)`` is 0..n-1), as torch.arange: int64
    when every argument is an int, else float32, unless ``dtype`` says. There is no C op: the
    values are made on the host (numpy, in float64 for float dtypes) and copied once."""
    if end is None:
        start, end = 0, start
    for v, what in ((start, "start"), (end, "end"), (step, "step")):
        if not _is_number(v):
            raise InvalidArgumentTypeError("arange: %s must be a number, not %s" % (what, type(v).__name__))
        if not math.isfinite(v):
            raise InvalidArgumentError("arange: %s is %r; it must be finite" % (what, v))
    if step == 0:
        raise InvalidArgumentError("arange: step must not be zero")
    if (end - start) * step < 0:  # as torch (numpy would give an empty tensor)
        raise InvalidArgumentError("arange: from %r to %r needs a step of that sign, not %r" % (start, end, step))
    integral = builtins.all(isinstance(v, numbers.Integral) for v in (start, end, step))
    dt = (_dt.int64 if integral else _dt.float32) if dtype is None else _dt.as_dtype(dtype)
    n = builtins.max(0, math.ceil((end - start) / step))

    def values(i: int, j: int) -> np.ndarray:  # elements i..j-1
        if integral and dt in (_dt.int64, _dt.int32):
            return start + step * np.arange(i, j, dtype=np.int64)
        return float(start) + float(step) * np.arange(i, j, dtype=np.float64)

    if n <= _ARANGE_CHUNK:
        return tensor(values(0, n), dtype=dt, device=device)
    # a long one: the result first (the library says so when the memory is not there), then filled
    # a chunk at a time, so the host holds a chunk's float64 values, not the whole range's
    out = empty((n,), dtype=dt, device=device)
    for i in range(0, n, _ARANGE_CHUNK):
        j = builtins.min(n, i + _ARANGE_CHUNK)
        out[i:j].copy_(tensor(values(i, j), dtype=dt, device=out.context))
    return out


_ARANGE_CHUNK = 1 << 22


def stack(tensors: Sequence[Tensor], dim: int = 0, out: Optional[Tensor] = None,
          stream: Optional[Stream] = None) -> Tensor:
    """Join tensors of one shape along a new dim ``dim`` (torch.stack): cat of unsqueezed views."""
    if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)):
        raise InvalidArgumentTypeError("stack: tensors must be a list or tuple of gpucore.Tensor")
    ts = [_tensor(t, "tensors[%d]" % i) for i, t in enumerate(tensors)]
    if not ts:
        raise InvalidArgumentError("stack: tensors is empty; give at least one tensor")
    for i, t in enumerate(ts):
        if t.shape != ts[0].shape:
            raise ShapeMismatchError("stack: every tensor needs one shape; tensors[0] is %s but tensors[%d] is %s"
                                     % (ts[0].shape, i, t.shape))
    d = check_dim(to_int(dim, "dim", -(1 << 31), (1 << 31) - 1), len(ts[0].shape) + 1)
    return cat([t.unsqueeze(d) for t in ts], d, out=out, stream=stream)


def where(condition: Any, input: Any = None, other: Any = None) -> Tensor:
    """Refuses: the library has no select op (see the module docstring); the error says what to use."""
    raise NotImplementedError(
        "gpucore.where: the library has no select op. For finite values, with m = (condition != 0) "
        "(a 1.0/0.0 mask of x's dtype), x * m + y * (1 - m) gives the same result; for any values, select on "
        "the host: gpucore.tensor(numpy.where(condition.numpy() != 0, x.numpy(), y.numpy()))")

