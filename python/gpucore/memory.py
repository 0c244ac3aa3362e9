"""The caching allocator (statistics, snapshot, cache, limits), raw device and pinned
host buffers, and the per-op profiler.

Every tensor of a context comes from its caching allocator; pinned host memory from
its pinned pool (``kind="pinned"``). Functions take ``device``: a Context, a device
string ("cpu", "cuda:0") or None for the default context. Names follow
``torch.cuda``: :func:`memory_stats`, :func:`memory_allocated`,
:func:`max_memory_allocated`, :func:`reset_peak_memory_stats`, :func:`empty_cache`,
:func:`memory_snapshot`, :func:`set_per_process_memory_fraction`.
"""
from __future__ import annotations

import ctypes
import json
from ctypes import byref, c_int, c_int64, c_void_p
from typing import Any, Dict, List, Optional, Union

import numpy as np

from ._lib import C, MemoryStats, ProfileEntry
from ._validate import to_float, to_int
from .context import Context, DeviceLike, Stream, get_context
from .errors import GpucoreError, InvalidArgumentError, InvalidArgumentTypeError, InvalidHandleError

__all__ = ["memory_stats", "memory_allocated", "max_memory_allocated", "memory_reserved",
           "max_memory_reserved", "reset_peak_memory_stats", "memory_snapshot", "empty_cache",
           "set_memory_limit", "set_per_process_memory_fraction", "set_caching", "configure_memory",
           "memory_conf", "validate_alloc_conf", "debug_fail_raw_alloc", "debug_fail_async", "DeviceBuffer",
           "PinnedBuffer", "device_alloc", "pin_memory", "Profiler", "profiler"]

_KINDS = {"device": 0, "pinned": 1, "pinned_host": 1, "host": 1}


def _kind(kind: str) -> int:
    if kind not in _KINDS:
        raise InvalidArgumentError("kind must be 'device' or 'pinned', not %r" % (kind,))
    return _KINDS[kind]


def _settled_context(device: DeviceLike) -> Any:
    """The context, its dropped small results given back first (they count as freed)."""
    ctx = get_context(device)
    ctx._release_pending(wait=True)
    return ctx


def memory_stats(device: DeviceLike = None, kind: str = "device") -> Dict[str, int]:
    """Allocator statistics as a dict: allocated/reserved/active/inactive_split/requested
    bytes and blocks (each with a ``_peak``), num_raw_allocs, num_raw_frees, num_ooms,
    num_alloc_retries, limit_bytes. ``kind``: "device" or "pinned" (the pinned host pool)."""
    ctx = _settled_context(device)
    s = MemoryStats()
    s.struct_size = ctypes.sizeof(MemoryStats)
    C.gpucore_memory_get_stats(ctx.handle, _kind(kind), byref(s))
    return {n: getattr(s, n) for n, _ in MemoryStats._fields_ if n != "struct_size"}


def memory_allocated(device: DeviceLike = None) -> int:
    """Bytes of device memory handed out now (rounded sizes)."""
    return memory_stats(device)["allocated_bytes"]


def max_memory_allocated(device: DeviceLike = None) -> int:
    """Peak of :func:`memory_allocated` since creation or :func:`reset_peak_memory_stats`."""
    return memory_stats(device)["allocated_bytes_peak"]


def memory_reserved(device: DeviceLike = None) -> int:
    """Bytes held from the backend (allocated + cached)."""
    return memory_stats(device)["reserved_bytes"]


def max_memory_reserved(device: DeviceLike = None) -> int:
    """Peak of :func:`memory_reserved`."""
    return memory_stats(device)["reserved_bytes_peak"]


def reset_peak_memory_stats(device: DeviceLike = None, kind: str = "device") -> None:
    """Set every ``*_peak`` statistic to its current value."""
    ctx = _settled_context(device)
    C.gpucore_memory_reset_peak_stats(ctx.handle, _kind(kind))


def memory_snapshot(device: DeviceLike = None, kind: str = "device", format: str = "json") -> Any:
    """Every segment and block of the allocator. ``format="json"`` returns the parsed dict
    ({"kind", "device", "stats", "categories" (allocated bytes by category: "weights", "gradients",
    "optimizer", "activations", "transient", "head_loss", "workspace", "other"), "segments": [{"address",
    "size", "pool", "stream", "blocks": [{"address", "size", "requested", "state", "stream", "category"
    (allocated blocks)}]}]}); "text" a string."""
    if format not in ("json", "text"):
        raise InvalidArgumentError("format must be 'json' or 'text', not %r" % (format,))
    ctx = _settled_context(device)
    fmt = 1 if format == "json" else 0
    k = _kind(kind)
    needed = c_int64()
    C.gpucore_memory_snapshot(ctx.handle, k, fmt, None, 0, byref(needed))
    for _ in range(8):
        n = needed.value + 4096
        buf = ctypes.create_string_buffer(n)
        st = C.raw_gpucore_memory_snapshot(ctx.handle, k, fmt, buf, n, byref(needed))
        if st == 0:
            text = buf.value.decode("utf-8", "replace")
            return json.loads(text) if fmt == 1 else text
        if needed.value < n:  # a real error, not a short buffer
            C.gpucore_memory_snapshot(ctx.handle, k, fmt, buf, n, byref(needed))
    C.gpucore_memory_snapshot(ctx.handle, k, fmt, None, 0, byref(needed))
    raise InvalidArgumentError("memory_snapshot: the listing kept growing")


def empty_cache(device: DeviceLike = None, kind: str = "device") -> None:
    """Return cached memory nobody uses to the backend (memory in use stays)."""
    ctx = _settled_context(device)
    C.gpucore_memory_empty_cache(ctx.handle, _kind(kind))


def set_memory_limit(limit: Union[int, float, str, None], device: DeviceLike = None) -> None:
    """Most device memory the context may reserve: an int of bytes, a float fraction (0, 1] of
    the device's total, a string as in GPUCORE_ALLOC_CONF ("8GiB", "80%"), or None/0 for no limit.
    Requests past it fail with OutOfMemoryError after the cache is released."""
    ctx = get_context(device)
    if limit is None:
        C.gpucore_memory_set_limit(ctx.handle, 0)
    elif isinstance(limit, str):
        C.gpucore_memory_configure(ctx.handle, ("limit:" + limit).encode())
    elif isinstance(limit, float):
        C.gpucore_memory_set_limit_fraction(ctx.handle, to_float(limit, "limit"))
    else:
        C.gpucore_memory_set_limit(ctx.handle, to_int(limit, "limit", 0))


def set_per_process_memory_fraction(fraction: float, device: DeviceLike = None) -> None:
    """Limit the context to ``fraction`` (0 < f <= 1) of the device's memory; 0 removes it."""
    C.gpucore_memory_set_limit_fraction(get_context(device).handle, to_float(fraction, "fraction"))


def set_caching(enabled: bool, device: DeviceLike = None, kind: str = "device") -> None:
    """Turn the allocator's caching on or off (off: every free goes back to the backend, which
    memory checkers like; turning it off empties the cache)."""
    C.gpucore_memory_set_caching(get_context(device).handle, _kind(kind), 1 if enabled else 0)


def configure_memory(conf: str, device: DeviceLike = None) -> None:
    """Apply settings written as GPUCORE_ALLOC_CONF is, e.g. "max_split_size_mb:128,limit:0.8"
    (keys: max_split_size_mb, caching, pinned_caching, limit). Malformed text changes nothing."""
    if not isinstance(conf, str):
        raise InvalidArgumentTypeError("conf must be a string, not %s" % type(conf).__name__)
    C.gpucore_memory_configure(get_context(device).handle, conf.encode())


def memory_conf(device: DeviceLike = None) -> str:
    """The allocator settings in force, in GPUCORE_ALLOC_CONF syntax."""
    buf = ctypes.create_string_buffer(1024)
    C.gpucore_memory_get_conf(get_context(device).handle, buf, len(buf))
    return buf.value.decode()


def validate_alloc_conf(conf: str) -> None:
    """Raise InvalidArgumentError (the library's message) unless ``conf`` is valid
    GPUCORE_ALLOC_CONF text."""
    if not isinstance(conf, str):
        raise InvalidArgumentTypeError("conf must be a string, not %s" % type(conf).__name__)
    C.gpucore_alloc_conf_validate(conf.encode())


def debug_fail_raw_alloc(nth: int, count: int = 1, device: DeviceLike = None) -> None:
    """TESTING ONLY: raw allocations nth .. nth+count-1 from now fail as if out of memory
    (count < 0: all from nth on; nth 0 disarms)."""
    C.gpucore_debug_fail_raw_alloc(get_context(device).handle, to_int(nth, "nth", 0), to_int(count, "count"))


def debug_fail_async(error: Union[int, type], stream: Optional[Stream] = None, device: DeviceLike = None) -> None:
    """TESTING ONLY: queue on ``stream`` (default: the current stream of ``device``'s context) a
    task that fails when it runs, as a faulting kernel would; the next synchronize of that stream
    or its context raises it, once. ``error``: a status code or a GpucoreError subclass
    (e.g. ``gpucore.BackendError``). NotSupportedError on CUDA, where a fault ends the context."""
    if isinstance(error, type) and issubclass(error, GpucoreError):
        code = error.status_code
    else:
        code = to_int(error, "error")
    if stream is None:
        stream = get_context(device).current_stream
    elif not isinstance(stream, Stream):
        raise InvalidArgumentTypeError("stream must be a gpucore.Stream or None, not %s" % type(stream).__name__)
    C.gpucore_debug_fail_async(stream.handle, code)


class _RawBuffer:
    """Base of device/pinned buffers taken straight from a context's allocator."""

    _alloc = ""
    _free = ""
    _record = ""

    def __init__(self, nbytes: int, device: DeviceLike = None, stream: Optional[Stream] = None) -> None:
        self._ctx: Context = get_context(device)
        self._ptr: Optional[int] = None
        self.nbytes = to_int(nbytes, "nbytes", 0)
        p = c_void_p()
        getattr(C, self._alloc)(self._ctx.handle, self.nbytes, self._ctx._stream_arg(stream), byref(p))
        self._ptr = p.value or 0
        self._ctx._others.add(self)

    @property
    def ptr(self) -> int:
        """The address (0 for a 0-byte buffer); raises after free()."""
        if self._ptr is None:
            raise InvalidHandleError("the buffer was freed")
        return self._ptr

    def record_stream(self, stream: Stream) -> None:
        """Declare use on another stream: the memory is not reused before it passes that point."""
        if not isinstance(stream, Stream):
            raise InvalidArgumentTypeError("stream must be a gpucore.Stream, not %s" % type(stream).__name__)
        getattr(C, self._record)(self._ctx.handle, self.ptr or None, self._ctx._stream_arg(stream))

    def free(self) -> None:
        """Give the memory back to the allocator (idempotent)."""
        p, self._ptr = self._ptr, None
        if p and not self._ctx.closed:
            getattr(C, self._free)(self._ctx.handle, p)

    def _context_closing(self) -> None:
        try:
            self.free()
        except Exception:
            self._ptr = None

    def __enter__(self) -> "_RawBuffer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.free()

    def __del__(self) -> None:
        try:
            if self._ptr and not self._ctx.closed:
                self.free()
        except Exception:
            pass


class DeviceBuffer(_RawBuffer):
    """``nbytes`` of device memory (host memory on the CPU backend) from the caching allocator,
    for workspaces of your own kernels; tied to ``stream``. ``with`` frees it at the end."""
    _alloc, _free, _record = "gpucore_device_alloc", "gpucore_device_free", "gpucore_device_record_stream"


class PinnedBuffer(_RawBuffer):
    """``nbytes`` of pinned (page-locked) host memory from the context's pool, for fast
    asynchronous copies. :meth:`numpy` views it as an array (valid until :meth:`free`)."""
    _alloc, _free, _record = "gpucore_host_alloc", "gpucore_host_free", "gpucore_host_record_stream"

    def numpy(self, dtype: Any = np.uint8, shape: Any = None) -> np.ndarray:
        """A numpy array over the buffer (no copy); don't use it after free()."""
        dt = np.dtype(dtype)
        n = self.nbytes // dt.itemsize
        if n == 0:
            return np.empty(0 if shape is None else shape, dt)
        arr = np.ctypeslib.as_array((ctypes.c_uint8 * (n * dt.itemsize)).from_address(self.ptr)).view(dt)
        return arr if shape is None else arr.reshape(shape)


def device_alloc(nbytes: int, device: DeviceLike = None, stream: Optional[Stream] = None) -> DeviceBuffer:
    """A :class:`DeviceBuffer` of ``nbytes``."""
    return DeviceBuffer(nbytes, device, stream)


def pin_memory(nbytes: int, device: DeviceLike = None, stream: Optional[Stream] = None) -> PinnedBuffer:
    """A :class:`PinnedBuffer` of ``nbytes`` from the context's pinned host pool."""
    return PinnedBuffer(nbytes, device, stream)


# ---------------------------------------------------------------- profiler

class Profiler:
    """The per-op profiler of a context: calls, device time and bytes per op name.

    ``with gpucore.profiler(ctx) as p: ...`` records the block (it resets first unless
    ``reset=False``); then ``p.entries()`` (list of dicts, largest total time first) or
    ``p.summary()`` (a table; ``json=True`` for the parsed JSON). Recording adds only event
    records per op, no host synchronisation."""

    def __init__(self, device: DeviceLike = None, reset: bool = True) -> None:
        self._ctx = get_context(device)
        self._reset = reset

    @property
    def enabled(self) -> bool:
        """Whether the context records ops now."""
        return C.gpucore_profiler_enabled(self._ctx.handle) == 1

    def enable(self, on: bool = True) -> None:
        """Start (or with False stop) recording; what was recorded stays."""
        C.gpucore_profiler_enable(self._ctx.handle, 1 if on else 0)

    def disable(self) -> None:
        """Stop recording."""
        self.enable(False)

    def reset(self) -> None:
        """Forget every record."""
        C.gpucore_profiler_reset(self._ctx.handle)

    def entries(self) -> List[Dict[str, Any]]:
        """Per op name: name, calls, bytes, total_ms, min_ms, max_ms, timed_calls (waits for the
        recorded ops to finish)."""
        n = c_int()
        C.gpucore_profiler_entries(self._ctx.handle, None, 0, byref(n))
        cap = n.value + 16
        arr = (ProfileEntry * cap)()
        for e in arr:
            e.struct_size = ctypes.sizeof(ProfileEntry)
        C.gpucore_profiler_entries(self._ctx.handle, arr, cap, byref(n))
        out = []
        for e in arr[:min(n.value, cap)]:
            d = {f: getattr(e, f) for f, _ in ProfileEntry._fields_ if f != "struct_size"}
            d["name"] = e.name.decode()
            out.append(d)
        return out

    def summary(self, json: bool = False) -> Any:  # noqa: A002
        """The totals as a text table, or (json=True) the parsed JSON object."""
        needed = c_int64()
        C.gpucore_profiler_summary(self._ctx.handle, 1 if json else 0, None, 0, byref(needed))
        n = needed.value + 4096
        buf = ctypes.create_string_buffer(n)
        C.gpucore_profiler_summary(self._ctx.handle, 1 if json else 0, buf, n, byref(needed))
        text = buf.value.decode("utf-8", "replace")
        return _json_loads(text) if json else text

    def __enter__(self) -> "Profiler":
        if self._reset:
            self.reset()
        self.enable(True)
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self._ctx.closed:
            self.enable(False)


def _json_loads(text: str) -> Any:
    return json.loads(text)


def profiler(device: DeviceLike = None, reset: bool = True) -> Profiler:
    """A :class:`Profiler` for the context (use as ``with gpucore.profiler(ctx) as p:``)."""
    return Profiler(device, reset)
