"""Argument checks done in Python before any ctypes call, so that nothing a user
passes reaches C as a truncated, negative or wrongly-typed value."""
from __future__ import annotations

import math
import numbers
import operator
from typing import Any, Sequence, Tuple

from .errors import InvalidArgumentError, InvalidArgumentTypeError, NullPointerError

MAX_DIMS = 8
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
UINT64_MAX = (1 << 64) - 1


def to_int(x: Any, what: str, lo: int = INT64_MIN, hi: int = INT64_MAX) -> int:
    """x as a Python int in [lo, hi]; bools and floats are refused."""
    if type(x) is int:  # the common case, without the ABC checks below
        if x < lo or x > hi:
            raise InvalidArgumentError("%s is %d; it must be in %d..%d" % (what, x, lo, hi))
        return x
    if x is None:
        raise NullPointerError("%s is None; an integer is required" % what)
    if isinstance(x, bool) or not isinstance(x, (numbers.Integral,)) and not hasattr(x, "__index__"):
        raise InvalidArgumentTypeError("%s must be an integer, not %s" % (what, type(x).__name__))
    try:
        v = operator.index(x)
    except TypeError:
        raise InvalidArgumentTypeError("%s must be an integer, not %s" % (what, type(x).__name__)) from None
    if v < lo or v > hi:
        raise InvalidArgumentError("%s is %d; it must be in %d..%d" % (what, v, lo, hi))
    return v


def to_float(x: Any, what: str) -> float:
    """x as a Python float (ints and numpy scalars accepted, bools refused)."""
    if type(x) is float:  # the common case, without the ABC checks below
        return x
    if x is None:
        raise NullPointerError("%s is None; a number is required" % what)
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise InvalidArgumentTypeError("%s must be a real number, not %s" % (what, type(x).__name__))
    try:
        return float(x)
    except OverflowError:
        raise InvalidArgumentError("%s = %r does not fit in a double" % (what, x)) from None


def to_bool(x: Any, what: str) -> bool:
    if not isinstance(x, (bool, numbers.Integral)):
        raise InvalidArgumentTypeError("%s must be a bool, not %s" % (what, type(x).__name__))
    return bool(x)


def to_shape(shape: Any, what: str = "shape", allow_minus_one: bool = False) -> Tuple[int, ...]:
    """A tuple of 0..8 int64 sizes (>= 0; -1 once if allow_minus_one)."""
    if shape is None:
        raise NullPointerError("%s is None; give a tuple of sizes such as (2, 3)" % what)
    if isinstance(shape, (numbers.Integral,)) and not isinstance(shape, bool):
        shape = (shape,)
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence) and not hasattr(shape, "__iter__"):
        raise InvalidArgumentTypeError("%s must be a sequence of integers, not %s" % (what, type(shape).__name__))
    try:
        n = len(shape)  # before iterating: a long sequence (a big tensor given as a shape) is refused at once
    except TypeError:
        n = None
    items = list(shape) if n is None or n <= MAX_DIMS else ()
    if n is None:
        n = len(items)
    if n > MAX_DIMS:
        raise InvalidArgumentError("%s has %d dims; at most %d are supported" % (what, n, MAX_DIMS))
    lo = -1 if allow_minus_one else 0
    out = tuple(to_int(s, "%s[%d]" % (what, i), lo, INT64_MAX) for i, s in enumerate(items))
    if allow_minus_one and out.count(-1) > 1:
        raise InvalidArgumentError("%s: only one dim may be -1" % what)
    return out


def check_dim(d: Any, ndim: int, what: str = "dim") -> int:
    """A dim index (negative counts from the end) normalised to 0..ndim-1."""
    v = to_int(d, what, INT32_MIN, INT32_MAX)
    if ndim == 0 or v < -ndim or v >= ndim:
        raise InvalidArgumentError("%s %d is out of range for a %d-d tensor" % (what, v, ndim))
    return v + ndim if v < 0 else v


def finite_or_nan(x: float) -> bool:
    return math.isfinite(x) or math.isnan(x)
