"""Loading libgpucore.so and the one table that declares its C functions.

Adding a C function to the binding is one line in ``DECLARATIONS``:
``"gpucore_name": (RESTYPE, [ARGTYPES...]),``. A RESTYPE of ``STATUS`` means the
function returns ``gpucore_status``: the wrapper in ``C`` raises the matching
exception (with ``gpucore_last_error()``) on any non-zero status. ``QUERY`` is the
same except that ``GPUCORE_ERR_NOT_READY`` is returned instead of raised. Any
other RESTYPE is a plain ctypes type returned as is.

The library is looked for, in order: ``$GPUCORE_LIBRARY``; ``libgpucore.so`` next to
this package; ``ctypes.util.find_library("gpucore")``; ``libgpucore.so.0`` on the
system's library path. A failure names every path tried.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from ctypes import (POINTER, c_char_p, c_double, c_float, c_int, c_int64, c_size_t, c_uint64,
                    c_void_p)
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from . import errors as _errors

__all__ = ["C", "lib", "library_path", "DECLARATIONS", "DeviceProperties", "STATUS", "QUERY",
           "LOG_FN", "DELETER_FN", "last_error", "status_string"]


class _StatusKind:
    """Marker restype for functions returning gpucore_status."""

    def __init__(self, name: str, allow_not_ready: bool) -> None:
        self.name = name
        self.allow_not_ready = allow_not_ready

    def __repr__(self) -> str:
        return self.name


STATUS = _StatusKind("STATUS", False)
QUERY = _StatusKind("QUERY", True)

H = c_void_p                 # every opaque handle (gpucore_context*, gpucore_tensor*, ...)
P_H = POINTER(c_void_p)      # gpucore_x **out
P_I64 = POINTER(c_int64)
P_INT = POINTER(c_int)
LOG_FN = ctypes.CFUNCTYPE(None, c_int, c_char_p, c_void_p)   # gpucore_log_fn
DELETER_FN = ctypes.CFUNCTYPE(None, c_void_p)                # tensor_wrap's deleter

GPUCORE_NAME_LEN = 256


class DeviceProperties(ctypes.Structure):
    """ctypes mirror of ``gpucore_device_properties`` (fields -1 where unknown)."""
    _fields_ = [
        ("struct_size", c_int64),
        ("name", ctypes.c_char * GPUCORE_NAME_LEN),
        ("type", ctypes.c_int32),
        ("index", ctypes.c_int32),
        ("compute_major", ctypes.c_int32),
        ("compute_minor", ctypes.c_int32),
        ("multiprocessors", ctypes.c_int32),
        ("warp_size", ctypes.c_int32),
        ("total_memory", c_int64),
        ("free_memory", c_int64),
        ("l2_cache_bytes", c_int64),
        ("shared_memory_per_block_optin", c_int64),
        ("clock_khz", ctypes.c_int32),
        ("memory_clock_khz", ctypes.c_int32),
        ("utilization_percent", ctypes.c_int32),
        ("temperature_c", ctypes.c_int32),
        ("has_native_code", ctypes.c_int32),
        ("has_ptx", ctypes.c_int32),
        ("pci_bus_id", ctypes.c_char * 32),
    ]


# ---------------------------------------------------------------------------
# THE table: one line per C function of include/gpucore.h.
# ---------------------------------------------------------------------------
DECLARATIONS: Dict[str, Tuple[Any, List[Any]]] = {
    # version
    "gpucore_version": (c_int, []),
    "gpucore_version_string": (c_char_p, []),
    # status codes and errors
    "gpucore_status_string": (c_char_p, [c_int]),
    "gpucore_last_error": (c_char_p, []),
    "gpucore_clear_error": (None, []),
    # logging
    "gpucore_get_log_level": (c_int, []),
    "gpucore_set_log_level": (STATUS, [c_int]),
    "gpucore_set_log_callback": (None, [LOG_FN, c_void_p]),
    # devices
    "gpucore_device_count": (STATUS, [c_int, P_INT]),
    "gpucore_backend_available": (c_int, [c_int, c_char_p, c_size_t]),  # non-zero is an answer, not an error
    "gpucore_device_get_properties": (STATUS, [c_int, c_int, POINTER(DeviceProperties)]),
    "gpucore_device_get_processes": (STATUS, [c_int, P_I64, P_I64, c_int, P_INT]),
    "gpucore_device_can_access_peer": (STATUS, [c_int, c_int, P_INT]),
    "gpucore_component_version": (c_int, [c_char_p, c_char_p, c_size_t]),  # NOT_SUPPORTED means absent
    # context
    "gpucore_context_create": (STATUS, [c_char_p, P_H]),
    "gpucore_context_destroy": (STATUS, [H]),
    "gpucore_context_device": (STATUS, [H, P_INT, P_INT]),
    "gpucore_context_device_name": (c_char_p, [H]),
    "gpucore_context_synchronize": (STATUS, [H]),
    # streams and events
    "gpucore_context_default_stream": (STATUS, [H, P_H]),
    "gpucore_context_current_stream": (STATUS, [H, P_H]),
    "gpucore_context_set_current_stream": (STATUS, [H, H]),
    "gpucore_stream_create": (STATUS, [H, c_int, P_H]),
    "gpucore_stream_destroy": (STATUS, [H]),
    "gpucore_stream_synchronize": (STATUS, [H]),
    "gpucore_stream_query": (QUERY, [H]),
    "gpucore_event_create": (STATUS, [H, P_H]),
    "gpucore_event_destroy": (STATUS, [H]),
    "gpucore_event_record": (STATUS, [H, H]),
    "gpucore_stream_wait_event": (STATUS, [H, H]),
    "gpucore_event_synchronize": (STATUS, [H]),
    "gpucore_event_query": (QUERY, [H]),
    "gpucore_event_elapsed_ms": (STATUS, [H, H, POINTER(c_float)]),
    # tensors
    "gpucore_dtype_size": (c_int64, [c_int]),
    "gpucore_dtype_name": (c_char_p, [c_int]),
    "gpucore_tensor_create": (STATUS, [H, c_int, c_int, P_I64, P_H]),
    "gpucore_tensor_wrap": (STATUS, [H, c_int, c_int, P_I64, P_I64, c_void_p, DELETER_FN, c_void_p, P_H]),
    "gpucore_tensor_destroy": (STATUS, [H]),
    "gpucore_tensor_ndim": (c_int, [H]),
    "gpucore_tensor_dtype": (c_int, [H]),
    "gpucore_tensor_shape": (STATUS, [H, P_I64]),
    "gpucore_tensor_strides": (STATUS, [H, P_I64]),
    "gpucore_tensor_numel": (c_int64, [H]),
    "gpucore_tensor_nbytes": (c_int64, [H]),
    "gpucore_tensor_is_contiguous": (c_int, [H]),
    "gpucore_tensor_data": (STATUS, [H, P_H]),
    "gpucore_tensor_context": (STATUS, [H, P_H]),
    "gpucore_tensor_slice": (STATUS, [H, c_int, c_int64, c_int64, c_int64, P_H]),
    "gpucore_tensor_reshape": (STATUS, [H, c_int, P_I64, P_H]),
    "gpucore_tensor_transpose": (STATUS, [H, c_int, c_int, P_H]),
    "gpucore_tensor_permute": (STATUS, [H, P_INT, P_H]),
    # copies
    "gpucore_copy_from_host": (STATUS, [H, c_void_p, c_int64]),
    "gpucore_copy_to_host": (STATUS, [c_void_p, c_int64, H]),
    "gpucore_copy_from_host_async": (STATUS, [H, c_void_p, c_int64, H]),
    "gpucore_copy_to_host_async": (STATUS, [c_void_p, c_int64, H, H]),
    "gpucore_copy": (STATUS, [H, H, H]),
    # fill and random
    "gpucore_fill": (STATUS, [H, c_double, H]),
    "gpucore_random": (STATUS, [H, c_int, c_double, c_double, c_uint64, c_uint64, H]),
    "gpucore_random_offset_advance": (c_uint64, [c_int64, c_int]),
}


# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------

def _candidates() -> List[Tuple[str, str]]:
    """(how, path) pairs in search order."""
    out: List[Tuple[str, str]] = []
    env = os.environ.get("GPUCORE_LIBRARY")
    if env:
        out.append(("$GPUCORE_LIBRARY", env))
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("libgpucore.so", "libgpucore.so.0", "libgpucore.dylib"):
        out.append(("next to the package", os.path.join(here, name)))
    found = ctypes.util.find_library("gpucore")
    if found:
        out.append(("ctypes.util.find_library('gpucore')", found))
    out.append(("the system library path", "libgpucore.so.0"))
    out.append(("the system library path", "libgpucore.so"))
    return out


def _load() -> Tuple[ctypes.CDLL, str]:
    tried: List[str] = []
    env = os.environ.get("GPUCORE_LIBRARY")
    for how, path in _candidates():
        if os.path.sep in path and not os.path.exists(path):
            tried.append("%s (%s): no such file" % (path, how))
            if how == "$GPUCORE_LIBRARY":
                # An explicit setting that points nowhere is an error, not a hint.
                break
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("%s (%s): %s" % (path, how, e))
            if how == "$GPUCORE_LIBRARY":
                break
    hint = ("set GPUCORE_LIBRARY to the path of libgpucore.so (e.g. build/src/libgpucore.so after "
            "'meson setup build && ninja -C build'), or install the library")
    if env:
        hint = "GPUCORE_LIBRARY is set to %r but that library cannot be loaded; fix or unset it" % env
    raise ImportError("gpucore: cannot load libgpucore; tried:\n  " + "\n  ".join(tried) + "\n" + hint)


lib, library_path = _load()

_raw_clear_error = lib.gpucore_clear_error
_raw_clear_error.restype = None
_raw_clear_error.argtypes = []
_raw_last_error = lib.gpucore_last_error
_raw_last_error.restype = c_char_p
_raw_last_error.argtypes = []
_raw_status_string = lib.gpucore_status_string
_raw_status_string.restype = c_char_p
_raw_status_string.argtypes = [c_int]


def last_error() -> str:
    """The library's message for the last failed call on this thread ("" if none)."""
    m = _raw_last_error()
    return m.decode("utf-8", "replace") if m else ""


def status_string(status: int) -> str:
    """The name of a status code, e.g. "GPUCORE_ERR_SHAPE_MISMATCH"."""
    m = _raw_status_string(int(status))
    return m.decode() if m else "GPUCORE_ERR_%d" % status


def raise_status(status: int, function: str) -> None:
    """Raise the exception for a non-zero status of `function`, with the library's message."""
    name = status_string(status)
    msg = last_error() or "%s failed with %s" % (function, name)
    raise _errors.error_for_status(status, msg, status_name=name, function=function)


class _Missing:
    """Stands in for a function the loaded library does not export (an older build)."""

    def __init__(self, name: str) -> None:
        self.__name__ = name

    def __call__(self, *args: Any) -> Any:
        raise _errors.NotSupportedError(
            "%s is not exported by the loaded library %s (it is older than this binding)"
            % (self.__name__, library_path), function=self.__name__)


def _wrap_status(name: str, fn: Any, allow_not_ready: bool) -> Callable[..., int]:
    clear = _raw_clear_error

    def call(*args: Any) -> int:
        clear()
        s = fn(*args)
        if s and not (allow_not_ready and s == _errors.ERR_NOT_READY):
            raise_status(s, name)
        return s

    call.__name__ = name
    call.__qualname__ = name
    call.__doc__ = "ctypes call of %s; raises GpucoreError subclasses on failure" % name
    return call


class _Namespace:
    """Attribute access to every declared function: ``C.gpucore_tensor_create(...)``."""

    def __init__(self) -> None:
        self.missing: List[str] = []

    def __repr__(self) -> str:
        return "<gpucore C functions from %s>" % library_path


C: Any = _Namespace()


def declare(name: str, restype: Any, argtypes: Sequence[Any]) -> None:
    """Declare one C function (used for the table; also usable by extensions)."""
    try:
        fn = getattr(lib, name)
    except AttributeError:
        C.missing.append(name)
        setattr(C, name, _Missing(name))
        return
    fn.argtypes = list(argtypes)
    if isinstance(restype, _StatusKind):
        fn.restype = c_int
        setattr(C, name, _wrap_status(name, fn, restype.allow_not_ready))
        setattr(C, "raw_" + name, fn)
    else:
        fn.restype = restype
        setattr(C, name, fn)
    DECLARATIONS.setdefault(name, (restype, list(argtypes)))


for _name, (_res, _args) in list(DECLARATIONS.items()):
    declare(_name, _res, _args)

