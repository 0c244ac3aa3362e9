"""safetensors files and training checkpoints.

:func:`save_file` / :func:`load_file` read and write the safetensors format (the same
files Python's ``safetensors``, PyTorch and Hugging Face use); saving is atomic
(temporary file, fsync, rename). :class:`SafetensorsFile` opens a file lazily
(header validated first; tensors read on demand). :func:`save_checkpoint` /
:func:`load_checkpoint` add the optimizer's and loss scaler's state for resuming.
"""
from __future__ import annotations

import os
from ctypes import byref, c_char_p, c_int, c_int64, c_void_p
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

from . import dtypes as _dt
from ._lib import C
from .context import DeviceLike, get_context
from .errors import InvalidArgumentError, InvalidArgumentTypeError, InvalidHandleError, NullPointerError
from .optim import LossScaler, Optimizer
from .tensor import Tensor

__all__ = ["save_file", "load_file", "SafetensorsFile", "safe_open", "save_checkpoint", "load_checkpoint"]


def _path(path: Any) -> bytes:
    if path is None:
        raise NullPointerError("path is None")
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise InvalidArgumentTypeError("path must be a str or os.PathLike, not %s" % type(path).__name__)
    return os.fsencode(path)


def _named(tensors: Mapping[str, Tensor], what: str) -> Tuple[List[Tensor], Any, Any]:
    if not isinstance(tensors, Mapping):
        raise InvalidArgumentTypeError("%s must be a dict of name -> gpucore.Tensor, not %s"
                                       % (what, type(tensors).__name__))
    names, ts = [], []
    for k, v in tensors.items():
        if not isinstance(k, str):
            raise InvalidArgumentTypeError("%s: names must be strings, not %s" % (what, type(k).__name__))
        if not isinstance(v, Tensor):
            raise InvalidArgumentTypeError("%s[%r] must be a gpucore.Tensor, not %s" % (what, k, type(v).__name__))
        names.append(k.encode())
        ts.append(v)
    n = len(ts)
    return ts, (c_char_p * max(1, n))(*names), (c_void_p * max(1, n))(*[t.handle for t in ts])


def save_file(tensors: Mapping[str, Tensor], path: Any, metadata: Optional[Mapping[str, str]] = None) -> None:
    """Write ``{name: tensor}`` (any devices; their pending work is waited for) as a safetensors
    file, atomically. ``metadata``: string pairs for the header's "__metadata__"."""
    ts, names, handles = _named(tensors, "tensors")
    keys = vals = None
    m = 0
    if metadata:
        if not isinstance(metadata, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                          for k, v in metadata.items()):
            raise InvalidArgumentTypeError("metadata must be a dict of str -> str")
        m = len(metadata)
        keys = (c_char_p * m)(*[k.encode() for k in metadata])
        vals = (c_char_p * m)(*[v.encode() for v in metadata.values()])
    C.gpucore_safetensors_save(_path(path), names, handles, len(ts), keys, vals, m)


class _OpenedFile:
    """An opened file handle of the C library (safetensors, GGUF): ``handle`` refuses a closed file,
    ``close()`` is idempotent, ``with`` and garbage collection close it. Subclasses name the C open and
    close functions and the file kind."""

    _open_fn = ""
    _close_fn = ""
    _kind = ""

    def __init__(self, path: Any) -> None:
        self._h: Optional[int] = None
        h = c_void_p()
        getattr(C, self._open_fn)(_path(path), byref(h))
        self._h = h.value
        self.path = path

    @property
    def handle(self) -> int:
        if self._h is None:
            raise InvalidHandleError("the %s file was closed" % self._kind)
        return self._h

    def close(self) -> None:
        """Close the file (idempotent)."""
        h, self._h = self._h, None
        if h is not None:
            getattr(C, self._close_fn)(h)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class SafetensorsFile(_OpenedFile):
    """An opened, validated safetensors file: ``keys()``, ``info(name)`` -> (dtype, shape),
    ``metadata()``, ``get_tensor(name, device)``, ``read_into(name, tensor)``. Use with ``with``."""

    _open_fn, _close_fn, _kind = "gpucore_safetensors_open", "gpucore_safetensors_close", "safetensors"

    def keys(self) -> List[str]:
        """Tensor names in file order."""
        n = C.gpucore_safetensors_count(self.handle)
        return [C.gpucore_safetensors_name(self.handle, i).decode() for i in range(n)]

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return int(C.gpucore_safetensors_count(self.handle))

    def __contains__(self, name: str) -> bool:
        return name in self.keys()

    def info(self, name: str) -> Tuple[_dt.DType, Tuple[int, ...]]:
        """(dtype, shape) of tensor ``name``."""
        dt, nd = c_int(), c_int()
        shape = (c_int64 * 8)()
        C.gpucore_safetensors_info(self.handle, _name(name), byref(dt), byref(nd), shape)
        return _dt.from_value(dt.value), tuple(shape[i] for i in range(nd.value))

    def metadata(self, key: Optional[str] = None) -> Any:
        """The value of metadata ``key`` (None when absent)."""
        if key is None:
            raise InvalidArgumentError("metadata(key): give the key to look up")
        v = C.gpucore_safetensors_metadata(self.handle, _name(key))
        return None if v is None else v.decode()

    def get_tensor(self, name: str, device: DeviceLike = None) -> Tensor:
        """Tensor ``name`` read into a new tensor on ``device`` (default: the default context)."""
        ctx = get_context(device)
        h = c_void_p()
        C.gpucore_safetensors_load_tensor(self.handle, ctx.handle, _name(name), byref(h))
        return Tensor._adopt(ctx, h.value)

    def read_into(self, name: str, tensor: Tensor) -> Tensor:
        """Read tensor ``name`` into ``tensor`` (same dtype and shape). Returns it."""
        if not isinstance(tensor, Tensor):
            raise InvalidArgumentTypeError("tensor must be a gpucore.Tensor, not %s" % type(tensor).__name__)
        C.gpucore_safetensors_read(self.handle, _name(name), tensor.handle)
        return tensor


def _name(name: Any) -> bytes:
    if not isinstance(name, str):
        raise InvalidArgumentTypeError("a tensor name must be a string, not %s" % type(name).__name__)
    return name.encode()


def safe_open(path: Any) -> SafetensorsFile:
    """Open a safetensors file (header checked before anything is read)."""
    return SafetensorsFile(path)


def load_file(path: Any, device: DeviceLike = None) -> Dict[str, Tensor]:
    """Every tensor of a safetensors file as ``{name: tensor}`` on ``device``."""
    with SafetensorsFile(path) as f:
        return {k: f.get_tensor(k, device) for k in f.keys()}


def _objs(optimizer: Optional[Optimizer], scaler: Optional[LossScaler]) -> Tuple[Optional[int], Optional[int]]:
    if optimizer is not None and not isinstance(optimizer, Optimizer):
        raise InvalidArgumentTypeError("optimizer must be a gpucore optimizer or None")
    if scaler is not None and not isinstance(scaler, LossScaler):
        raise InvalidArgumentTypeError("scaler must be a gpucore.LossScaler or None")
    return (None if optimizer is None else optimizer.handle, None if scaler is None else scaler.handle)


def save_checkpoint(path: Any, tensors: Mapping[str, Tensor], optimizer: Optional[Optimizer] = None,
                    scaler: Optional[LossScaler] = None) -> None:
    """Save model tensors plus the optimizer state ("optimizer.<i>.<state>", step, lr) and the
    loss scaler's (scale, growth tracker) to one safetensors file, atomically."""
    ts, names, handles = _named(tensors, "tensors")
    o, s = _objs(optimizer, scaler)
    C.gpucore_checkpoint_save(_path(path), names, handles, len(ts), o, s)


def load_checkpoint(path: Any, tensors: Mapping[str, Tensor], optimizer: Optional[Optimizer] = None,
                    scaler: Optional[LossScaler] = None) -> None:
    """Read a :func:`save_checkpoint` file back into the given (already created) tensors,
    optimizer and scaler; the optimizer kind and parameter count must agree with the file."""
    ts, names, handles = _named(tensors, "tensors")
    o, s = _objs(optimizer, scaler)
    C.gpucore_checkpoint_load(_path(path), names, handles, len(ts), o, s)
