"""gpucore dtypes and their numpy / DLPack counterparts.

=============  ========  ==================  ======================================
gpucore dtype  C enum    numpy dtype         notes
=============  ========  ==================  ======================================
float32        F32       float32
float64        F64       float64
float16        F16       float16
bfloat16       BF16      ml_dtypes.bfloat16  ``Tensor.numpy()`` gives an ml_dtypes array
                                             (zero-copy; refused without ml_dtypes);
                                             ``Tensor.numpy(convert=True)`` gives float32;
                                             ``DType.numpy`` is uint16, the bits
int32          I32       int32
int64          I64       int64
uint8          U8        uint8
float8_e4m3    FP8_E4M3  ml_dtypes.float8_e4m3fn  matmul operands, cast, LoRA base; DType.numpy uint8
float8_e5m2    FP8_E5M2  ml_dtypes.float8_e5m2    matmul operands, cast, LoRA base; DType.numpy uint8
=============  ========  ==================  ======================================
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Union

import numpy as np

from .errors import InvalidArgumentError, InvalidArgumentTypeError

__all__ = ["DType", "float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8",
           "float8_e4m3", "float8_e5m2", "as_dtype", "all_dtypes", "bf16_to_float32",
           "float32_to_bf16", "fp8_to_float32"]


class DType:
    """A gpucore element type.

    Attributes:
        value: the ``gpucore_dtype`` enum value.
        name: the library's short name ("f32", "bf16", ...).
        itemsize: bytes per element.
        numpy: the numpy dtype holding the same bytes (for bf16/fp8, the unsigned
            integer of the same width: the values are raw bits).
        is_floating: a floating-point type.
        exact_numpy: whether ``numpy`` has the same meaning (False for bf16/fp8).
    """

    __slots__ = ("value", "name", "long_name", "itemsize", "numpy", "is_floating", "exact_numpy",
                 "dl_code", "dl_bits")

    def __init__(self, value: int, name: str, long_name: str, itemsize: int, numpy_dtype: Any,
                 is_floating: bool, exact: bool, dl_code: Optional[int]) -> None:
        self.value = value
        self.name = name
        self.long_name = long_name
        self.itemsize = itemsize
        self.numpy = np.dtype(numpy_dtype)
        self.is_floating = is_floating
        self.exact_numpy = exact
        self.dl_code = dl_code
        self.dl_bits = itemsize * 8

    def __repr__(self) -> str:
        return "gpucore.%s" % self.long_name

    def __reduce__(self) -> Any:
        return (as_dtype, (self.long_name,))

    def __int__(self) -> int:
        return self.value

    def __index__(self) -> int:
        return self.value


# DLPack type codes
_DL_INT, _DL_UINT, _DL_FLOAT, _DL_BFLOAT = 0, 1, 2, 4

float32 = DType(0, "f32", "float32", 4, np.float32, True, True, _DL_FLOAT)
float64 = DType(1, "f64", "float64", 8, np.float64, True, True, _DL_FLOAT)
float16 = DType(2, "f16", "float16", 2, np.float16, True, True, _DL_FLOAT)
bfloat16 = DType(3, "bf16", "bfloat16", 2, np.uint16, True, False, _DL_BFLOAT)
int32 = DType(4, "i32", "int32", 4, np.int32, False, True, _DL_INT)
int64 = DType(5, "i64", "int64", 8, np.int64, False, True, _DL_INT)
uint8 = DType(6, "u8", "uint8", 1, np.uint8, False, True, _DL_UINT)
float8_e4m3 = DType(7, "fp8_e4m3", "float8_e4m3", 1, np.uint8, True, False, None)
float8_e5m2 = DType(8, "fp8_e5m2", "float8_e5m2", 1, np.uint8, True, False, None)

_ALL = (float32, float64, float16, bfloat16, int32, int64, uint8, float8_e4m3, float8_e5m2)
_BY_VALUE: Dict[int, DType] = {d.value: d for d in _ALL}
_BY_NAME: Dict[str, DType] = {}
for _d in _ALL:
    _BY_NAME[_d.name] = _d
    _BY_NAME[_d.long_name] = _d
_BY_NAME.update({"float": float32, "double": float64, "half": float16, "bf16": bfloat16,
                 "long": int64, "int": int32, "e4m3": float8_e4m3, "e5m2": float8_e5m2})
_FROM_NUMPY: Dict[np.dtype, DType] = {np.dtype(d.numpy): d for d in _ALL if d.exact_numpy}

# bf16 and fp8 as numpy dtypes: ml_dtypes' (the ones JAX uses), when that package is importable.
try:
    import ml_dtypes as _ml_dtypes
    VALUE_NUMPY: Dict[int, np.dtype] = {bfloat16.value: np.dtype(_ml_dtypes.bfloat16),
                                        float8_e4m3.value: np.dtype(_ml_dtypes.float8_e4m3fn),
                                        float8_e5m2.value: np.dtype(_ml_dtypes.float8_e5m2)}
except ImportError:  # pragma: no cover - ml_dtypes is a dependency; numpy() then refuses these dtypes
    VALUE_NUMPY = {}
_FROM_NUMPY.update({nd: _BY_VALUE[v] for v, nd in VALUE_NUMPY.items()})

DTypeLike = Union[DType, str, np.dtype, type]


def all_dtypes() -> tuple:
    """Every gpucore dtype, in enum order."""
    return _ALL


def from_value(value: int) -> DType:
    """The DType of a C enum value."""
    try:
        return _BY_VALUE[int(value)]
    except KeyError:
        raise InvalidArgumentError("unknown gpucore dtype value %r" % (value,)) from None


def as_dtype(d: Any) -> DType:
    """Resolve a dtype given as a DType, a name ("f32", "float32", "bf16"), or a numpy dtype/type."""
    if isinstance(d, DType):
        return d
    if d is None:
        raise InvalidArgumentTypeError("dtype is None; give a gpucore dtype such as gpucore.float32")
    if isinstance(d, str):
        try:
            return _BY_NAME[d.lower()]
        except KeyError:
            raise InvalidArgumentError("unknown dtype name %r; known: %s" % (d, ", ".join(sorted(_BY_NAME)))) from None
    if isinstance(d, bool) or isinstance(d, (int, float)):
        raise InvalidArgumentTypeError("dtype must be a gpucore dtype, a name or a numpy dtype, not %r" % (d,))
    try:
        nd = np.dtype(d)
    except Exception:
        raise InvalidArgumentTypeError("dtype must be a gpucore dtype, a name or a numpy dtype, not %r" % (d,)) from None
    try:
        return _FROM_NUMPY[nd]
    except KeyError:
        raise InvalidArgumentError("numpy dtype %s has no gpucore counterpart (supported: float32, float64, "
                                   "float16, int32, int64, uint8)" % nd) from None


def from_numpy_dtype(nd: np.dtype) -> DType:
    """The gpucore dtype whose meaning equals numpy dtype `nd` (raises if none)."""
    return as_dtype(nd)


# ---- conversions for the dtypes numpy lacks ----

def _bits_of(a: Any, bits_dtype: Any) -> np.ndarray:
    """a as an array of bits_dtype: an ml_dtypes array (bf16, fp8) is viewed as its bits, not converted."""
    if isinstance(a, np.ndarray) and a.dtype in VALUE_NUMPY.values() and a.dtype.itemsize == np.dtype(bits_dtype).itemsize:
        return a.view(bits_dtype)
    return np.asarray(a, dtype=bits_dtype)


def bf16_to_float32(bits: np.ndarray) -> np.ndarray:
    """bf16 values (uint16 bits, or an ml_dtypes.bfloat16 array) -> float32 (exact)."""
    # np.ascontiguousarray would turn a 0-d array into shape (1,): keep the shape explicitly.
    b = _bits_of(bits, np.uint16)
    return (b.reshape(-1).astype(np.uint32) << 16).view(np.float32).reshape(b.shape)


def float32_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits (uint16), rounding to nearest even; NaN stays NaN."""
    shape = np.shape(x)
    f = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    u = f.view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(f)
    if nan.any():
        rounded = rounded.copy()
        rounded[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return rounded.reshape(shape)


def _fp8_table(exp_bits: int, man_bits: int, bias: int, e4m3: bool) -> np.ndarray:
    out = np.empty(256, dtype=np.float32)
    for b in range(256):
        sign = -1.0 if b & 0x80 else 1.0
        e = (b >> man_bits) & ((1 << exp_bits) - 1)
        m = b & ((1 << man_bits) - 1)
        if e4m3 and e == 0xF and m == 0x7:
            v = float("nan")
        elif not e4m3 and e == 0x1F:
            v = float("inf") if m == 0 else float("nan")
        elif e == 0:
            v = m / (1 << man_bits) * 2.0 ** (1 - bias)
        else:
            v = (1 + m / (1 << man_bits)) * 2.0 ** (e - bias)
        out[b] = sign * v
    return out


_FP8_TABLES: Dict[int, np.ndarray] = {}


def fp8_to_float32(bits: np.ndarray, dtype: DType) -> np.ndarray:
    """fp8 (e4m3fn or e5m2) bits as uint8 (or an ml_dtypes float8 array) -> float32 (exact)."""
    dtype = as_dtype(dtype)
    if dtype.value not in (7, 8):
        raise InvalidArgumentError("fp8_to_float32: dtype must be float8_e4m3 or float8_e5m2, not %s" % dtype.long_name)
    if dtype.value not in _FP8_TABLES:
        _FP8_TABLES[7] = _fp8_table(4, 3, 7, True)
        _FP8_TABLES[8] = _fp8_table(5, 2, 15, False)
    b = _bits_of(bits, np.uint8)
    return _FP8_TABLES[dtype.value][b.reshape(-1)].reshape(b.shape)
