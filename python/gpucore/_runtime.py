"""Lifetime plumbing shared by contexts, tensors and the interop code.

* ``_Keep`` owns one C tensor handle (a view made for an export) and releases it
  when the last Python consumer of the exported memory drops it.
* ``register_owner``/``DELETER`` give C's ``gpucore_tensor_wrap`` a deleter: the
  deleter context is an integer key into ``_owners``; when the library calls the
  deleter, the Python owner (a numpy array, a DLPack manager, a ``_Keep``) is
  dropped. The ctypes callback object is module-global and deliberately leaked
  (an extra reference), so the function pointer C holds never dangles, not even
  during interpreter shutdown.
* After ``atexit`` has closed the contexts, ``shutting_down`` is set and no
  destructor calls into C any more.
"""
from __future__ import annotations

import ctypes
import itertools
import threading
from typing import Any, Dict, Optional

from ._lib import C, DELETER_FN

shutting_down = False

_owners: Dict[int, Any] = {}
_owner_keys = itertools.count(1)
_owners_lock = threading.Lock()


def register_owner(obj: Any) -> int:
    """Keep `obj` alive until the library calls DELETER with the returned key."""
    with _owners_lock:
        key = next(_owner_keys)
        _owners[key] = obj
    return key


def forget_owner(key: int) -> None:
    """Drop an owner whose wrap call failed (the library never saw it)."""
    with _owners_lock:
        _owners.pop(key, None)


def _deleter(key: Optional[int]) -> None:
    # Called by the library (inside gpucore_tensor_destroy or context destroy) when the
    # last view of wrapped memory is gone. Only drop the reference here; an owner's own
    # finaliser decides whether it may call back into C.
    try:
        with _owners_lock:
            obj = _owners.pop(key or 0, None)
        if obj is not None and hasattr(obj, "_on_release"):
            obj._on_release()
        del obj
    except Exception:  # never let an exception cross the C boundary
        pass


DELETER = DELETER_FN(_deleter)
ctypes.pythonapi.Py_IncRef(ctypes.py_object(DELETER))  # never freed: C may hold it until exit


def live_owner_count() -> int:
    """Number of wrapped-memory owners the library still holds (for tests)."""
    return len(_owners)


class _Keep:
    """Owns one C view handle that keeps a tensor's memory alive for a consumer."""

    __slots__ = ("handle", "ctx", "foreign", "counts_as_export", "__weakref__")

    def __init__(self, handle: int, ctx: Any, foreign: bool, counts_as_export: bool) -> None:
        self.handle = handle
        self.ctx = ctx
        self.foreign = foreign
        self.counts_as_export = counts_as_export
        if counts_as_export:
            ctx._export_acquired()

    def release(self) -> None:
        h, self.handle = self.handle, None
        ctx = self.ctx
        if h is None or ctx is None:
            return
        if shutting_down or ctx._c_destroying or ctx._handle is None:
            # The context is being (or was) destroyed; it frees the handle itself.
            if self.counts_as_export:
                ctx._export_released(call_c=False)
            return
        try:
            if self.foreign:
                # Wrapped memory goes back to its owner at once; wait for queued work first.
                C.raw_gpucore_context_synchronize(ctx._handle)
            C.raw_gpucore_tensor_destroy(h)
        finally:
            if self.counts_as_export:
                ctx._export_released(call_c=True)

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:
            pass
