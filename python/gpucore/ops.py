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

import math
import numbers
from ctypes import byref, c_double, c_int, c_int64, c_void_p
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np

from . import dtypes as _dt
from ._lib import C, fast_function, raise_status, retry_after_release
from ._validate import INT32_MAX, UINT64_MAX, check_dim, to_float, to_int
from .context import Context, Stream
from .errors import (DeviceMismatchError, DtypeMismatchError, InvalidArgumentError, InvalidArgumentTypeError,
                     NullPointerError, ShapeMismatchError)
from .tensor import (Tensor, _fast_clear_error, _fresh, _generator, _new, _shape_cache, _shape_info,  # noqa: F401
                     empty, full)  # (empty: re-exported)

__all__ = [
    "cat", "add", "sub", "mul", "div", "maximum", "minimum", "exp", "log", "sqrt", "rsqrt", "abs", "neg", "square", "scale", "axpy_", "clamp",
    "activation", "activation_backward", "relu", "gelu", "silu", "sigmoid", "tanh", "relu_backward",
    "gelu_backward", "silu_backward", "sigmoid_backward", "tanh_backward", "bias_act", "cast", "dropout",
    "dropout_backward", "sum", "mean", "amax", "amin", "argmax", "sum_of_squares", "reduce", "bias_grad",
    "softmax", "log_softmax", "softmax_backward", "log_softmax_backward", "layer_norm",
    "layer_norm_backward", "rms_norm", "rms_norm_backward", "cross_entropy", "cross_entropy_backward",
    "embedding", "embedding_backward", "Number", "TensorOrNumber",
]

Number = Union[int, float]
TensorOrNumber = Union[Tensor, int, float]

ADD, SUB, MUL, DIV, DIV_TRUNC, DIV_FLOOR, MAXIMUM, MINIMUM = 0, 1, 2, 3, 4, 5, 6, 7
EXP, LOG, SQRT, RSQRT, ABS, NEG, SQUARE = 0, 1, 2, 3, 4, 5, 6
ACTIVATIONS = {"none": 0, "relu": 1, "gelu": 2, "gelu_erf": 2, "gelu_tanh": 3, "silu": 4, "swish": 4,
               "sigmoid": 5, "tanh": 6}
REDUCTIONS = {"sum": 0, "mean": 1, "max": 2, "min": 3, "argmax": 4, "sumsq": 5}
LOSS_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}
ALL_AXES = 0x7FFFFFFF


# ---------------------------------------------------------------- helpers

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


# ---------------------------------------------------------------- elementwise

def _scalar_affine(op: int, v: float, number_first: bool) -> Optional[Tuple[float, float]]:
    """(alpha, beta) with alpha*t + beta (gpucore_scale) giving exactly the bits of the binary op
    between tensor t and the number v (rounded to f32 as the scalar tensor would be), or None where
    no affine form is exactly equal (the caller then broadcasts a 0-d tensor). beta is -0.0 for the
    products: x + (-0.0) is x for every x, signed zeros included (x + 0.0 would turn -0 into +0).
    t * (1/v) equals t / v only when 1/v is exact and normal: v = ±2^k, |k| <= 126."""
    if not math.isfinite(v):
        return None  # gpucore_scale takes finite factors only
    if op == ADD:
        return 1.0, v
    if op == SUB:
        return (-1.0, v) if number_first else (1.0, -v)
    if op == MUL:
        return v, -0.0
    if op == DIV and not number_first and v != 0.0:
        m, e = math.frexp(v)
        if m in (0.5, -0.5) and -125 <= e <= 127:  # (this module shadows abs)
            return 1.0 / v, -0.0
    return None


_FLOAT_DTYPES = (_dt.float32, _dt.float16, _dt.bfloat16, _dt.float64)
_ELEMENTWISE_DTYPES = (_dt.float32, _dt.float16, _dt.bfloat16)
_BINARY_SPELLING = {ADD: "a + b", SUB: "a - b", MUL: "a * b", DIV: "a / b", DIV_TRUNC: "div(a, b, rounding_mode='trunc')",
                    DIV_FLOOR: "a // b", MAXIMUM: "maximum(a, b)", MINIMUM: "minimum(a, b)"}


def _promoted_dtype(what: str, dtypes: Sequence[Any]) -> Any:
    """PyTorch's type promotion among the float dtypes the elementwise ops take: one dtype stays,
    two of f32/f16/bf16 give f32 (f16 with bf16 too). Anything else is refused in the user's words."""
    first = dtypes[0]
    if all(d is first for d in dtypes):
        return first
    names = " and ".join(sorted({d.long_name for d in dtypes}))
    if all(d in _ELEMENTWISE_DTYPES for d in dtypes):
        return _dt.float32
    if all(d in _FLOAT_DTYPES for d in dtypes):
        raise DtypeMismatchError("%s: %s tensors would compute in float64, which gpucore's elementwise ops do not "
                                 "take; cast the float64 one with .to(gpucore.float32)" % (what, names))
    raise DtypeMismatchError("%s: %s differ, and gpucore's elementwise ops take float32, float16 and bfloat16 "
                             "tensors; cast fp8 ones with .to(gpucore.float32), and convert integer ones on the "
                             "host: gpucore.tensor(t.numpy().astype('float32'), device=t.context)" % (what, names))


def _cast_to(t: Tensor, dt: Any, stream: Optional[Stream]) -> Tensor:
    return t if t._dtype is dt else cast(t, dt, stream=stream)


_fast_binary_new = fast_function("gpucore_binary_new")
_fast_binary = fast_function("gpucore_binary")


def _binary(op: int, a: TensorOrNumber, b: TensorOrNumber, out: Optional[Tensor],
            stream: Optional[Stream]) -> Tensor:
    if type(a) is Tensor and type(b) is Tensor and stream is None:
        # the common cases in one step: two live tensors of one open context and one dtype, and a
        # new result or an out= of their (equal) shape (the library checks dtypes and shapes; anything
        # else takes the path below, which says what is wrong)
        ctx = a._ctx
        dt = a._dtype
        if b._ctx is ctx and b._dtype is dt and a._h is not None and b._h is not None and not ctx._closed:
            if out is not None:
                if type(out) is Tensor and out._h is not None and out._ctx is ctx and out._shape == a._shape == b._shape:
                    st = _fast_binary(op, out._hp, a._hp, b._hp, None)
                    if st:
                        raise_status(st, "gpucore_binary")
                    return out
                return _binary_checked(op, a, b, out, stream)
            # one C call makes the result and queues the op; the result's shape is the broadcast
            # shape, known here once C has accepted the shapes
            h = c_void_p()
            st = _fast_binary_new(op, a._hp, b._hp, None, byref(h))
            if st and (st := retry_after_release(st, _fast_binary_new, op, a._hp, b._hp, None, byref(h))):
                raise_status(st, "gpucore_binary_new")
            sa = a._shape
            shape = sa if sa == b._shape else _broadcast(sa, b._shape)
            info = _shape_cache.get(shape) or _shape_info(shape)
            return _fresh(ctx, h, shape, info[1], dt, info[2])
    # a tensor and a Python number, where an affine form gives exactly the same bits
    if (type(b) is float or type(b) is int) and type(a) is Tensor:
        t, ab = a, _scalar_affine(op, float(b), False)
    elif (type(a) is float or type(a) is int) and type(b) is Tensor:
        t, ab = b, _scalar_affine(op, float(a), True)
    else:
        t = ab = None
    if ab is not None:
        o = _scale_fast(t, ab[0], ab[1], out, stream)
        if o is not None:
            return o
    return _binary_checked(op, a, b, out, stream)


def _binary_checked(op: int, a: TensorOrNumber, b: TensorOrNumber, out: Optional[Tensor],
                    stream: Optional[Stream]) -> Tensor:
    """_binary's full path: numbers, promotion of 0-d tensors, every argument checked."""
    if type(a) is Tensor and type(b) is Tensor and a._dtype is not b._dtype and (not a._shape) != (not b._shape) \
            and a._dtype in _FLOAT_DTYPES and b._dtype in _FLOAT_DTYPES:
        # PyTorch's promotion: a 0-d float tensor beside a dimensioned one counts as a scalar and
        # takes the other operand's dtype (bf16 tensor * f32 0-d tensor is bf16)
        if a._shape:
            b = cast(b, a._dtype, stream=stream)
        else:
            a = cast(a, b._dtype, stream=stream)
    if _is_number(b) and isinstance(a, Tensor):
        ab = _scalar_affine(op, float(b), False)
        if ab is not None:
            return scale(a, ab[0], ab[1], out=out, stream=stream)
        b = full((), float(b), a.dtype, a.context)
    elif _is_number(a) and isinstance(b, Tensor):
        ab = _scalar_affine(op, float(a), True)
        if ab is not None:
            return scale(b, ab[0], ab[1], out=out, stream=stream)
        a = full((), float(a), b.dtype, b.context)
    a = _tensor(a, "a")
    b = _tensor(b, "b")
    ctx = a._ctx
    _same_ctx(ctx, (b, "b"), (out, "out"))
    if a._dtype is not b._dtype:
        # PyTorch promotes (f32 + f16 is f32); an out= of another float dtype receives a cast of the
        # result, as torch's out= does
        dt = _promoted_dtype(_BINARY_SPELLING.get(op, "a op b"), (a._dtype, b._dtype))
        a, b = _cast_to(a, dt, stream), _cast_to(b, dt, stream)
        if out is not None and _tensor(out, "out")._dtype is not dt:
            return cast(_binary_checked(op, a, b, None, stream), out._dtype, out=out, stream=stream)
    o = _out(out, _broadcast(a.shape, b.shape), a.dtype, ctx)
    C.gpucore_binary(op, o.handle, a.handle, b.handle, _stream(ctx, stream))
    return o


def _alpha_times(b: TensorOrNumber, alpha: Number) -> TensorOrNumber:
    """alpha * b for add/sub's alpha= (1: b itself)."""
    if alpha == 1:
        return b
    if _is_number(b):
        return float(b) * float(alpha)
    return scale(b, to_float(alpha, "alpha"))


def add(a: TensorOrNumber, b: TensorOrNumber, out: Optional[Tensor] = None,
        stream: Optional[Stream] = None, alpha: Number = 1) -> Tensor:
    """a + alpha * b (numpy broadcasting; either side may be a Python number)."""
    return _binary(ADD, a, b if alpha == 1 else _alpha_times(b, alpha), out, stream)


def sub(a: TensorOrNumber, b: TensorOrNumber, out: Optional[Tensor] = None,
        stream: Optional[Stream] = None, alpha: Number = 1) -> Tensor:
    """a - alpha * b (numpy broadcasting; either side may be a Python number)."""
    return _binary(SUB, a, b if alpha == 1 else _alpha_times(b, alpha), out, stream)


def mul(a: TensorOrNumber, b: TensorOrNumber, out: Optional[Tensor] = None,
        stream: Optional[Stream] = None) -> Tensor:
    """a * b (numpy broadcasting; either side may be a Python number)."""
    return _binary(MUL, a, b, out, stream)


_ROUNDING_MODES = {None: DIV, "trunc": DIV_TRUNC, "floor": DIV_FLOOR}


def div(a: TensorOrNumber, b: TensorOrNumber, out: Optional[Tensor] = None,
        stream: Optional[Stream] = None, rounding_mode: Optional[str] = None) -> Tensor:
    """a / b (numpy broadcasting; either side may be a Python number). rounding_mode:
    None (true division), "trunc" (toward zero) or "floor" (Python's a // b), as torch.div."""
    if rounding_mode not in _ROUNDING_MODES:
        raise InvalidArgumentError("div: rounding_mode must be None, 'trunc' or 'floor', not %r" % (rounding_mode,))
    op = _ROUNDING_MODES[rounding_mode]
    if op != DIV:
        a, b = _scalar_as_tensor(a, b)
    return _binary(op, a, b, out, stream)


def maximum(a: TensorOrNumber, b: TensorOrNumber, out: Optional[Tensor] = None,
            stream: Optional[Stream] = None) -> Tensor:
    """Elementwise max (numpy broadcasting); NaN if either is NaN (torch.maximum)."""
    return _binary(MAXIMUM, *_scalar_as_tensor(a, b), out, stream)


def minimum(a: TensorOrNumber, b: TensorOrNumber, out: Optional[Tensor] = None,
            stream: Optional[Stream] = None) -> Tensor:
    """Elementwise min (numpy broadcasting); NaN if either is NaN (torch.minimum)."""
    return _binary(MINIMUM, *_scalar_as_tensor(a, b), out, stream)


def _scalar_as_tensor(a: TensorOrNumber, b: TensorOrNumber) -> Tuple[TensorOrNumber, TensorOrNumber]:
    """A Python number beside a tensor as a 0-d tensor of its dtype (for ops scale() cannot do)."""
    if _is_number(b) and isinstance(a, Tensor):
        return a, full((), float(b), a.dtype, a.context)
    if _is_number(a) and isinstance(b, Tensor):
        return full((), float(a), b.dtype, b.context), b
    return a, b


def _plain(a: Any, out: Any, stream: Any) -> bool:
    """The common case of a one-input op, taken in one step: a live tensor of an open context, no
    out=, no stream= (anything else takes the op's full path, which checks the arguments and says
    what is wrong)."""
    return out is None and stream is None and type(a) is Tensor and a._h is not None and not a._ctx._closed


def _result_like(a: Tensor, h: c_void_p) -> Tensor:
    """The Tensor on handle h, which a *_new call made shaped like a, contiguous, of a's dtype."""
    shape = a._shape
    info = _shape_cache.get(shape) or _shape_info(shape)
    return _fresh(a._ctx, h, shape, info[1], a._dtype, info[2])


def _coded_op_fast(fn: Any, name: str, code: int, a: Any, out: Any, stream: Any) -> Optional[Tensor]:
    """The *_new call fn(code, a, NULL, &result) where _plain(a, out, stream); else None."""
    if _plain(a, out, stream):
        h = c_void_p()
        st = fn(code, a._hp, None, byref(h))
        if st and (st := retry_after_release(st, fn, code, a._hp, None, byref(h))):
            raise_status(st, name)
        return _result_like(a, h)
    return None


_fast_unary_new = fast_function("gpucore_unary_new")
_fast_activation_forward_new = fast_function("gpucore_activation_forward_new")
_fast_scale_new = fast_function("gpucore_scale_new")  # doubles go as c_double objects


def _unary(op: int, a: Tensor, out: Optional[Tensor], stream: Optional[Stream]) -> Tensor:
    o = _coded_op_fast(_fast_unary_new, "gpucore_unary_new", op, a, out, stream)
    if o is not None:
        return o
    a = _tensor(a, "input")
    _same_ctx(a._ctx, (out, "out"))
    o = _out(out, a.shape, a.dtype, a._ctx)
    C.gpucore_unary(op, o.handle, a.handle, _stream(a._ctx, stream))
    return o


def exp(input: Tensor, out: Optional[Tensor] = None, stream: Optional[Stream] = None) -> Tensor:
    """e ** input, elementwise."""
    return _unary(EXP, input, out, stream)


def log(input: Tensor, out: Optional[Tensor] = None, stream: Optional[Stream] = None) -> Tensor:
    """Natural logarithm, elementwise."""
    return _unary(LOG, input, out, stream)


def sqrt(input: Tensor, out: Optional[Tensor] = None, stream: Optional[Stream] = None) -> Tensor:
    """Square root, elementwise."""
    return _unary(SQRT, input, out, stream)


def rsqrt(input: Tensor, out: Optional[Tensor] = None, stream: Optional[Stream] = None) -> Tensor:
    """1 / sqrt(input), elementwise."""
    return _unary(RSQRT, input, out, stream)


def square(input: Tensor, out: Optional[Tensor] = None, stream: Optional[Stream] = None) -> Tensor:
    """input * input, elementwise."""
    return _unary(SQUARE, input, out, stream)


def abs(input: Tensor, out: Optional[Tensor] = None, stream: Optional[Stream] = None) -> Tensor:  # noqa: A001
    """|input|, elementwise."""
    return _unary(ABS, input, out, stream)


def neg(input: Tensor, out: Optional[Tensor] = None, stream: Optional[Stream] = None) -> Tensor:
    """-input, elementwise."""
    return _unary(NEG, input, out, stream)


def _scale_fast(a: Any, alpha: float, beta: float, out: Any, stream: Any) -> Optional[Tensor]:
    """gpucore_scale_new (alpha, beta: Python floats) where _plain(a, out, stream); else None."""
    if _plain(a, out, stream):
        h = c_void_p()
        st = _fast_scale_new(a._hp, c_double(alpha), c_double(beta), None, byref(h))
        if st and (st := retry_after_release(st, _fast_scale_new, a._hp, c_double(alpha), c_double(beta), None, byref(h))):
            raise_status(st, "gpucore_scale_new")
        return _result_like(a, h)
    return None


def scale(input: Tensor, alpha: float = 1.0, beta: float = 0.0, out: Optional[Tensor] = None,
          stream: Optional[Stream] = None) -> Tensor:
    """alpha * input + beta, elementwise."""
    if type(alpha) is float and type(beta) is float:
        o = _scale_fast(input, alpha, beta, out, stream)
        if o is not None:
            return o
    a = _tensor(input, "input")
    _same_ctx(a._ctx, (out, "out"))
    o = _out(out, a.shape, a.dtype, a._ctx)
    C.gpucore_scale(o.handle, a.handle, to_float(alpha, "alpha"), to_float(beta, "beta"), _stream(a._ctx, stream))
    return o


def axpy_(y: Tensor, alpha: float, x: Tensor, stream: Optional[Stream] = None) -> Tensor:
    """y += alpha * x in place (x broadcasts to y). Returns y."""
    y = _tensor(y, "y")
    x = _tensor(x, "x")
    _same_ctx(y._ctx, (x, "x"))
    C.gpucore_axpy(y.handle, to_float(alpha, "alpha"), x.handle, _stream(y._ctx, stream))
    return y


def clamp(input: Tensor, min: Optional[TensorOrNumber] = None,  # noqa: A002
          max: Optional[TensorOrNumber] = None, out: Optional[Tensor] = None,  # noqa: A002
          stream: Optional[Stream] = None) -> Tensor:
    """min(max(input, min), max) elementwise, as torch.clamp: either bound may be None
    (no bound on that side) and either may be a tensor (broadcast with input); NaN stays
    NaN. Number bounds need min <= max; with tensor bounds, where min > max the result is
    max (PyTorch's rule)."""
    a = _tensor(input, "input")
    if min is None and max is None:
        raise InvalidArgumentError("clamp: give min, max or both")
    if (min is None or _is_number(min)) and (max is None or _is_number(max)):
        lo = -float("inf") if min is None else to_float(min, "min")
        hi = float("inf") if max is None else to_float(max, "max")
        _same_ctx(a._ctx, (out, "out"))
        o = _out(out, a.shape, a.dtype, a._ctx)
        C.gpucore_clamp(o.handle, a.handle, lo, hi, _stream(a._ctx, stream))
        return o
    # tensor bounds: max(input, min) then min(.., max), NaN-propagating
    r = a if min is None else maximum(a, min, out=out if max is None else None, stream=stream)
    return r if max is None else minimum(r, max, out=out, stream=stream)


def activation(input: Tensor, act: Union[str, int], out: Optional[Tensor] = None,
               stream: Optional[Stream] = None) -> Tensor:
    """act(input). act: "relu", "gelu" (erf form), "gelu_tanh", "silu", "sigmoid", "tanh"."""
    code = ACTIVATIONS.get(act) if type(act) is str else None
    if code is not None:
        o = _coded_op_fast(_fast_activation_forward_new, "gpucore_activation_forward_new", code, input, out, stream)
        if o is not None:
            return o
    a = _tensor(input, "input")
    _same_ctx(a._ctx, (out, "out"))
    o = _out(out, a.shape, a.dtype, a._ctx)
    C.gpucore_activation_forward(_act(act), o.handle, a.handle, _stream(a._ctx, stream))
    return o


def activation_backward(grad_output: Tensor, input: Tensor, act: Union[str, int], out: Optional[Tensor] = None,
                        stream: Optional[Stream] = None) -> Tensor:
    """grad_output * act'(input), with input the FORWARD input. out may be grad_output (in place)."""
    dy = _tensor(grad_output, "grad_output")
    x = _tensor(input, "input")
    _same_ctx(dy._ctx, (x, "input"), (out, "out"))
    o = _out(out, dy.shape, dy.dtype, dy._ctx)
    C.gpucore_activation_backward(_act(act), o.handle, dy.handle, x.handle, _stream(dy._ctx, stream))
    return o


def relu(input: Tensor, out: Optional[Tensor] = None, stream: Optional[Stream] = None) -> Tensor:
    """max(input, 0)."""
    return activation(input, "relu", out, stream)


def gelu(input: Tensor, approximate: str = "none", out: Optional[Tensor] = None,
         stream: Optional[Stream] = None) -> Tensor:
    """GELU: approximate="none" is 0.5x(1+erf(x/sqrt2)); "tanh" the tanh form (as torch)."""
    return activation(input, _gelu_kind(approximate), out, stream)


def _gelu_kind(approximate: str) -> str:
    if approximate not in ("none", "tanh"):
        raise InvalidArgumentError("gelu: approximate must be 'none' or 'tanh', not %r" % (approximate,))
    return "gelu" if approximate == "none" else "gelu_tanh"


def silu(input: Tensor, out: Optional[Tensor] = None, stream: Optional[Stream] = None) -> Tensor:
    """x * sigmoid(x)."""
    return activation(input, "silu", out, stream)


def sigmoid(input: Tensor, out: Optional[Tensor] = None, stream: Optional[Stream] = None) -> Tensor:
    """1 / (1 + exp(-x))."""
    return activation(input, "sigmoid", out, stream)


def tanh(input: Tensor, out: Optional[Tensor] = None, stream: Optional[Stream] = None) -> Tensor:
    """Hyperbolic tangent."""
    return activation(input, "tanh", out, stream)


def relu_backward(grad_output: Tensor, input: Tensor, out: Optional[Tensor] = None,
                  stream: Optional[Stream] = None) -> Tensor:
    """Gradient of relu given the forward input."""
    return activation_backward(grad_output, input, "relu", out, stream)


def gelu_backward(grad_output: Tensor, input: Tensor, approximate: str = "none", out: Optional[Tensor] = None,
                  stream: Optional[Stream] = None) -> Tensor:
    """Gradient of gelu given the forward input."""
    return activation_backward(grad_output, input, _gelu_kind(approximate), out, stream)


def silu_backward(grad_output: Tensor, input: Tensor, out: Optional[Tensor] = None,
                  stream: Optional[Stream] = None) -> Tensor:
    """Gradient of silu given the forward input."""
    return activation_backward(grad_output, input, "silu", out, stream)


def sigmoid_backward(grad_output: Tensor, input: Tensor, out: Optional[Tensor] = None,
                     stream: Optional[Stream] = None) -> Tensor:
    """Gradient of sigmoid given the forward INPUT (not the output, unlike torch's internal op)."""
    return activation_backward(grad_output, input, "sigmoid", out, stream)


def tanh_backward(grad_output: Tensor, input: Tensor, out: Optional[Tensor] = None,
                  stream: Optional[Stream] = None) -> Tensor:
    """Gradient of tanh given the forward input."""
    return activation_backward(grad_output, input, "tanh", out, stream)


def bias_act(input: Tensor, bias: Tensor, act: Union[str, int] = "none", op: str = "add",
             out: Optional[Tensor] = None, stream: Optional[Stream] = None) -> Tensor:
    """act(input op bias) in one pass (op: "add", "sub", "mul", "div"; bias broadcasts,
    e.g. shape [cols]). The usual use is bias add + activation."""
    a = _tensor(input, "input")
    b = _tensor(bias, "bias")
    ops = {"add": ADD, "sub": SUB, "mul": MUL, "div": DIV}
    if op not in ops:
        raise InvalidArgumentError("bias_act: op must be one of %s, not %r" % (", ".join(ops), op))
    _same_ctx(a._ctx, (b, "bias"), (out, "out"))
    o = _out(out, _broadcast(a.shape, b.shape), a.dtype, a._ctx)
    C.gpucore_binary_act(ops[op], _act(act), o.handle, a.handle, b.handle, _stream(a._ctx, stream))
    return o


def cast(input: Tensor, dtype: Any, out: Optional[Tensor] = None, stream: Optional[Stream] = None) -> Tensor:
    """input converted to ``dtype`` (f32, f64, f16, bf16, float8_e4m3, float8_e5m2 in any
    combination; round to nearest even, NaN/Inf kept, out-of-range values become Inf; to fp8
    saturating instead: past the largest finite and ±Inf give ±max (448 / 57344), NaN gives
    0x7f, as CUDA's __NV_SATFINITE conversion). No scaling is applied."""
    a = _tensor(input, "input")
    dt = _dt.as_dtype(dtype)
    _same_ctx(a._ctx, (out, "out"))
    o = _out(out, a.shape, dt, a._ctx)
    C.gpucore_cast(o.handle, a.handle, _stream(a._ctx, stream))
    return o


def dropout(input: Tensor, p: float = 0.5, training: bool = True, seed: Optional[int] = None,
            offset: Optional[int] = None, out: Optional[Tensor] = None,
            stream: Optional[Stream] = None) -> Tensor:
    """Inverted dropout: each element is zeroed with probability ``p``, the rest are scaled
    by 1/(1-p). The mask is Philox uniform draws under (seed, offset): the same on every
    backend. Without ``seed`` the default generator (:func:`gpucore.manual_seed`) is used
    and advanced; to be able to run the backward, pass ``seed``/``offset`` yourself and give
    the same ones to :func:`dropout_backward`. ``training=False`` or p == 0 returns input."""
    a = _tensor(input, "input")
    pv = to_float(p, "p")
    if not training or pv == 0.0:
        return a
    _same_ctx(a._ctx, (out, "out"))
    o = _out(out, a.shape, a.dtype, a._ctx)
    if seed is None:
        sd, off = _generator["seed"], _generator["offset"] if offset is None else to_int(offset, "offset", 0,
                                                                                        UINT64_MAX)
        C.gpucore_dropout(o.handle, a.handle, pv, sd, off, _stream(a._ctx, stream))
        _generator["offset"] = (off + C.gpucore_random_offset_advance(o.numel(), 0)) & UINT64_MAX
    else:
        C.gpucore_dropout(o.handle, a.handle, pv, to_int(seed, "seed", 0, UINT64_MAX),
                          0 if offset is None else to_int(offset, "offset", 0, UINT64_MAX),
                          _stream(a._ctx, stream))
    return o


def dropout_backward(grad_output: Tensor, p: float, seed: int, offset: int = 0, out: Optional[Tensor] = None,
                     stream: Optional[Stream] = None) -> Tensor:
    """Gradient of :func:`dropout` (the same mask: pass the forward's p, seed and offset)."""
    return dropout(grad_output, p, True, seed, offset, out, stream)


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


def _loss_reduction(reduction: str) -> int:
    if reduction not in LOSS_REDUCTIONS:
        raise InvalidArgumentError("reduction must be 'none', 'mean' or 'sum', not %r" % (reduction,))
    return LOSS_REDUCTIONS[reduction]


# LayerNorm and RMSNorm live in ops_norm.py; cross_entropy and embedding (ops indexed by integer
# targets) in ops_index.py
from .ops_norm import layer_norm, layer_norm_backward, rms_norm, rms_norm_backward  # noqa: E402,F401
from .ops_index import (cross_entropy, cross_entropy_backward, embedding,  # noqa: E402,F401
                        embedding_backward)


# ---------------------------------------------------------------- Tensor methods and operators

def _install_methods() -> None:
    def _inplace(op: int) -> Any:
        def f(self: Tensor, other: TensorOrNumber) -> Tensor:
            return _binary(op, self, other, self, None)
        return f

    T = Tensor
    T.__add__ = lambda self, o: _binary(ADD, self, o, None, None)  # type: ignore[assignment]
    T.__radd__ = lambda self, o: _binary(ADD, o, self, None, None)  # type: ignore[assignment]
    T.__sub__ = lambda self, o: _binary(SUB, self, o, None, None)  # type: ignore[assignment]
    T.__rsub__ = lambda self, o: _binary(SUB, o, self, None, None)  # type: ignore[assignment]
    T.__mul__ = lambda self, o: _binary(MUL, self, o, None, None)  # type: ignore[assignment]
    T.__rmul__ = lambda self, o: _binary(MUL, o, self, None, None)  # type: ignore[assignment]
    T.__truediv__ = lambda self, o: _binary(DIV, self, o, None, None)  # type: ignore[assignment]
    T.__rtruediv__ = lambda self, o: _binary(DIV, o, self, None, None)  # type: ignore[assignment]
    T.__iadd__ = _inplace(ADD)  # type: ignore[assignment]
    T.__isub__ = _inplace(SUB)  # type: ignore[assignment]
    T.__imul__ = _inplace(MUL)  # type: ignore[assignment]
    T.__itruediv__ = _inplace(DIV)  # type: ignore[assignment]
    T.__neg__ = lambda self: neg(self)  # type: ignore[assignment]
    T.__abs__ = lambda self: abs(self)  # type: ignore[assignment]
    for name, fn in (("exp", exp), ("log", log), ("sqrt", sqrt), ("rsqrt", rsqrt), ("abs", abs), ("neg", neg),
                     ("relu", relu), ("gelu", gelu), ("silu", silu), ("sigmoid", sigmoid), ("tanh", tanh),
                     ("sum", sum), ("mean", mean), ("amax", amax), ("amin", amin), ("argmax", argmax),
                     ("softmax", softmax), ("log_softmax", log_softmax), ("clamp", clamp)):
        setattr(T, name, fn)

    def astype(self: Tensor, dtype: Any) -> Tensor:
        """This tensor converted to ``dtype`` (self when it already has it); see gpucore.cast."""
        return self if _dt.as_dtype(dtype) is self.dtype else cast(self, dtype)

    T.astype = astype  # type: ignore[attr-defined]
    T.float = lambda self: astype(self, "float32")  # type: ignore[attr-defined]
    T.double = lambda self: astype(self, "float64")  # type: ignore[attr-defined]
    T.half = lambda self: astype(self, "float16")  # type: ignore[attr-defined]
    T.bfloat16 = lambda self: astype(self, "bfloat16")  # type: ignore[attr-defined]


_install_methods()
