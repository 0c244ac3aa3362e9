"""The argument handling every op module shares: a tensor argument checked (None and other types
refused by name, a freed tensor refused), an optional one's handle, ``out=`` checked against the
result's shape or made, ``stream=`` as the C handle, every tensor on the call's context, numpy
broadcasting of shapes, activation names as the library's codes, and which values count as numbers.
"""
from __future__ import annotations

import numbers
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np

from . import dtypes as _dt
from ._validate import INT32_MAX, to_int
from .context import Context, Stream
from .errors import DeviceMismatchError, InvalidArgumentError, InvalidArgumentTypeError, NullPointerError, ShapeMismatchError
from .tensor import Tensor, _new

Number = Union[int, float]
TensorOrNumber = Union[Tensor, int, float]

ACTIVATIONS = {"none": 0, "relu": 1, "gelu": 2, "gelu_erf": 2, "gelu_tanh": 3, "silu": 4, "swish": 4,
               "sigmoid": 5, "tanh": 6}


def _tensor(t: Any, what: str) -> Tensor:
    if t is None:
        raise NullPointerError("%s is None; a gpucore.Tensor is required" % what)
    if not isinstance(t, Tensor):
        raise InvalidArgumentTypeError("%s must be a gpucore.Tensor, not %s" % (what, type(t).__name__))
    t.handle  # raises if freed
    return t


def _opt(t: Any, what: str) -> Optional[int]:
    """Handle of an optional tensor argument (None stays None)."""
    return None if t is None else _tensor(t, what).handle


def _stream(ctx: Context, stream: Optional[Stream]) -> Optional[int]:
    return ctx._stream_arg(stream)


def _same_ctx(ctx: Context, *pairs: Tuple[Any, str]) -> None:
    for t, what in pairs:
        if t is not None and isinstance(t, Tensor) and t._ctx is not ctx:
            # two contexts may be on one device ("cpu" and Context("cpu")): name each by its id
            raise DeviceMismatchError("%s is on context #%d (%s) but the call is on context #%d (%s); move it "
                                      "with .to(ctx), or make the tensors on one context "
                                      "(gpucore.default_context() is the shared one)" %
                                      (what, t._ctx.id, t._ctx.device, ctx.id, ctx.device))


def _out(out: Optional[Tensor], shape: Sequence[int], dtype: Any, ctx: Context, what: str = "out") -> Tensor:
    """`out` checked against shape (dtype is left to the library), or a new tensor."""
    if out is None:
        return _new(ctx, tuple(shape), dtype if isinstance(dtype, _dt.DType) else _dt.as_dtype(dtype))
    _tensor(out, what)
    if tuple(out.shape) != tuple(shape):
        raise ShapeMismatchError("%s has shape %s but the result has shape %s" % (what, out.shape, tuple(shape)))
    return out


def _broadcast(*shapes: Sequence[int]) -> Tuple[int, ...]:
    if len(shapes) == 2 and shapes[0] == shapes[1]:
        return tuple(shapes[0])
    try:
        return tuple(np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        raise ShapeMismatchError("shapes %s do not broadcast together" %
                                 ", ".join(str(tuple(s)) for s in shapes)) from None


def _act(act: Any) -> int:
    if isinstance(act, str):
        v = ACTIVATIONS.get(act.lower())
        if v is None:
            raise InvalidArgumentError("unknown activation %r; use one of %s" % (act, ", ".join(ACTIVATIONS)))
        return v
    if act is None:
        return 0
    return to_int(act, "activation", 0, INT32_MAX)


def _is_number(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)
