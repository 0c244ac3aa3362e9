"""Zero-copy exchange with other array libraries: DLPack and the CUDA array interface.

Producer (``Tensor.__dlpack__``): a PyCapsule named "dltensor" (or
"dltensor_versioned" when the consumer passes ``max_version >= (1, 0)``) holding a
DLManagedTensor over the tensor's memory. The capsule owns a separate view handle
of the tensor, so the memory stays alive until the consumer calls the deleter (or
the capsule is dropped unused), even if the tensor is freed or its context closed.

Consumer (:func:`from_dlpack`): takes a capsule or any object with ``__dlpack__``
(numpy, PyTorch, CuPy, JAX, gpucore), renames the capsule "used_dltensor", and
wraps the memory with ``gpucore_tensor_wrap``; the DLManagedTensor's deleter runs
when the last view of the new tensor is gone.

Streams: the C API has no way yet to hand out or wait on a native CUDA stream, so
exports synchronise the tensor's context before handing the memory out, and CUDA
imports synchronise the device after the producer has been asked for
``stream=1`` (legacy default stream). Both are correct but blocking.

bf16 is exchanged as DLPack bfloat16 (code 4); fp8 has no DLPack 0.6/1.0 code here
and raises BufferError.
"""
from __future__ import annotations

import ctypes
from ctypes import POINTER, Structure, c_char_p, c_int, c_int64, c_uint8, c_uint16, c_uint32, c_uint64, c_void_p
from typing import Any, Dict, Optional, Tuple

from . import _runtime
from . import dtypes as _dt
from ._lib import C
from ._runtime import DELETER, _Keep, forget_owner, register_owner
from .context import DeviceLike, get_context, Context
from .errors import (DtypeMismatchError, InvalidArgumentError, InvalidArgumentTypeError,
                     NotSupportedError)
from .tensor import Tensor, _i64_array

__all__ = ["from_dlpack", "to_dlpack", "dlpack_device", "cuda_array_interface", "kDLCPU", "kDLCUDA"]

kDLCPU, kDLCUDA, kDLCUDAHost, kDLCUDAManaged = 1, 2, 3, 13
FLAG_READ_ONLY, FLAG_IS_COPIED = 1, 2


class DLDevice(Structure):
    _fields_ = [("device_type", c_int), ("device_id", c_int)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int), ("dtype", DLDataType),
                ("shape", POINTER(c_int64)), ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


class DLManagedTensor(Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p), ("deleter", c_void_p)]


class DLPackVersion(Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class DLManagedTensorVersioned(Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", c_void_p), ("deleter", c_void_p),
                ("flags", c_uint64), ("dl_tensor", DLTensor)]


_DL_DELETER_FN = ctypes.CFUNCTYPE(None, c_void_p)
_CAPSULE_DESTRUCTOR_FN = ctypes.CFUNCTYPE(None, c_void_p)

_api = ctypes.pythonapi
_PyCapsule_New = _api.PyCapsule_New
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = [c_void_p, c_void_p, c_void_p]
_PyCapsule_IsValid = _api.PyCapsule_IsValid
_PyCapsule_IsValid.restype = c_int
_PyCapsule_IsValid.argtypes = [c_void_p, c_char_p]
_PyCapsule_GetPointer = _api.PyCapsule_GetPointer
_PyCapsule_GetPointer.restype = c_void_p
_PyCapsule_GetPointer.argtypes = [c_void_p, c_char_p]
_PyCapsule_GetName = _api.PyCapsule_GetName
_PyCapsule_GetName.restype = c_char_p
_PyCapsule_GetName.argtypes = [ctypes.py_object]
_PyCapsule_SetName = _api.PyCapsule_SetName
_PyCapsule_SetName.restype = c_int
_PyCapsule_SetName.argtypes = [ctypes.py_object, c_void_p]


def _immortal_name(s: bytes) -> Any:
    """A C string that is never freed (capsules keep a pointer to their name)."""
    buf = ctypes.create_string_buffer(s)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(buf))
    return buf


_NAME_LEGACY = _immortal_name(b"dltensor")
_NAME_VERSIONED = _immortal_name(b"dltensor_versioned")
_NAME_USED = _immortal_name(b"used_dltensor")
_NAME_USED_VERSIONED = _immortal_name(b"used_dltensor_versioned")

# Exports alive in a consumer: address of the DLManagedTensor -> what it needs alive.
_live_exports: Dict[int, Tuple[Any, ...]] = {}


def _dl_deleter(addr: Optional[int]) -> None:
    # The consumer is done with our DLManagedTensor: drop it and its view handle.
    try:
        _live_exports.pop(addr or 0, None)
    except Exception:
        pass


def _capsule_destructor(capsule: Optional[int]) -> None:
    # A capsule dropped without being consumed still owns the DLManagedTensor.
    try:
        for name in (b"dltensor", b"dltensor_versioned"):
            if capsule and _PyCapsule_IsValid(capsule, name):
                _dl_deleter(_PyCapsule_GetPointer(capsule, name))
    except Exception:
        pass


_DL_DELETER = _DL_DELETER_FN(_dl_deleter)
_CAPSULE_DESTRUCTOR = _CAPSULE_DESTRUCTOR_FN(_capsule_destructor)
for _cb in (_DL_DELETER, _CAPSULE_DESTRUCTOR):  # C may call these until the process ends
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(_cb))
_DL_DELETER_ADDR = ctypes.cast(_DL_DELETER, c_void_p).value
_CAPSULE_DESTRUCTOR_ADDR = ctypes.cast(_CAPSULE_DESTRUCTOR, c_void_p).value


def live_export_count() -> int:
    """DLPack exports not yet released by their consumers (for tests)."""
    return len(_live_exports)


def dlpack_device(t: Tensor) -> Tuple[int, int]:
    """The DLPack device of a tensor: (kDLCPU, 0) or (kDLCUDA, index)."""
    ctx = t.context
    t.handle
    if ctx.device_type == 1:
        return (kDLCUDA, ctx.device_index)
    return (kDLCPU, 0)


def _dl_dtype(dt: _dt.DType) -> Tuple[int, int]:
    if dt.dl_code is None:
        raise BufferError("%s has no DLPack type code; export its bits with a uint8 view of a copy instead"
                          % dt.long_name)
    return dt.dl_code, dt.dl_bits


def to_dlpack(t: Tensor, stream: Any = None, max_version: Optional[Tuple[int, int]] = None,
              dl_device: Optional[Tuple[int, int]] = None, copy: Optional[bool] = None) -> Any:
    """A DLPack capsule over ``t`` (the ``__dlpack__`` protocol; zero-copy unless ``copy``).

    ``max_version >= (1, 0)`` gives a versioned capsule; otherwise a legacy one.
    ``dl_device`` other than the tensor's own is honoured only for (kDLCPU, 0) and
    only when ``copy`` is not False (the data is copied to the host).
    """
    if not isinstance(t, Tensor):
        raise InvalidArgumentTypeError("to_dlpack needs a gpucore.Tensor, not %s" % type(t).__name__)
    t.handle
    if stream is not None and (isinstance(stream, bool) or not isinstance(stream, int)):
        raise InvalidArgumentTypeError("stream must be an int or None, not %s" % type(stream).__name__)
    versioned = False
    if max_version is not None:
        try:
            versioned = int(max_version[0]) >= 1
        except Exception:
            raise InvalidArgumentTypeError("max_version must be a (major, minor) tuple") from None
    copied = False
    src = t
    own = dlpack_device(t)
    if dl_device is not None and tuple(dl_device) != own:
        if tuple(dl_device) != (kDLCPU, 0):
            raise BufferError("cannot export a %s tensor to DLPack device %r" % (t.device, tuple(dl_device)))
        if copy is False:
            raise BufferError("dl_device asks for the CPU but copy=False; the tensor is on %s" % t.device)
        src = t.to("cpu")
        copied = True
    elif copy:
        src = t.clone()
        copied = True
    code, bits = _dl_dtype(src.dtype)
    ctx = src.context
    if ctx.device_type != 1 or stream != -1:
        ctx.synchronize()   # no native stream hand-off in the C API yet: make the data ready now
    keep = _Keep(src._view_handle(), ctx, src._foreign, counts_as_export=True)
    shape = src.shape
    nd = len(shape)
    shape_arr = _i64_array(shape)
    strides_arr = _i64_array(src.strides)
    m: Any = DLManagedTensorVersioned() if versioned else DLManagedTensor()
    if versioned:
        m.version.major, m.version.minor = 1, 0
        m.flags = FLAG_IS_COPIED if copied else 0
    dl = m.dl_tensor
    dl.data = src.data_ptr() or None
    dl.device.device_type, dl.device.device_id = dlpack_device(src)
    dl.ndim = nd
    dl.dtype.code, dl.dtype.bits, dl.dtype.lanes = code, bits, 1
    dl.shape = ctypes.cast(shape_arr, POINTER(c_int64))
    dl.strides = ctypes.cast(strides_arr, POINTER(c_int64))
    dl.byte_offset = 0
    m.manager_ctx = None
    m.deleter = _DL_DELETER_ADDR
    addr = ctypes.addressof(m)
    _live_exports[addr] = (m, shape_arr, strides_arr, keep)
    name = _NAME_VERSIONED if versioned else _NAME_LEGACY
    try:
        return _PyCapsule_New(addr, ctypes.addressof(name), _CAPSULE_DESTRUCTOR_ADDR)
    except BaseException:
        _live_exports.pop(addr, None)
        raise


class _DLPackOwner:
    """Holds a consumed DLManagedTensor; calls its deleter when gpucore is done with the memory."""

    __slots__ = ("ptr", "deleter", "source")

    def __init__(self, ptr: int, deleter: Optional[int], source: Any) -> None:
        self.ptr = ptr
        self.deleter = deleter
        self.source = source   # the producer object, kept for its lifetime guarantees

    def _on_release(self) -> None:
        d, self.deleter = self.deleter, None
        if d:
            _DL_DELETER_FN(d)(self.ptr)
        self.source = None


_DL_TO_GPUCORE = {(2, 32): _dt.float32, (2, 64): _dt.float64, (2, 16): _dt.float16, (4, 16): _dt.bfloat16,
                  (0, 32): _dt.int32, (0, 64): _dt.int64, (1, 8): _dt.uint8}


def _is_capsule(obj: Any) -> bool:
    return type(obj).__name__ == "PyCapsule"


def _cuda_device_synchronize() -> None:
    """Best effort: wait for all work of the current CUDA context (driver API)."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        fn = cuda.cuCtxSynchronize
        fn.restype = c_int
        fn.argtypes = []
        fn()
    except OSError:
        pass


def from_dlpack(obj: Any, device: DeviceLike = None) -> Tensor:
    """A gpucore Tensor sharing the memory of ``obj`` (no copy).

    ``obj`` is a DLPack capsule or any object with ``__dlpack__`` (numpy arrays,
    PyTorch/CuPy/JAX arrays, gpucore tensors). CPU memory goes to the shared "cpu"
    context and CUDA memory of device N to "cuda:N", unless ``device`` names a
    context on the same device. Read-only exports, fp8/bool/complex types, lanes > 1,
    negative strides and other devices are refused with an explanation.
    """
    if obj is None:
        raise InvalidArgumentTypeError("from_dlpack: obj is None")
    source = obj
    if _is_capsule(obj):
        capsule = obj
    elif hasattr(obj, "__dlpack__"):
        dev = None
        if hasattr(obj, "__dlpack_device__"):
            dev = tuple(obj.__dlpack_device__())
        kwargs: Dict[str, Any] = {}
        if dev is not None and dev[0] == kDLCUDA:
            kwargs["stream"] = 1
        try:
            capsule = obj.__dlpack__(max_version=(1, 0), **kwargs)
        except TypeError:
            capsule = obj.__dlpack__(**kwargs)
        if dev is not None and dev[0] == kDLCUDA:
            _cuda_device_synchronize()
    else:
        raise InvalidArgumentTypeError("from_dlpack needs a DLPack capsule or an object with __dlpack__, not %s"
                                       % type(obj).__name__)
    name = _PyCapsule_GetName(capsule)
    if name == b"dltensor":
        ptr = _PyCapsule_GetPointer(id(capsule), b"dltensor")
        m: Any = DLManagedTensor.from_address(ptr)
        flags = 0
    elif name == b"dltensor_versioned":
        ptr = _PyCapsule_GetPointer(id(capsule), b"dltensor_versioned")
        m = DLManagedTensorVersioned.from_address(ptr)
        if m.version.major != 1:
            raise BufferError("DLPack version %d.%d is not supported (1.x is)" % (m.version.major, m.version.minor))
        flags = m.flags
    elif name in (b"used_dltensor", b"used_dltensor_versioned"):
        raise InvalidArgumentError("from_dlpack: this DLPack capsule was already consumed")
    else:
        raise InvalidArgumentError("from_dlpack: a capsule named %r is not a DLPack tensor" % (name,))
    dl = m.dl_tensor
    if flags & FLAG_READ_ONLY:
        raise InvalidArgumentError("from_dlpack: the producer marked the memory read-only and gpucore tensors "
                                   "are writable; copy it first (e.g. gpucore.tensor(np.asarray(x)))")
    dtype = _DL_TO_GPUCORE.get((dl.dtype.code, dl.dtype.bits))
    if dtype is None or dl.dtype.lanes != 1:
        raise DtypeMismatchError("from_dlpack: DLPack dtype (code %d, bits %d, lanes %d) has no gpucore "
                                 "counterpart" % (dl.dtype.code, dl.dtype.bits, dl.dtype.lanes))
    nd = dl.ndim
    if nd < 0 or nd > 8:
        raise InvalidArgumentError("from_dlpack: %d dims; gpucore supports at most 8" % nd)
    shape = [dl.shape[i] for i in range(nd)]
    strides = [dl.strides[i] for i in range(nd)] if dl.strides else None
    dtype_dev = dl.device.device_type
    if dtype_dev in (kDLCPU, kDLCUDAHost):
        want = "cpu"
    elif dtype_dev == kDLCUDA:
        want = "cuda:%d" % dl.device.device_id
    else:
        raise NotSupportedError("from_dlpack: DLPack device type %d is not supported (CPU and CUDA are)"
                                % dtype_dev)
    if device is not None:
        ctx = get_context(device)
        if ctx.device != want and not (want == "cpu" and ctx.is_cpu):
            raise NotSupportedError("from_dlpack: the memory is on %s but device %s was asked for; import it "
                                    "first, then use .to(...)" % (want, ctx.device))
    else:
        ctx = get_context(want)
    data = (dl.data or 0) + dl.byte_offset
    owner = _DLPackOwner(ptr, m.deleter, source)
    key = register_owner(owner)
    out = c_void_p()
    try:
        C.gpucore_tensor_wrap(ctx.handle, dtype.value, nd, _i64_array(shape),
                              _i64_array(strides) if strides is not None else None, data or None, DELETER,
                              key, ctypes.byref(out))
    except BaseException:
        forget_owner(key)
        owner.deleter = None   # the capsule still owns it: its destructor calls the deleter
        raise
    used = _NAME_USED_VERSIONED if name == b"dltensor_versioned" else _NAME_USED
    _PyCapsule_SetName(capsule, ctypes.addressof(used))
    return Tensor._adopt(ctx, out.value, foreign=True)


def cuda_array_interface(t: Tensor) -> dict:
    """The version-3 ``__cuda_array_interface__`` of a CUDA tensor.

    Raises AttributeError for tensors that are not on CUDA (so ``hasattr`` is False)
    and for dtypes numpy cannot name (bf16, fp8). The context is synchronised first,
    so ``stream`` is None (no further synchronisation needed).
    """
    if not isinstance(t, Tensor) or t.is_freed or t.context.device_type != 1:
        raise AttributeError("__cuda_array_interface__ exists only on CUDA tensors")
    dt = t.dtype
    if not dt.exact_numpy:
        raise AttributeError("__cuda_array_interface__: %s has no numpy type string" % dt.long_name)
    t.context.synchronize()
    isz = dt.itemsize
    return {"version": 3, "shape": t.shape, "typestr": dt.numpy.str, "data": (t.data_ptr(), False),
            "strides": None if t.is_contiguous() else tuple(s * isz for s in t.strides), "descr": [("", dt.numpy.str)],
            "stream": None}
