"""Devices, backends, component versions and logging (no context needed)."""
from __future__ import annotations

import ctypes
import enum
from ctypes import byref, c_int, c_int64
from dataclasses import dataclass, fields
from typing import Any, Callable, Dict, List, Optional, Tuple

from ._lib import LOG_FN, C, DeviceProperties as _CProps
from ._validate import INT32_MAX, to_int
from .errors import InvalidArgumentError, InvalidArgumentTypeError, NotSupportedError

__all__ = ["DeviceType", "LogLevel", "DeviceProperties", "device_count", "backend_available", "backend_status",
           "device_properties", "devices", "device_processes", "can_access_peer", "component_version",
           "versions", "version", "version_string", "COMPONENTS", "get_log_level", "set_log_level",
           "set_log_callback"]


class DeviceType(enum.IntEnum):
    """``gpucore_device_type``."""
    CPU = 0
    CUDA = 1
    CUDA_EMULATED = 2   # test builds only


class LogLevel(enum.IntEnum):
    """``gpucore_log_level``."""
    OFF = 0
    ERROR = 1
    WARN = 2
    INFO = 3
    DEBUG = 4


COMPONENTS = ("cuda_driver", "cuda_runtime", "cublas", "cudnn", "nccl", "nvml", "openblas", "openmp",
              "mpi", "cuda_plugin", "build")


def _device_type(t: Any) -> int:
    if isinstance(t, str):
        try:
            return DeviceType[t.upper().replace("-", "_")].value
        except KeyError:
            raise InvalidArgumentError("unknown device type %r (cpu, cuda, cuda_emulated)" % t) from None
    return int(DeviceType(to_int(t, "device type", 0, 2)))


def version() -> int:
    """The loaded library's version as MAJOR*10000 + MINOR*100 + PATCH."""
    return C.gpucore_version()


def version_string() -> str:
    """The loaded library's version, e.g. "0.1.0"."""
    return C.gpucore_version_string().decode()


def device_count(device_type: Any = DeviceType.CUDA) -> int:
    """Number of devices of a type (0 when the backend is absent)."""
    n = c_int()
    C.gpucore_device_count(_device_type(device_type), byref(n))
    return n.value


def backend_status(device_type: Any = DeviceType.CUDA) -> Tuple[bool, str]:
    """(True, "") when the backend is usable here, else (False, the library's reason)."""
    buf = ctypes.create_string_buffer(1024)
    s = C.gpucore_backend_available(_device_type(device_type), buf, len(buf))
    return (s == 0, "" if s == 0 else buf.value.decode("utf-8", "replace"))


def backend_available(device_type: Any = DeviceType.CUDA) -> bool:
    """Whether the backend ("cpu", "cuda", a DeviceType) is usable here; :func:`backend_status`
    also says why not."""
    return backend_status(device_type)[0]


@dataclass(frozen=True)
class DeviceProperties:
    """Properties of one device (fields the backend cannot tell are -1)."""
    name: str
    type: DeviceType
    index: int
    compute_major: int
    compute_minor: int
    multiprocessors: int
    warp_size: int
    total_memory: int
    free_memory: int
    l2_cache_bytes: int
    shared_memory_per_block_optin: int
    clock_khz: int
    memory_clock_khz: int
    utilization_percent: int
    temperature_c: int
    has_native_code: bool
    has_ptx: bool
    pci_bus_id: str


def device_properties(device_type: Any = DeviceType.CUDA, index: int = 0) -> DeviceProperties:
    """Properties of device ``index`` of a type (InvalidArgumentError past the last one)."""
    t = _device_type(device_type)
    i = to_int(index, "index", 0, INT32_MAX)
    p = _CProps()
    p.struct_size = ctypes.sizeof(_CProps)
    C.gpucore_device_get_properties(t, i, byref(p))
    vals: Dict[str, Any] = {}
    for f in fields(DeviceProperties):
        v = getattr(p, f.name)
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        vals[f.name] = v
    vals["type"] = DeviceType(vals["type"])
    vals["has_native_code"] = bool(vals["has_native_code"] == 1)
    vals["has_ptx"] = bool(vals["has_ptx"] == 1)
    return DeviceProperties(**vals)


def devices() -> List[DeviceProperties]:
    """Every usable device: the CPU, then each CUDA device."""
    out = [device_properties(DeviceType.CPU, 0)]
    for i in range(device_count(DeviceType.CUDA)):
        out.append(device_properties(DeviceType.CUDA, i))
    return out


def device_processes(cuda_index: int = 0, max_processes: int = 256) -> List[Tuple[int, int]]:
    """(pid, used bytes) of processes holding memory on a CUDA device (NVML).

    Raises NotSupportedError where NVML or CUDA is absent.
    """
    i = to_int(cuda_index, "cuda_index", 0, INT32_MAX)
    m = to_int(max_processes, "max_processes", 0, 1 << 20)
    pids = (c_int64 * max(1, m))()
    used = (c_int64 * max(1, m))()
    n = c_int()
    C.gpucore_device_get_processes(i, pids, used, m, byref(n))
    return [(pids[k], used[k]) for k in range(min(n.value, m))]


def can_access_peer(cuda_a: int, cuda_b: int) -> bool:
    """Whether CUDA device a can access device b's memory directly."""
    a = to_int(cuda_a, "cuda_a", 0, INT32_MAX)
    b = to_int(cuda_b, "cuda_b", 0, INT32_MAX)
    can = c_int()
    C.gpucore_device_can_access_peer(a, b, byref(can))
    return bool(can.value)


def component_version(component: str) -> Optional[str]:
    """The version of a component found at run time, or None when absent.

    Names: see ``COMPONENTS`` ("cuda_driver", "cudnn", "openblas", "build", ...).
    """
    if not isinstance(component, str):
        raise InvalidArgumentTypeError("component must be a string, not %s" % type(component).__name__)
    if "\0" in component:
        raise InvalidArgumentError("component name contains a NUL character")
    buf = ctypes.create_string_buffer(1024)
    s = C.gpucore_component_version(component.encode(), buf, len(buf))
    if s != 0:
        return None
    return buf.value.decode("utf-8", "replace")


def versions() -> Dict[str, Optional[str]]:
    """Every component's version (None where absent), plus "gpucore"."""
    out: Dict[str, Optional[str]] = {"gpucore": version_string()}
    for c in COMPONENTS:
        out[c] = component_version(c)
    return out


# ---- logging ----
_log_callback: Optional[Any] = None   # the ctypes thunk must outlive its registration


def get_log_level() -> LogLevel:
    """The log level in force (initially from GPUCORE_LOG)."""
    return LogLevel(C.gpucore_get_log_level())


def set_log_level(level: Any) -> None:
    """Set the log level (a LogLevel, its name, or 0..4)."""
    if isinstance(level, str):
        try:
            level = LogLevel[level.upper()]
        except KeyError:
            raise InvalidArgumentError("unknown log level %r (off, error, warn, info, debug)" % level) from None
    C.gpucore_set_log_level(to_int(level, "level", -(1 << 31), INT32_MAX))


def set_log_callback(fn: Optional[Callable[[LogLevel, str], None]]) -> None:
    """Route library log lines to ``fn(level, message)`` (None restores stderr).

    The callback may run on library worker threads; it must not call gpucore.
    Exceptions it raises are swallowed.
    """
    global _log_callback
    if fn is None:
        C.gpucore_set_log_callback(LOG_FN(), None)
        _log_callback = None
        return
    if not callable(fn):
        raise InvalidArgumentTypeError("the log callback must be callable or None")

    def thunk(level: int, message: Optional[bytes], user: Any) -> None:
        try:
            lv = LogLevel(level) if 0 <= level <= 4 else level
            fn(lv, (message or b"").decode("utf-8", "replace"))
        except Exception:
            pass

    cb = LOG_FN(thunk)
    C.gpucore_set_log_callback(cb, None)
    old, _log_callback = _log_callback, cb
    if old is not None:
        # The library may be inside the old callback on another thread: keep it alive.
        _retired_callbacks.append(old)


_retired_callbacks: List[Any] = []
