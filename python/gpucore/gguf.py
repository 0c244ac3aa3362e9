"""GGUF files (llama.cpp's and Ollama's model format): metadata, tensor infos, tensors.

    with gpucore.gguf.open_gguf("model.gguf") as f:
        f["llama.block_count"]            # 30 (ints, floats, bools, str; arrays as lists / numpy)
        f.tensors()[0]                    # GGUFTensorInfo(name='token_embd.weight', type='Q8_0', ...)
        w = f.get_tensor("blk.0.attn_q.weight", dtype="float32")   # decoded, row-major

The header is checked whole by the C library when the file opens (gpucore.h, "GGUF"); tensor
data is read on demand. ``dims`` are the file's (dims[0] varies fastest), ``shape`` the
row-major shape of the tensor ``get_tensor`` makes (dims reversed).
"""
from __future__ import annotations

import ctypes
from ctypes import byref, c_char_p, c_int, c_int64, c_void_p
from typing import Any, Dict, Iterator, List, NamedTuple, Tuple

import numpy as np

from . import dtypes as _dt
from ._lib import C
from .context import DeviceLike, get_context
from .errors import InvalidArgumentTypeError
from .serialization import _OpenedFile, _name
from .tensor import Tensor

__all__ = ["GGUFFile", "GGUFTensorInfo", "open_gguf", "VALUE_TYPES"]

VALUE_TYPES = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool", "string", "array",
               "uint64", "int64", "float64")
_NUMPY = {0: np.uint8, 1: np.int8, 2: np.uint16, 3: np.int16, 4: np.uint32, 5: np.int32, 6: np.float32,
          7: np.bool_, 10: np.uint64, 11: np.int64, 12: np.float64}


class GGUFTensorInfo(NamedTuple):
    name: str
    type: str                  # ggml type name: "F32", "Q4_1", ...
    type_id: int
    dims: Tuple[int, ...]      # as in the file: dims[0] fastest
    shape: Tuple[int, ...]     # row-major (dims reversed)
    offset: int                # bytes into the data section
    nbytes: int


def _text(p: Any, n: int) -> str:
    """n bytes at p as str (UTF-8; bytes that are not UTF-8 kept as surrogate escapes)."""
    raw = ctypes.string_at(p, n)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("utf-8", "surrogateescape")


class GGUFFile(_OpenedFile):
    """An opened, validated GGUF file. ``keys()``, ``f[key]``, ``metadata()``, ``value_type(key)``,
    ``tensors()``, ``tensor_info(name)``, ``get_tensor(name, dtype, device)``, ``read_into``. Use with ``with``."""

    _open_fn, _close_fn, _kind = "gpucore_gguf_open", "gpucore_gguf_close", "GGUF"

    def __init__(self, path: Any) -> None:
        super().__init__(path)
        v, a, d = c_int64(), c_int64(), c_int64()
        C.gpucore_gguf_file_info(self._h, byref(v), byref(a), byref(d))
        self.version, self.alignment, self.data_offset = v.value, a.value, d.value

    # ---- metadata ----
    def keys(self) -> List[str]:
        """Metadata keys in file order."""
        out = []
        key = c_char_p()
        for i in range(C.gpucore_gguf_kv_count(self.handle)):
            C.gpucore_gguf_kv_info(self.handle, i, byref(key), None, None, None)
            out.append(key.value.decode("utf-8", "surrogateescape"))
        return out

    def __contains__(self, key: str) -> bool:
        return C.gpucore_gguf_kv_find(self.handle, _name(key)) >= 0

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def _index(self, key: str) -> int:
        i = C.gpucore_gguf_kv_find(self.handle, _name(key))
        if i < 0:
            raise KeyError("the GGUF file has no metadata key %r" % key)
        return int(i)

    def value_type(self, key: str) -> Tuple[str, str, int]:
        """(value type, element type, count): ("array", "string", 49152), ("uint32", "uint32", 1)."""
        t, et, n = c_int(), c_int(), c_int64()
        C.gpucore_gguf_kv_info(self.handle, self._index(key), None, byref(t), byref(et), byref(n))
        return VALUE_TYPES[t.value], VALUE_TYPES[et.value], n.value

    def __getitem__(self, key: str) -> Any:
        """A scalar as int / float / bool / str; an array of numbers as a numpy array, of strings as a list."""
        i = self._index(key)
        t, et, n = c_int(), c_int(), c_int64()
        C.gpucore_gguf_kv_info(self.handle, i, None, byref(t), byref(et), byref(n))
        if et.value == 8:
            s, ln = c_void_p(), c_int64()
            vals = []
            for j in range(n.value):
                C.gpucore_gguf_kv_string(self.handle, i, j, byref(s), byref(ln))
                vals.append(_text(s.value, ln.value) if ln.value else "")
            return vals[0] if t.value != 9 else vals
        data, nb = c_void_p(), c_int64()
        C.gpucore_gguf_kv_data(self.handle, i, byref(data), byref(nb))
        arr = np.frombuffer(ctypes.string_at(data.value, nb.value) if nb.value else b"", dtype=_NUMPY[et.value])
        return arr.copy() if t.value == 9 else arr[0].item()

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default

    def metadata(self) -> Dict[str, Any]:
        """Every key/value, in file order."""
        return {k: self[k] for k in self.keys()}

    # ---- tensors ----
    def _info(self, i: int) -> GGUFTensorInfo:
        name, t, nd = c_char_p(), c_int(), c_int()
        dims = (c_int64 * 4)()
        off, nb = c_int64(), c_int64()
        C.gpucore_gguf_tensor_info(self.handle, i, byref(name), byref(t), byref(nd), dims, byref(off), byref(nb))
        d = tuple(dims[k] for k in range(nd.value))
        tn = C.gpucore_gguf_type_name(t.value)
        return GGUFTensorInfo(name.value.decode("utf-8", "surrogateescape"), tn.decode() if tn else str(t.value),
                              t.value, d, d[::-1], off.value, nb.value)

    def tensors(self) -> List[GGUFTensorInfo]:
        """Every tensor's info, in file order."""
        return [self._info(i) for i in range(C.gpucore_gguf_tensor_count(self.handle))]

    def _tensor_index(self, name: str) -> int:
        i = C.gpucore_gguf_tensor_find(self.handle, _name(name))
        if i < 0:
            raise KeyError("the GGUF file has no tensor %r" % name)
        return int(i)

    def tensor_info(self, name: str) -> GGUFTensorInfo:
        return self._info(self._tensor_index(name))

    def get_tensor(self, name: str, dtype: Any = "float32", device: DeviceLike = None) -> Tensor:
        """Tensor ``name`` decoded into a new row-major tensor of ``dtype`` (float32, bfloat16, float16)."""
        ctx = get_context(device)
        h = c_void_p()
        C.gpucore_gguf_load_tensor(self.handle, ctx.handle, self._tensor_index(name), _dt.as_dtype(dtype).value,
                                   byref(h))
        return Tensor._adopt(ctx, h.value)

    def read_into(self, name: str, tensor: Tensor) -> Tensor:
        """Decode tensor ``name`` into ``tensor`` (f32/bf16/f16, its row-major shape). Returns it."""
        if not isinstance(tensor, Tensor):
            raise InvalidArgumentTypeError("tensor must be a gpucore.Tensor, not %s" % type(tensor).__name__)
        C.gpucore_gguf_read(self.handle, self._tensor_index(name), tensor.handle)
        return tensor


def open_gguf(path: Any) -> GGUFFile:
    """Open a GGUF file (its whole header checked before anything else is read)."""
    return GGUFFile(path)
