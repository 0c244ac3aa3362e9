"""Quantized weights: bitsandbytes' NF4 / FP4 / int8 rows and GGUF blocks (Q4_0 .. Q6_K).

A quantized weight is a uint8 tensor of the format's bytes (the layouts are documented with
``gpucore_quant_format`` in gpucore.h); its logical shape travels beside it::

    q = gpucore.quantize(w, "nf4")               # w: [rows, cols] f32/f16/bf16
    w2 = gpucore.dequantize(q, "nf4", w.shape)   # f32 by default

The bits equal the reference implementations' (bitsandbytes, ggml / the gguf package).

A :class:`QWeight` holds the bytes with their format and shape; :func:`qlinear` and
:func:`qlinear_backward_data` compute a linear layer with it without dequantizing it whole::

    qw = gpucore.QWeight.quantize(w, "nf4")      # or QWeight(bytes, "q4_0", (out, in))
    y = gpucore.qlinear(x, qw, bias)             # x·dequant(W)ᵀ + bias, in x's dtype
"""
from __future__ import annotations

import ctypes
from ctypes import byref, c_int, c_int64, c_void_p
from typing import Any, Optional, Sequence, Tuple, Union

from . import dtypes as _dt
from ._lib import C
from ._op_args import _opt, _out, _same_ctx, _stream, _tensor
from .context import Stream
from .errors import InvalidArgumentError, InvalidArgumentTypeError, ShapeMismatchError
from .nn import _LINEAR_ACTS
from .tensor import Tensor, empty

__all__ = ["QUANT_FORMATS", "QUANT_DOUBLE", "quant_size", "quantize", "dequantize", "QWeight", "qlinear",
           "qlinear_backward_data"]

#: Format names and their gpucore_quant_format values.
QUANT_FORMATS = {"nf4": 0, "fp4": 1, "int8": 2, "q4_0": 3, "q4_1": 4, "q5_0": 5, "q5_1": 6, "q8_0": 7,
                 "q4_k": 8, "q5_k": 9, "q6_k": 10}
#: Flag: double quantization of the NF4/FP4 absmax (bitsandbytes' compress_statistics).
QUANT_DOUBLE = 1


def _format(fmt: Union[str, int]) -> int:
    if isinstance(fmt, str):
        key = fmt.lower()
        if key not in QUANT_FORMATS:
            raise InvalidArgumentError("quant format %r is not one of %s" % (fmt, ", ".join(QUANT_FORMATS)))
        return QUANT_FORMATS[key]
    if isinstance(fmt, bool) or not isinstance(fmt, int):
        raise InvalidArgumentTypeError("quant format must be a name (%s) or its int value, not %s"
                                       % (", ".join(QUANT_FORMATS), type(fmt).__name__))
    return fmt


def _matrix(shape: Sequence[int]) -> Tuple[int, int]:
    shape = tuple(int(s) for s in shape)
    if not shape:
        raise InvalidArgumentError("a quantized weight is a matrix [rows, cols]; the shape is empty")
    rows = 1
    for s in shape[:-1]:
        rows *= s
    return rows, shape[-1]


def quant_size(fmt: Union[str, int], shape: Sequence[int], block_size: int = 0, double_quant: bool = False) -> int:
    """Bytes of a matrix of ``shape`` (rows = product of all but the last dim) in ``fmt``."""
    rows, cols = _matrix(shape)
    n = c_int64()
    C.gpucore_quant_size(_format(fmt), rows, cols, int(block_size), QUANT_DOUBLE if double_quant else 0, byref(n))
    return n.value


def quantize(input: Tensor, fmt: Union[str, int], block_size: int = 0, double_quant: bool = False,
             out: Optional[Tensor] = None, stream: Optional[Stream] = None) -> Tensor:
    """The bytes of ``input`` (f32, f16 or bf16; its last dim is the row) in ``fmt``: a uint8
    tensor of :func:`quant_size` bytes. ``block_size`` is NF4/FP4's (0: 64). Waits for the
    stream; a NaN or infinite value raises InvalidArgumentError naming its position."""
    x = _tensor(input, "input")
    f = _format(fmt)
    _same_ctx(x._ctx, (out, "out"))
    flags = QUANT_DOUBLE if double_quant else 0
    o = _out(out, (quant_size(f, x.shape, block_size, double_quant),), _dt.uint8, x._ctx)
    C.gpucore_quantize(x.handle, f, int(block_size), flags, o.handle, _stream(x._ctx, stream))
    return o


def dequantize(q: Tensor, fmt: Union[str, int], shape: Sequence[int], block_size: int = 0,
               double_quant: bool = False, dtype: Any = None, out: Optional[Tensor] = None,
               stream: Optional[Stream] = None) -> Tensor:
    """The values of the quantized bytes ``q`` as a tensor of ``shape`` and ``dtype`` (f32,
    f16 or bf16; f32 by default), computed as the reference does."""
    qt = _tensor(q, "q")
    f = _format(fmt)
    _same_ctx(qt._ctx, (out, "out"))
    shape = tuple(int(s) for s in shape)
    dt = _dt.float32 if dtype is None else _dt.as_dtype(dtype)
    o = _out(out, shape, dt if out is None else out.dtype, qt._ctx)
    C.gpucore_dequantize(qt.handle, f, int(block_size), QUANT_DOUBLE if double_quant else 0, o.handle,
                         _stream(qt._ctx, stream))
    return o


class _CQWeight(ctypes.Structure):
    """ctypes mirror of ``gpucore_qweight``."""
    _fields_ = [("data", c_void_p), ("format", c_int), ("block_size", c_int64), ("flags", c_int),
                ("rows", c_int64), ("cols", c_int64)]


class QWeight:
    """A quantized weight W [rows, cols] (a linear layer's [out, in]): its uint8 bytes (``data``,
    :func:`quant_size` of them), format, NF4/FP4 block size and shape. The C calls check that
    they agree."""

    def __init__(self, data: Tensor, fmt: Union[str, int], shape: Sequence[int], block_size: int = 0,
                 double_quant: bool = False) -> None:
        self.data = _tensor(data, "data")
        self.format = _format(fmt)
        self.shape = _matrix(shape)
        self.block_size = int(block_size)
        self.flags = QUANT_DOUBLE if double_quant else 0
        self._c = _CQWeight(self.data.handle, self.format, self.block_size, self.flags, *self.shape)

    @classmethod
    def quantize(cls, weight: Tensor, fmt: Union[str, int], block_size: int = 0, double_quant: bool = False,
                 stream: Optional[Stream] = None) -> "QWeight":
        """``weight`` [rows, cols] (f32/f16/bf16, on the CPU: quantizing runs there) quantized."""
        w = _tensor(weight, "weight")
        q = quantize(w, fmt, block_size, double_quant, stream=stream)
        return cls(q, fmt, w.shape, block_size, double_quant)

    @property
    def format_name(self) -> str:
        return next(k for k, v in QUANT_FORMATS.items() if v == self.format)

    def dequantize(self, dtype: Any = None, stream: Optional[Stream] = None) -> Tensor:
        """W's values as a dense [rows, cols] tensor (f32 by default)."""
        return dequantize(self.data, self.format, self.shape, self.block_size, bool(self.flags), dtype,
                          stream=stream)

    def __repr__(self) -> str:
        return "QWeight(%s, shape=%s%s)" % (self.format_name, self.shape,
                                             ", block_size=%d" % self.block_size if self.block_size else "")


def _qweight(qw: Any, name: str) -> QWeight:
    if not isinstance(qw, QWeight):
        raise InvalidArgumentTypeError("%s must be a gpucore.QWeight, not %s" % (name, type(qw).__name__))
    return qw


def qlinear(input: Tensor, qweight: QWeight, bias: Optional[Tensor] = None, act: Optional[str] = None, *,
            return_aux: bool = False, out: Optional[Tensor] = None, stream: Optional[Stream] = None) -> Any:
    """y = act(input·Wᵀ + bias) with a quantized W (``gpucore_qlinear_forward``): input [..., cols],
    bias [rows] or None, y [..., rows], one dtype (f32, f16 or bf16). Each W value is dequantized in
    f32 and rounded to that dtype; W is never dequantized whole. ``act``: None, "relu" or "gelu"
    (the tanh form); ``return_aux`` (GELU): also the pre-activation, as :func:`gpucore.linear`."""
    x, qw = _tensor(input, "input"), _qweight(qweight, "qweight")
    key = "none" if act is None else act
    if key not in _LINEAR_ACTS:
        raise InvalidArgumentError("qlinear: act must be None, 'relu' or 'gelu', not %r" % (act,))
    if not x.shape:
        raise ShapeMismatchError("qlinear: input must be [..., %d]; it is a scalar" % qw.shape[1])
    ctx = x._ctx
    _same_ctx(ctx, (qw.data, "qweight.data"), (bias, "bias"), (out, "out"))
    yshape = tuple(x.shape[:-1]) + (qw.shape[0],)
    y = _out(out, yshape, x.dtype, ctx)
    aux = None
    if return_aux:
        if _LINEAR_ACTS[key] != 3:
            raise InvalidArgumentError("qlinear: return_aux needs act='gelu'")
        aux = empty(yshape, x.dtype, device=ctx)
    C.gpucore_qlinear_forward(x.handle, byref(qw._c), _opt(bias, "bias"), _LINEAR_ACTS[key], y.handle,
                              _opt(aux, "aux"), _stream(ctx, stream))
    return (y, aux) if return_aux else y


def qlinear_backward_data(grad_out: Tensor, qweight: QWeight, dx: Optional[Tensor] = None, beta: float = 0.0,
                          stream: Optional[Stream] = None) -> Tensor:
    """The input gradient of :func:`qlinear`: dx = grad_out·W + beta·dx (``gpucore_qlinear_backward_data``;
    beta 0 or 1, dx given for 1). grad_out [..., rows], dx [..., cols]; no weight gradient (the
    quantized base is frozen)."""
    g, qw = _tensor(grad_out, "grad_out"), _qweight(qweight, "qweight")
    if not g.shape:
        raise ShapeMismatchError("qlinear_backward_data: grad_out must be [..., %d]; it is a scalar" % qw.shape[0])
    ctx = g._ctx
    _same_ctx(ctx, (qw.data, "qweight.data"), (dx, "dx"))
    if dx is None and beta != 0:
        raise InvalidArgumentError("qlinear_backward_data: beta %r adds to dx; pass dx" % (beta,))
    d = _out(dx, tuple(g.shape[:-1]) + (qw.shape[1],), g.dtype, ctx)
    C.gpucore_qlinear_backward_data(g.handle, byref(qw._c), float(beta), d.handle, _stream(ctx, stream))
    return d
