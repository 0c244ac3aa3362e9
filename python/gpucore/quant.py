"""Quantized weights: bitsandbytes' NF4 / FP4 / int8 rows and GGUF blocks (Q4_0 .. Q6_K).

A quantized weight is a uint8 tensor of the format's bytes (the layouts are documented with
``gpucore_quant_format`` in gpucore.h); its logical shape travels beside it::

    q = gpucore.quantize(w, "nf4")               # w: [rows, cols] f32/f16/bf16
    w2 = gpucore.dequantize(q, "nf4", w.shape)   # f32 by default

The bits equal the reference implementations' (bitsandbytes, ggml / the gguf package).
"""
from __future__ import annotations

from ctypes import byref, c_int64
from typing import Any, Optional, Sequence, Tuple, Union

from . import dtypes as _dt
from ._lib import C
from ._op_args import _out, _same_ctx, _stream, _tensor
from .context import Stream
from .errors import InvalidArgumentError, InvalidArgumentTypeError
from .tensor import Tensor

__all__ = ["QUANT_FORMATS", "QUANT_DOUBLE", "quant_size", "quantize", "dequantize"]

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
