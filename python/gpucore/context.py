"""Contexts, streams and events.

A :class:`Context` is bound to one device ("cpu", "cuda", "cuda:N", "auto"). Every
tensor, stream and event belongs to one context. Ops are asynchronous on the
context's *current stream* (per thread); ``with stream:`` makes a stream current
for the block. Close a context with ``ctx.close()`` or ``with Context(...) as ctx``:
its tensors, streams and events become invalid (using them raises
:class:`~gpucore.InvalidHandleError`), while memory already handed to numpy or to
a DLPack consumer stays valid until that consumer lets go (the C context is then
destroyed).
"""
from __future__ import annotations

import atexit
import ctypes
import platform
import threading
import weakref
from ctypes import byref, c_float, c_int, c_uint64, c_void_p
from typing import Any, Dict, List, Optional, Sequence, Union

from . import _lib as _lib_module
from . import _runtime
from ._lib import C, fast_function, raise_status
from ._validate import INT32_MAX, INT32_MIN, to_int
from .errors import (DeviceMismatchError, InvalidArgumentTypeError, InvalidHandleError,
                     NullPointerError)

__all__ = ["Context", "Stream", "Event", "Timer", "get_context", "default_context", "DeviceLike"]

_all_contexts: "weakref.WeakSet[Context]" = weakref.WeakSet()
_cached: Dict[str, "Context"] = {}
_cache_lock = threading.RLock()
_fast_context_synchronize = fast_function("gpucore_context_synchronize")
#: ctypes reads memory with plain loads; on x86-64 every load has acquire order, which reading the
#: context's pending word asks for (elsewhere Context.synchronize always calls the library)
_LOADS_ACQUIRE = platform.machine().lower() in ("x86_64", "amd64")


class Context:
    """A libgpucore context bound to one device.

    Args:
        device: ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"auto"`` or ``None`` (the
            ``GPUCORE_DEVICE`` environment variable, default ``auto``: CUDA device 0
            when usable, else the CPU). Asking for ``cuda`` where it cannot run raises
            :class:`~gpucore.BackendUnavailableError` saying why.

    Every ``Context(...)`` is a new context with its own allocator and streams, also for a
    device that already has one (unlike ``torch.device("cpu")``, which names a device): tensors
    of one call must come from one context. Code that wants "the" CPU or GPU uses
    :func:`gpucore.default_context` (what factories use without ``device=``). Each context has
    an :attr:`id`, which error messages use to say which context a tensor belongs to.

    Use as a context manager to close it at the end of a block. Tensor factories:
    :meth:`empty`, :meth:`zeros`, :meth:`ones`, :meth:`full`, :meth:`tensor`,
    :meth:`from_numpy`, :meth:`rand`, :meth:`randn`.
    """

    def __init__(self, device: Optional[str] = None) -> None:
        if device is not None and not isinstance(device, str):
            raise InvalidArgumentTypeError("device must be a string such as 'cpu' or 'cuda:0', not %s"
                                           % type(device).__name__)
        self._handle: Optional[int] = None
        self._hp: Optional[c_void_p] = None
        self._closed = False
        self._c_destroying = False
        #: whether a dying tensor gives its handle back to C (the C context exists, is not being
        #: destroyed, and the interpreter is not shutting down): Tensor.__del__ reads this one flag
        self._frees = False
        #: handles of dropped small results (Tensor.__del__), given back to C in one call once there are
        #: a batch of them, and before anything that looks at or frees the context's memory
        self._release: List[c_void_p] = []
        self._release_lock = threading.Lock()
        self._exports = 0
        self._lock = threading.RLock()
        self._streams: "weakref.WeakSet[Stream]" = weakref.WeakSet()
        self._events: "weakref.WeakSet[Event]" = weakref.WeakSet()
        # Library objects bound to this context (optimizers, scalers, communicators, DDP
        # reducers, checkpoint executors): released before the C context is destroyed.
        self._others: "weakref.WeakSet[Any]" = weakref.WeakSet()
        h = c_void_p()
        C.gpucore_context_create(device.encode() if device is not None else None, byref(h))
        self._handle = h.value
        self._frees = True
        #: the C context's pending word (CPU backend, x86-64): 0 when a synchronize has nothing to do
        self._idle: Optional[c_uint64] = None
        if _LOADS_ACQUIRE:
            word = c_void_p()
            if C.raw_gpucore_context_pending_word(self._handle, byref(word)) == 0 and word.value:
                self._idle = c_uint64.from_address(word.value)
        #: the handle as a c_void_p for argtypes-free hot calls (gpucore._lib.fast_function); None once closed
        self._hp: Optional[c_void_p] = c_void_p(self._handle)
        t, i = c_int(), c_int()
        C.gpucore_context_device(self._handle, byref(t), byref(i))
        self.device_type: int = t.value
        self.device_index: int = i.value
        self.device: str = C.gpucore_context_device_name(self._handle).decode()
        #: The C library's id of this context (1, 2, ... in creation order), as error messages name it.
        self.id: int = C.gpucore_context_id(self._handle)
        self._default_stream = Stream._wrap_existing(self, self._default_stream_handle())
        _all_contexts.add(self)

    # ---- state ----
    @property
    def handle(self) -> int:
        """The raw ``gpucore_context*`` (raises if the context is closed)."""
        if self._closed or self._handle is None:
            raise InvalidHandleError("context %s was closed; create a new Context" % self.device)
        return self._handle

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    @property
    def is_cpu(self) -> bool:
        """Whether this context's memory is host memory (CPU backend)."""
        return self.device_type == 0

    def __repr__(self) -> str:
        return "gpucore.Context(%r, id=%d%s)" % (self.device, self.id, ", closed" if self._closed else "")

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def synchronize(self) -> None:
        """Wait for all work queued on every stream of this context."""
        hp = self._hp
        if hp is None:
            self.handle  # says the context was closed
        idle = self._idle
        if idle is not None and not idle.value:
            return  # nothing queued and no error to report: what the call would find, at the cost of a load
        st = _fast_context_synchronize(hp)
        if st:  # the library wrote the message (a failed call always does)
            raise_status(st, "gpucore_context_synchronize")

    def _release_pending(self, wait: bool = False) -> bool:
        """Give back the handles waiting in _release in one C call; True when there were some.
        Threads only append to the list, and only the lock holder takes from its front, so no
        handle is given back twice or lost. A flush in progress elsewhere is left to finish unless
        ``wait`` (close: the C context must not go while a batch is on its way)."""
        pending = self._release
        if not pending or not self._release_lock.acquire(wait):
            return False
        try:
            n = len(pending)
            if not n:
                return False
            handles = (c_void_p * n)(*pending[:n])
            del pending[:n]
            if self._frees:  # else the C context freed them with itself
                C.raw_gpucore_tensor_destroy_many(handles, n)
            return True
        finally:
            self._release_lock.release()

    def close(self) -> None:
        """Close the context: its tensors, streams and events become invalid.

        Memory exported to numpy arrays or DLPack consumers stays valid; the C
        context is destroyed when the last such consumer releases it (until then
        each tensor of the context gives its memory back when it is freed or
        collected). Closing twice is a no-op.
        """
        with self._lock:
            if self._closed:
                return
            self._release_pending(wait=True)
            self._closed = True
            self._hp = None
            self._idle = None
            with _cache_lock:
                for k in [k for k, v in _cached.items() if v is self]:
                    del _cached[k]
            if self._handle is None:
                return
            deferred = self._exports > 0
            for obj in sorted(list(self._others), key=lambda o: getattr(o, "_close_order", 0)):
                try:
                    obj._context_closing()
                except Exception:
                    pass
            # Events are not owned by the C context: destroy them while it is alive.
            for ev in list(self._events):
                ev._invalidate(destroy=True)
            for s in list(self._streams):
                s._invalidate(destroy=deferred)
            # Tensors see the closed context themselves (Tensor.handle); after a deferred close each
            # gives its memory back when it goes (Tensor.__del__), else the C context frees it now.
            if not deferred:
                self._destroy_c()

    def _destroy_c(self) -> None:
        h = self._handle
        if h is None:
            return
        self._c_destroying = True
        self._frees = False
        self._release.clear()  # the C context frees whatever was still waiting
        try:
            C.raw_gpucore_context_destroy(h)
        finally:
            self._handle = None

    def _export_acquired(self) -> None:
        with self._lock:
            self._exports += 1

    def _export_released(self, call_c: bool) -> None:
        with self._lock:
            self._exports -= 1
            if call_c and self._closed and self._exports == 0 and self._handle is not None \
                    and not self._c_destroying and not _runtime.shutting_down:
                self._destroy_c()

    def __del__(self) -> None:
        try:
            if not _runtime.shutting_down and not self._closed and self._handle is not None:
                self.close()
        except Exception:
            pass

    # ---- streams and events ----
    def _default_stream_handle(self) -> int:
        h = c_void_p()
        C.gpucore_context_default_stream(self.handle, byref(h))
        return h.value

    @property
    def default_stream(self) -> "Stream":
        """The context's default stream (owned by the context)."""
        self.handle
        return self._default_stream

    @property
    def current_stream(self) -> "Stream":
        """The stream ops use on this thread when given none (initially the default stream)."""
        h = c_void_p()
        C.gpucore_context_current_stream(self.handle, byref(h))
        if h.value == self._default_stream._handle:
            return self._default_stream
        for s in list(self._streams):
            if s._handle == h.value:
                return s
        return Stream._wrap_existing(self, h.value)

    @current_stream.setter
    def current_stream(self, stream: Optional["Stream"]) -> None:
        C.gpucore_context_set_current_stream(self.handle, self._stream_arg(stream))

    def stream(self, priority: int = 0) -> "Stream":
        """A new stream (``priority`` < 0 is higher priority, clamped to the device's range).

        Use ``with ctx.stream() as s:`` to make it current for a block.
        """
        return Stream(self, priority)

    def pool_stream(self, high_priority: bool = False) -> "Stream":
        """A stream from the context's pool (round-robin over 4 streams per priority level;
        owned by the context, never destroyed by Python). Cheaper than :meth:`stream` for
        short-lived work; two callers may get the same stream."""
        h = c_void_p()
        C.gpucore_context_pool_stream(self.handle, 1 if high_priority else 0, byref(h))
        for s in list(self._streams):
            if s._handle == h.value:
                return s
        return Stream._wrap_existing(self, h.value)

    def stream_priority_range(self) -> "tuple":
        """(least, greatest) stream priorities of this device: least is 0, greatest the most
        urgent (negative on CUDA; 0 on the CPU backend)."""
        lo, hi = c_int(), c_int()
        C.gpucore_stream_priority_range(self.handle, byref(lo), byref(hi))
        return lo.value, hi.value

    @property
    def allow_tf32(self) -> bool:
        """Whether f32 matmuls/convolutions may use TF32 tensor cores by default (CUDA only;
        the CPU always computes full f32). Settable."""
        v = c_int()
        C.gpucore_context_get_allow_tf32(self.handle, byref(v))
        return bool(v.value)

    @allow_tf32.setter
    def allow_tf32(self, allow: bool) -> None:
        if not isinstance(allow, (bool, int)):
            raise InvalidArgumentTypeError("allow_tf32 must be a bool, not %s" % type(allow).__name__)
        C.gpucore_context_set_allow_tf32(self.handle, 1 if allow else 0)

    def set_matmul_workspace_size(self, nbytes: int) -> None:
        """Scratch bytes a CUDA matmul may take per call (0 restores the default, 32 MiB)."""
        C.gpucore_matmul_set_workspace_size(self.handle, to_int(nbytes, "nbytes", 0))

    def event(self) -> "Event":
        """A new event of this context."""
        return Event(self)

    def timer(self, stream: Optional["Stream"] = None) -> "Timer":
        """Time device work: ``with ctx.timer() as t: ...`` then ``t.ms``."""
        return Timer(self, stream)

    def _stream_arg(self, stream: Optional["Stream"]) -> Optional[int]:
        """The raw stream handle for a call on this context (None: current stream)."""
        if stream is None:
            return None
        if not isinstance(stream, Stream):
            raise InvalidArgumentTypeError("stream must be a gpucore.Stream or None, not %s"
                                           % type(stream).__name__)
        if stream._ctx is not self:
            raise DeviceMismatchError("the stream belongs to context #%d (%s) but the call is on context #%d (%s); "
                                      "use a stream of the same context (Context() always makes a new context; "
                                      "gpucore.default_context() is the shared one)"
                                      % (stream._ctx.id, stream._ctx.device, self.id, self.device))
        return stream.handle

    # ---- tensor factories (see gpucore.tensor for the details) ----
    def empty(self, *size: Any, dtype: Any = None) -> Any:
        """An uninitialised contiguous tensor on this context (sizes as varargs or one sequence)."""
        from .tensor import empty
        return empty(*size, dtype=dtype, device=self)

    def zeros(self, *size: Any, dtype: Any = None) -> Any:
        """A tensor of zeros on this context (sizes as varargs or one sequence)."""
        from .tensor import zeros
        return zeros(*size, dtype=dtype, device=self)

    def ones(self, *size: Any, dtype: Any = None) -> Any:
        """A tensor of ones on this context (sizes as varargs or one sequence)."""
        from .tensor import ones
        return ones(*size, dtype=dtype, device=self)

    def full(self, shape: Any, value: float, dtype: Any = "float32") -> Any:
        """A tensor filled with ``value`` on this context."""
        from .tensor import full
        return full(shape, value, dtype, device=self)

    def tensor(self, data: Any, dtype: Any = None) -> Any:
        """A new tensor holding a copy of ``data`` (numpy array, list, scalar)."""
        from .tensor import tensor
        return tensor(data, dtype, device=self)

    def from_numpy(self, array: Any, dtype: Any = None) -> Any:
        """A tensor sharing ``array``'s memory (CPU contexts only; no copy)."""
        from .tensor import from_numpy
        return from_numpy(array, dtype, device=self)

    def rand(self, *size: Any, dtype: Any = None, seed: Optional[int] = None) -> Any:
        """Uniform [0, 1) random numbers (Philox; see Tensor.uniform_); sizes as varargs or one sequence."""
        from .tensor import rand
        return rand(*size, dtype=dtype, device=self, seed=seed)

    def randn(self, *size: Any, dtype: Any = None, seed: Optional[int] = None) -> Any:
        """Standard normal random numbers (Philox; see Tensor.normal_); sizes as varargs or one sequence."""
        from .tensor import randn
        return randn(*size, dtype=dtype, device=self, seed=seed)


DeviceLike = Union[Context, str, None]


def get_context(device: DeviceLike = None) -> Context:
    """The shared context for a device string (created on first use and kept).

    ``None`` gives the default context (``GPUCORE_DEVICE``, default ``auto``). A
    :class:`Context` is returned as is.
    """
    if isinstance(device, Context):
        if device.closed:
            raise InvalidHandleError("context %s was closed" % device.device)
        return device
    if device is not None and not isinstance(device, str):
        raise InvalidArgumentTypeError("device must be a gpucore.Context, a string such as 'cpu' or "
                                       "'cuda:0', or None, not %s" % type(device).__name__)
    key = device if device is not None else "<default>"
    with _cache_lock:
        ctx = _cached.get(key)
        if ctx is not None and not ctx.closed:
            return ctx
        if device == "cuda":
            alias = _cached.get("cuda:0")
            if alias is not None and not alias.closed:
                _cached[key] = alias
                return alias
    ctx = Context(device)
    with _cache_lock:
        existing = _cached.get(ctx.device)
        if existing is not None and not existing.closed:
            ctx.close()
            ctx = existing
        _cached.setdefault(ctx.device, ctx)
        _cached[key] = ctx
    return ctx


def default_context() -> Context:
    """The context used when no device is given (``GPUCORE_DEVICE``, default auto)."""
    return get_context(None)


class Stream:
    """A queue of asynchronous work on one context.

    ``with stream:`` makes it the context's current stream on this thread for the
    block (the previous one is restored after). Create with ``ctx.stream()``.
    """

    def __init__(self, ctx: Context, priority: int = 0) -> None:
        if not isinstance(ctx, Context):
            raise InvalidArgumentTypeError("ctx must be a gpucore.Context, not %s" % type(ctx).__name__)
        p = to_int(priority, "priority", INT32_MIN, INT32_MAX)
        self._ctx = ctx
        self._owned = False
        self._handle: Optional[int] = None
        self._tls = threading.local()
        self._keepalive: List[Any] = []
        h = c_void_p()
        C.gpucore_stream_create(ctx.handle, p, byref(h))
        self._handle = h.value
        self._owned = True
        ctx._streams.add(self)

    @classmethod
    def _wrap_existing(cls, ctx: Context, handle: int) -> "Stream":
        s = cls.__new__(cls)
        s._ctx = ctx
        s._owned = False
        s._handle = handle
        s._tls = threading.local()
        s._keepalive = []
        ctx._streams.add(s)
        return s

    @property
    def context(self) -> Context:
        return self._ctx

    @property
    def handle(self) -> int:
        """The raw ``gpucore_stream*`` (raises if destroyed)."""
        if self._handle is None:
            raise InvalidHandleError("the stream was destroyed (or its context closed)")
        self._ctx.handle
        return self._handle

    def __repr__(self) -> str:
        return "gpucore.Stream(%s%s%s)" % (self._ctx.device, ", default" if self._handle is not None
                                           and self._handle == self._ctx._default_stream._handle else "",
                                           ", destroyed" if self._handle is None else "")

    @property
    def native_handle(self) -> int:
        """The backend's stream object as an integer: a ``cudaStream_t`` on CUDA contexts (for
        your own CUDA calls, CuPy, DLPack), an opaque pointer on the CPU."""
        p = c_void_p()
        C.gpucore_stream_native_handle(self.handle, byref(p))
        return p.value or 0

    def synchronize(self) -> None:
        """Block until all work queued on this stream is done (raises the first async error)."""
        C.gpucore_stream_synchronize(self.handle)
        self._keepalive.clear()

    def query(self) -> bool:
        """True when all queued work is done, False while some is pending."""
        done = C.gpucore_stream_query(self.handle) == 0
        if done:
            self._keepalive.clear()
        return done

    def wait_event(self, event: "Event") -> None:
        """Make this stream wait (without blocking the host) for ``event``'s recorded point."""
        if not isinstance(event, Event):
            raise InvalidArgumentTypeError("event must be a gpucore.Event, not %s" % type(event).__name__)
        C.gpucore_stream_wait_event(self.handle, event.handle)

    def wait_stream(self, other: "Stream") -> None:
        """Make this stream wait for the work queued so far on ``other``."""
        ev = Event(self._ctx)
        ev.record(other)
        self.wait_event(ev)

    def record_event(self, event: Optional["Event"] = None) -> "Event":
        """Record (a new or the given) event on this stream and return it."""
        ev = event if event is not None else Event(self._ctx)
        ev.record(self)
        return ev

    def _keep(self, obj: Any) -> None:
        """Hold ``obj`` (a host buffer of an async copy) until the stream is synchronised."""
        self._keepalive.append(obj)

    def __enter__(self) -> "Stream":
        prev = c_void_p()
        C.gpucore_context_current_stream(self._ctx.handle, byref(prev))
        stack = getattr(self._tls, "stack", None)
        if stack is None:
            stack = self._tls.stack = []
        stack.append(prev.value)
        C.gpucore_context_set_current_stream(self._ctx.handle, self.handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        prev = self._tls.stack.pop()
        if self._ctx.closed:
            return
        try:
            C.gpucore_context_set_current_stream(self._ctx.handle, prev)
        except InvalidHandleError:  # the previous stream was destroyed meanwhile
            C.gpucore_context_set_current_stream(self._ctx.handle, None)

    def destroy(self) -> None:
        """Wait for the stream's work, then destroy it (the default stream cannot be destroyed)."""
        if self._handle is None:
            return
        if not self._owned:
            self.handle  # raises if the context is closed
            return
        h, self._handle = self._handle, None
        C.gpucore_stream_destroy(h)
        self._keepalive.clear()

    def _invalidate(self, destroy: bool) -> None:
        h, self._handle = self._handle, None
        if destroy and self._owned and h is not None:
            C.raw_gpucore_stream_destroy(h)

    def __del__(self) -> None:
        try:
            if (self._owned and self._handle is not None and not _runtime.shutting_down
                    and not self._ctx._closed):
                C.raw_gpucore_stream_destroy(self._handle)
                self._handle = None
        except Exception:
            pass


class Event:
    """A point in a stream that the host or other streams can wait for, and time.

    ``e.record(stream)`` marks the point; ``e.synchronize()`` / ``e.query()`` wait or
    poll; ``start.elapsed_time(end)`` gives milliseconds between two recorded events.
    """

    def __init__(self, ctx: Context) -> None:
        if not isinstance(ctx, Context):
            raise InvalidArgumentTypeError("ctx must be a gpucore.Context, not %s" % type(ctx).__name__)
        self._ctx = ctx
        self._handle: Optional[int] = None
        h = c_void_p()
        C.gpucore_event_create(ctx.handle, byref(h))
        self._handle = h.value
        ctx._events.add(self)

    @property
    def handle(self) -> int:
        """The raw ``gpucore_event*`` (raises if destroyed)."""
        if self._handle is None:
            raise InvalidHandleError("the event was destroyed (or its context closed)")
        self._ctx.handle
        return self._handle

    def __repr__(self) -> str:
        return "gpucore.Event(%s%s)" % (self._ctx.device, ", destroyed" if self._handle is None else "")

    def record(self, stream: Optional[Stream] = None) -> "Event":
        """Mark the current end of ``stream`` (None: the current stream). Returns self."""
        C.gpucore_event_record(self.handle, self._ctx._stream_arg(stream))
        return self

    def synchronize(self) -> None:
        """Block until the recorded point is passed."""
        C.gpucore_event_synchronize(self.handle)

    def query(self) -> bool:
        """True once the recorded point is passed."""
        return C.gpucore_event_query(self.handle) == 0

    def wait(self, stream: Optional[Stream] = None) -> None:
        """Make ``stream`` (None: the current stream) wait for this event."""
        s = stream if stream is not None else self._ctx.current_stream
        s.wait_event(self)

    def elapsed_time(self, end: "Event") -> float:
        """Milliseconds from this event to ``end`` (both recorded and completed)."""
        if not isinstance(end, Event):
            raise InvalidArgumentTypeError("end must be a gpucore.Event, not %s" % type(end).__name__)
        ms = c_float()
        C.gpucore_event_elapsed_ms(self.handle, end.handle, byref(ms))
        return float(ms.value)

    def destroy(self) -> None:
        """Destroy the event now (also done when it is garbage-collected)."""
        if self._handle is not None:
            self._ctx.handle
            h, self._handle = self._handle, None
            C.gpucore_event_destroy(h)

    def _invalidate(self, destroy: bool) -> None:
        h, self._handle = self._handle, None
        if destroy and h is not None:
            C.raw_gpucore_event_destroy(h)

    def __del__(self) -> None:
        try:
            if self._handle is not None and not _runtime.shutting_down and not self._ctx._closed:
                C.raw_gpucore_event_destroy(self._handle)
                self._handle = None
        except Exception:
            pass


class Timer:
    """``with ctx.timer() as t: ...`` records events around the block; ``t.ms`` is the time."""

    def __init__(self, ctx: Context, stream: Optional[Stream] = None) -> None:
        self._ctx = ctx
        self._stream = stream
        self.start = Event(ctx)
        self.end = Event(ctx)
        self.ms: Optional[float] = None

    def __enter__(self) -> "Timer":
        self.start.record(self._stream)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.end.record(self._stream)
        self.end.synchronize()
        self.ms = self.start.elapsed_time(self.end)


def _release_all_pending() -> bool:
    """Every open context gives back its dropped small results now (before a call that failed for
    memory is tried again); True when some were given back."""
    released = False
    for ctx in list(_all_contexts):
        if ctx._release and not ctx._closed:
            released = ctx._release_pending(wait=True) or released
    return released


_lib_module.release_pending = _release_all_pending


def _close_all_at_exit() -> None:
    for ctx in list(_all_contexts):
        try:
            ctx.close()
        except Exception:
            pass
    _runtime.shutting_down = True
    for ctx in list(_all_contexts):
        ctx._frees = False


atexit.register(_close_all_at_exit)
