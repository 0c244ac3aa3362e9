"""Elementwise ops: arithmetic between tensors and numbers (with PyTorch's type promotion), the
unary math functions, scale, axpy, clamp, activations and their backwards, bias + activation, casts
and dropout. Re-exported by :mod:`gpucore.ops`; the common rules there apply.
"""
from __future__ import annotations

import math
from ctypes import byref, c_double, c_void_p
from typing import Any, Optional, Sequence, Tuple, Union

from . import dtypes as _dt
from ._lib import C, fast_function, raise_status, retry_after_release
from ._op_args import (ACTIVATIONS, Number, TensorOrNumber, _act, _broadcast, _is_number, _out, _same_ctx,
                       _stream, _tensor)
from ._validate import UINT64_MAX, to_float, to_int
from .context import Stream
from .errors import DtypeMismatchError, InvalidArgumentError
from .tensor import Tensor, _fresh, _generator, _shape_cache, _shape_info, full

ADD, SUB, MUL, DIV, DIV_TRUNC, DIV_FLOOR, MAXIMUM, MINIMUM = 0, 1, 2, 3, 4, 5, 6, 7
EXP, LOG, SQRT, RSQRT, ABS, NEG, SQUARE = 0, 1, 2, 3, 4, 5, 6


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
