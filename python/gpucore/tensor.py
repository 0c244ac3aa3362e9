"""The Tensor class and the functions that make tensors.

A :class:`Tensor` is a handle on a libgpucore tensor: a dtype, a shape (up to 8
dims), strides in *elements*, and memory on the tensor's context's device. Views
(``t[1:, ::2]``, ``reshape``, ``transpose``, ``permute``, ``.T``) share memory.

Work is asynchronous on the context's current stream: ``fill_``, ``uniform_``,
``copy_`` return as soon as the work is queued. Reading results through
``numpy()`` synchronises the context first. After ``from_numpy`` (shared memory),
call ``t.context.synchronize()`` before reading the numpy array directly.
"""
from __future__ import annotations

import importlib
import numbers
from ctypes import byref, c_int, c_int64, c_void_p
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _runtime
from . import dtypes as _dt
from ._lib import C, fast_function, raise_status, retry_after_release
from ._runtime import DELETER, _Keep, forget_owner, register_owner
from ._validate import INT64_MAX, MAX_DIMS, UINT64_MAX, check_dim, to_bool, to_float, to_int, to_shape
from .context import Context, DeviceLike, Stream, get_context
from .errors import (DtypeMismatchError, InvalidArgumentError, InvalidArgumentTypeError,
                     InvalidHandleError, NotSupportedError, NullPointerError, ShapeMismatchError)

__all__ = ["Tensor", "empty", "zeros", "ones", "full", "tensor", "from_numpy", "rand", "randn",
           "empty_like", "zeros_like", "ones_like", "full_like", "manual_seed", "IndexOutOfRangeError"]

UNIFORM, NORMAL = 0, 1


class IndexOutOfRangeError(InvalidArgumentError, IndexError):
    """An integer index past the end of a dim."""


# ---- the default random generator (Philox seed + counter offset) ----
_generator = {"seed": 0x9E3779B97F4A7C15, "offset": 0}


def manual_seed(seed: int) -> None:
    """Seed the default generator used by ``uniform_``/``normal_`` when no seed is given."""
    _generator["seed"] = to_int(seed, "seed", 0, UINT64_MAX)
    _generator["offset"] = 0


def _i64_array(values: Sequence[int]) -> Any:
    return (c_int64 * max(1, len(values)))(*values)


def _contiguous_strides(shape: Tuple[int, ...]) -> Tuple[int, ...]:
    """Row-major strides in elements, as gpucore_tensor_create sets them (a 0 counts as 1;
    the running product saturates at INT64_MAX)."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step = min(step * (n or 1), INT64_MAX)
    return tuple(reversed(strides))


_shape_cache: Dict[Tuple[int, ...], Tuple[Any, Tuple[int, ...], bool]] = {}

#: A dropped result of at most this many elements gives its handle back in a batch (see
#: Context._release): its memory is small enough (<= 32 KiB at 8 bytes an element, 64 of them
#: pending at most) that the delay cannot matter, and a batch saves one foreign call per op.
_RELEASE_BATCH_MAX_ELEMENTS = 4096


def _shape_info(shape: Tuple[int, ...]) -> Tuple[Any, Tuple[int, ...], bool]:
    """(the int64 C array of shape, its contiguous strides, whether a tensor of it is small
    enough to give back in a batch), cached per shape: ops make results of the same few shapes
    over and over. The C side only reads the array during a call, so one array may serve every
    caller (and thread)."""
    info = _shape_cache.get(shape)
    if info is None:
        if len(_shape_cache) >= 512:
            _shape_cache.clear()
        n = 1
        for d in shape:
            n *= d
        info = _shape_cache[shape] = (_i64_array(shape), _contiguous_strides(shape), n <= _RELEASE_BATCH_MAX_ELEMENTS)
    return info


class _ArrayExport:
    """Carries ``__array_interface__`` for numpy and keeps the tensor memory alive."""

    __slots__ = ("__array_interface__", "_keep")

    def __init__(self, interface: dict, keep: _Keep) -> None:
        self.__array_interface__ = interface
        self._keep = keep


class _Later:
    """A module of this package that imports this one (the ops), imported when first used so that
    this module imports none of them; each name is fetched once, then read from this object's
    attributes, so an operator call costs an attribute lookup, not an import statement."""

    def __init__(self, module: str) -> None:
        self._module = module

    def __getattr__(self, name: str) -> Any:
        value = getattr(importlib.import_module(self._module, __package__), name)
        setattr(self, name, value)
        return value


_elementwise, _ops, _compose, _nn = _Later(".ops_elementwise"), _Later(".ops"), _Later(".ops_compose"), _Later(".nn")


class _OpMethod:
    """Tensor's method ``name``: the op function of that name with the tensor as its first argument
    (t.exp(...) is gpucore.exp(t, ...)). On the method's first use the function is fetched and set
    on Tensor in this object's place, so later calls are plain calls of the function, as fast."""

    def __init__(self, ops: _Later, name: str) -> None:
        self._ops, self._name = ops, name

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        fn = getattr(self._ops, self._name)
        setattr(Tensor, self._name, fn)
        return fn if obj is None else fn.__get__(obj, Tensor)


class Tensor:
    """A libgpucore tensor (see the module docstring for semantics).

    Attributes (read-only): ``shape``, ``dtype`` (a :class:`gpucore.DType`),
    ``strides`` (elements), ``ndim``, ``nbytes``, ``device`` ("cpu", "cuda:0"),
    ``context``; methods as in PyTorch: ``numel()``, ``dim()``, ``size()``, ``stride()``,
    ``data_ptr()``, ``is_contiguous()``.

    Make tensors with :func:`gpucore.empty`, :func:`gpucore.zeros`,
    :func:`gpucore.tensor`, :func:`gpucore.from_numpy`, :func:`gpucore.from_dlpack`
    or the same methods of a :class:`gpucore.Context`.

    Interop: ``numpy()`` (zero-copy on CPU), ``__array__``, ``__dlpack__`` /
    ``__dlpack_device__``, ``__cuda_array_interface__`` (CUDA tensors).
    ``free()`` releases the handle early; the memory goes when its last view does.
    """

    # _hp: the handle as a c_void_p (the one C wrote it into), passed as is by the argtypes-free
    # fast paths; meaningful only while _h is not None
    # _batch: a small result that owns its memory, whose handle goes back in a batch when dropped
    __slots__ = ("_h", "_hp", "_ctx", "_foreign", "_keep", "_dead", "_shape", "_strides", "_dtype", "_batch",
                 "__weakref__")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("use gpucore.empty/zeros/tensor/from_numpy/from_dlpack (or a Context's methods) "
                        "to make a Tensor")

    @classmethod
    def _adopt(cls, ctx: Context, handle: int, foreign: bool = False, keep: Optional[_Keep] = None,
               known: Optional[Tuple[Tuple[int, ...], Any]] = None) -> "Tensor":
        """Wrap a C handle. ``known``: (shape, DType) of a tensor this binding just created
        contiguous, so its metadata need not be read back with four more C calls."""
        hp = c_void_p(handle)
        if known is not None:
            t = _fresh(ctx, hp, known[0], _shape_info(known[0])[1], known[1])
        else:
            # a view the library made: read its metadata once (argtypes-free calls on a handle
            # the library just returned)
            ndim = _fast_tensor_ndim(hp)
            if ndim < 0:
                raise InvalidHandleError("the library returned an invalid tensor handle")
            shape, strides = _I64_MAX_DIMS(), _I64_MAX_DIMS()
            st = _fast_tensor_shape(hp, shape) or _fast_tensor_strides(hp, strides)
            if st:
                raise_status(st, "gpucore_tensor_shape")
            t = _fresh(ctx, hp, tuple(shape[:ndim]), tuple(strides[:ndim]), _dt.from_value(_fast_tensor_dtype(hp)))
        t._foreign = foreign
        t._keep = keep
        return t

    @classmethod
    def _borrow(cls, ctx: Context, handle: int) -> "Tensor":
        """A Tensor on its own new view handle of a borrowed C handle (one the library owns,
        e.g. an optimizer's state): the view keeps the memory alive and is ours to destroy."""
        nd = C.gpucore_tensor_ndim(handle)
        if nd < 0:
            raise InvalidHandleError("the library returned an invalid tensor handle")
        perm = (c_int * max(1, nd))(*range(nd))
        out = c_void_p()
        C.gpucore_tensor_permute(handle, perm, byref(out))
        return cls._adopt(ctx, out.value)

    # ---- handle state ----
    # A tensor is live while it has its handle (_h) and its context is open: closing a context
    # does not visit its tensors (no per-tensor registry to keep up on every op), each tensor
    # sees the closed context here and in __del__.
    @property
    def handle(self) -> int:
        """The raw ``gpucore_tensor*``; raises InvalidHandleError after free() or a context close."""
        h = self._h
        if h is None or self._ctx._closed:
            raise InvalidHandleError("tensor is not live: %s" % self._why_dead())
        return h

    def _why_dead(self) -> str:
        if self._h is None:
            return self._dead or "it was freed"
        return "its context (%s) was closed" % self._ctx.device

    def _destroy_handle(self) -> None:
        """Give the handle back to the library, where the C context still exists (after a close
        that exports defer, the C context lives on and frees the tensor's memory now)."""
        h, self._h = self._h, None
        ctx = self._ctx
        if h is not None and ctx._frees:
            if self._foreign:
                _raw_context_synchronize(ctx._handle)
            _raw_tensor_destroy(h)

    def free(self) -> None:
        """Release this handle now (idempotent, also after the context was closed). Later use
        raises InvalidHandleError."""
        if self._h is None:
            return
        if self._ctx._closed:
            self._destroy_handle()
            self._dead = "its context (%s) was closed" % self._ctx.device
            return
        h, self._h = self._h, None
        self._dead = "it was freed with Tensor.free()"
        if self._foreign:
            C.gpucore_context_synchronize(self._ctx._handle)
        C.gpucore_tensor_destroy(h)
        self._keep = None

    @property
    def is_freed(self) -> bool:
        """Whether the handle was released (free() or context close)."""
        return self._h is None or self._ctx._closed

    def __del__(self) -> None:
        # _destroy_handle inlined (this runs once per op result): one flag says whether C takes
        # handles back, and the handle goes as the c_void_p C wrote it into (no argtypes). A small
        # result joins its context's batch instead (one C call per _RELEASE_BATCH handles).
        try:
            if self._h is not None:
                ctx = self._ctx
                if ctx._frees:
                    self._h = None
                    if self._batch:
                        pending = ctx._release
                        pending.append(self._hp)
                        if len(pending) >= _RELEASE_BATCH:
                            ctx._release_pending()
                        return
                    if self._foreign:
                        _raw_context_synchronize(ctx._handle)
                    _fast_tensor_destroy(self._hp)
        except Exception:
            pass

    # ---- metadata ----
    # Shape, strides and dtype are fixed for a handle's life: the binding keeps what it knows
    # (set at creation, or read once from C for views) instead of asking C on every access.
    @property
    def shape(self) -> Tuple[int, ...]:
        """Sizes of the dims."""
        if self._h is None or self._ctx._closed:
            self.handle  # raises, saying why
        return self._shape

    def size(self, dim: Optional[int] = None) -> Union[Tuple[int, ...], int]:
        """The shape, or the size of one dim (PyTorch spelling)."""
        if dim is None:
            return self.shape
        return self.shape[check_dim(dim, len(self.shape))]

    @property
    def strides(self) -> Tuple[int, ...]:
        """Strides in elements (not bytes)."""
        if self._h is None or self._ctx._closed:
            self.handle  # raises, saying why
        return self._strides

    def stride(self, dim: Optional[int] = None) -> Union[Tuple[int, ...], int]:
        """The strides, or the stride of one dim (elements; PyTorch spelling)."""
        if dim is None:
            return self.strides
        return self.strides[check_dim(dim, len(self._strides))]

    @property
    def dtype(self) -> _dt.DType:
        """The element type (a gpucore.DType)."""
        if self._h is None or self._ctx._closed:
            self.handle  # raises, saying why
        return self._dtype

    @property
    def ndim(self) -> int:
        """Number of dims (0..8)."""
        return len(self.shape)

    def dim(self) -> int:
        """Number of dims."""
        return self.ndim

    def numel(self) -> int:
        """Number of elements (a method, as torch.Tensor.numel)."""
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        """numel() * itemsize."""
        return self.numel() * self._dtype.itemsize

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self.dtype.itemsize

    def element_size(self) -> int:
        """Bytes per element (PyTorch spelling)."""
        return self.itemsize

    def is_contiguous(self) -> bool:
        """Whether the elements are dense and row-major (a method, as in PyTorch)."""
        return C.gpucore_tensor_is_contiguous(self.handle) == 1

    def data_ptr(self) -> int:
        """Address of element [0, ..., 0] (a device address for CUDA tensors); 0 when empty
        (a method, as in PyTorch)."""
        p = c_void_p()
        C.gpucore_tensor_data(self.handle, byref(p))
        return p.value or 0

    @property
    def context(self) -> Context:
        """The context the tensor belongs to."""
        if self._h is None or self._ctx._closed:
            self.handle  # raises, saying why
        return self._ctx

    @property
    def device(self) -> str:
        """The device name: "cpu" or "cuda:N"."""
        return self.context.device

    def __len__(self) -> int:
        s = self.shape
        if not s:
            raise TypeError("len() of a 0-d tensor")
        return s[0]

    def __iter__(self) -> Iterator["Tensor"]:
        for i in range(len(self)):
            yield self[i]

    def __repr__(self) -> str:
        if self.is_freed:
            return "gpucore.Tensor(<invalid: %s>)" % self._why_dead()
        head = "shape=%s, dtype=%s, device=%s" % (self._shape, self._dtype.long_name, self._ctx.device)
        n = 1
        for s in self._shape:
            n *= s
        if n <= 32:
            try:
                vals = np.array2string(self.numpy(copy=True, convert=True), separator=", ")
                return "gpucore.Tensor(%s, %s)" % (vals, head)
            except Exception:
                pass
        return "gpucore.Tensor(%s)" % head

    # ---- views ----
    def _view_handle(self) -> int:
        """A new C handle on the same view (identity permute), for exports."""
        nd = len(self.shape)
        perm = (c_int * max(1, nd))(*range(nd))
        out = c_void_p()
        C.gpucore_tensor_permute(self.handle, perm, byref(out))
        return out.value

    def _as_strided(self, shape: Sequence[int], strides: Sequence[int], offset: Optional[int] = None) -> "Tensor":
        """gpucore_tensor_as_strided with this tensor's own storage offset by default."""
        off = self.storage_offset() if offset is None else offset
        out = c_void_p()
        C.gpucore_tensor_as_strided(self.handle, len(shape), _i64_array(shape), _i64_array(strides), off,
                                    byref(out))
        return Tensor._adopt(self._ctx, out.value, self._foreign)

    def as_strided(self, size: Sequence[int], stride: Sequence[int],
                   storage_offset: Optional[int] = None) -> "Tensor":
        """A view of this tensor's memory with any shape and strides (elements, >= 0).

        ``storage_offset`` (elements from the start of the memory this tensor shares with
        its base; default: this tensor's own, see :meth:`storage_offset`). Every element
        the view can reach must lie inside that memory (InvalidArgumentError otherwise).
        Stride 0 repeats (expand); squeeze/unsqueeze/diagonal are special cases.
        """
        sh = to_shape(size, "size")
        st = to_shape(stride, "stride")
        if len(sh) != len(st):
            raise InvalidArgumentError("as_strided: %d sizes but %d strides" % (len(sh), len(st)))
        off = None if storage_offset is None else to_int(storage_offset, "storage_offset", 0)
        return self._as_strided(sh, st, off)

    def expand(self, *sizes: Any) -> "Tensor":
        """A broadcast view (stride 0 along expanded dims); -1 keeps a dim's size."""
        if len(sizes) == 1 and not isinstance(sizes[0], numbers.Integral):
            sizes = tuple(sizes[0])
        sh = to_shape(sizes, "sizes", allow_minus_one=True)
        nd, cur = len(sh), self.shape
        if nd < len(cur):
            raise ShapeMismatchError("expand: %d sizes for a %d-d tensor" % (nd, len(cur)))
        lead = nd - len(cur)
        shape, strides = [], []
        for i, n in enumerate(sh):
            if i < lead:
                if n < 0:
                    raise InvalidArgumentError("expand: -1 is not allowed for a new leading dim")
                shape.append(n)
                strides.append(0)
                continue
            c, st = cur[i - lead], self._strides[i - lead]
            if n == -1 or n == c:
                shape.append(c)
                strides.append(st)
            elif c == 1:
                shape.append(n)
                strides.append(0)
            else:
                raise ShapeMismatchError("expand: dim %d has size %d, which cannot become %d" % (i, c, n))
        return self._as_strided(shape, strides)

    def storage_offset(self) -> int:
        """Offset in elements of element [0, ...] from the start of the memory shared with its base."""
        v = c_int64()
        C.gpucore_tensor_storage_offset(self.handle, byref(v))
        return v.value

    def record_stream(self, stream: Stream) -> None:
        """Declare that this tensor's memory is also used on ``stream`` (another stream of the
        same context), so the caching allocator does not reuse it after the tensor is freed
        until ``stream`` has passed the work queued so far (torch.Tensor.record_stream)."""
        if not isinstance(stream, Stream):
            raise InvalidArgumentTypeError("record_stream needs a gpucore.Stream, not %s" % type(stream).__name__)
        C.gpucore_tensor_record_stream(self.handle, self._ctx._stream_arg(stream))

    def __getitem__(self, key: Any) -> "Tensor":
        """Basic indexing: ints, slices (step >= 1), ``...`` and ``None``; always a view."""
        if not isinstance(key, tuple):
            key = (key,)
        shape = self.shape
        nd = len(shape)
        n_real = sum(1 for k in key if k is not None and k is not Ellipsis)
        if sum(1 for k in key if k is Ellipsis) > 1:
            raise InvalidArgumentError("an index can only have a single ellipsis ('...')")
        if n_real > nd:
            raise IndexOutOfRangeError("too many indices: %d for a %d-d tensor" % (n_real, nd))
        expanded: List[Any] = []
        for k in key:
            if k is Ellipsis:
                expanded.extend([slice(None)] * (nd - n_real))
            else:
                expanded.append(k)
        if Ellipsis not in key:
            expanded.extend([slice(None)] * (nd - n_real))
        cur = self
        dim = 0
        drop: List[int] = []
        insert: List[int] = []   # positions (in output dims) of new axes
        out_pos = 0
        for k in expanded:
            if k is None:
                insert.append(out_pos)
                out_pos += 1
                continue
            if isinstance(k, slice):
                start = 0 if k.start is None else to_int(k.start, "slice start")
                stop = INT64_MAX if k.stop is None else to_int(k.stop, "slice stop")
                step = 1 if k.step is None else to_int(k.step, "slice step")
                if step < 1:
                    raise NotSupportedError("slice step %d: only positive steps are supported (no reversed views)"
                                            % step)
                if (start, stop, step) != (0, INT64_MAX, 1):
                    cur = cur._slice(dim, start, stop, step)
                dim += 1
                out_pos += 1
                continue
            if type(k) is not int and (isinstance(k, bool) or not isinstance(k, numbers.Integral)
                                       and not hasattr(k, "__index__")):
                raise InvalidArgumentTypeError("tensor indices must be ints, slices, ... or None, not %s"
                                               % type(k).__name__)
            i = to_int(k, "index")
            n = shape[dim]
            if i < -n or i >= n:
                raise IndexOutOfRangeError("index %d is out of range for dim %d of size %d" % (i, dim, n))
            i = i + n if i < 0 else i
            cur = cur._slice(dim, i, i + 1, 1)
            drop.append(dim)
            dim += 1
        if not drop and not insert:
            if cur is self:  # t[:] / t[...]: a new view of the same elements
                return Tensor._adopt(self._ctx, self._view_handle(), self._foreign)
            return cur
        kept_shape = [s for d, s in enumerate(cur.shape) if d not in drop]
        kept_strides = [s for d, s in enumerate(cur.strides) if d not in drop]
        for p in insert:
            kept_shape.insert(p, 1)
            kept_strides.insert(p, 1)
        if len(kept_shape) > MAX_DIMS:
            raise InvalidArgumentError("indexing would give %d dims; at most %d are supported"
                                       % (len(kept_shape), MAX_DIMS))
        return cur._as_strided(kept_shape, kept_strides)

    def __setitem__(self, key: Any, value: Any) -> None:
        """``t[idx] = value``: fill with a number, or copy a tensor / array of the view's shape."""
        view = self[key]
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            view.fill_(value)
        else:
            view.copy_(value)

    def _slice(self, dim: int, start: int, stop: int, step: int) -> "Tensor":
        out = c_void_p()
        C.gpucore_tensor_slice(self.handle, dim, start, stop, step, byref(out))
        return Tensor._adopt(self._ctx, out.value, self._foreign)

    def slice(self, dim: int, start: int = 0, stop: Optional[int] = None, step: int = 1) -> "Tensor":
        """Elements start, start+step, ... < stop along ``dim`` (Python clamping; step >= 1)."""
        d = to_int(dim, "dim", -(1 << 31), (1 << 31) - 1)
        s = to_int(start, "start")
        e = INT64_MAX if stop is None else to_int(stop, "stop")
        st = to_int(step, "step")
        return self._slice(d, s, e, st)

    def reshape(self, *shape: Any) -> "Tensor":
        """Same elements, new shape (one entry may be -1). A view when contiguous, else a copy."""
        if len(shape) == 1 and not isinstance(shape[0], numbers.Integral):
            shape = shape[0]
        sh = to_shape(shape, "shape", allow_minus_one=True)
        src = self if self.is_contiguous() else self.clone()
        return src.view(sh)

    def view(self, *shape: Any) -> "Tensor":
        """Reshape without copying (needs a contiguous tensor: NotContiguousError otherwise)."""
        if len(shape) == 1 and not isinstance(shape[0], numbers.Integral):
            shape = shape[0]
        sh = to_shape(shape, "shape", allow_minus_one=True)
        out = c_void_p()
        C.gpucore_tensor_reshape(self.handle, len(sh), _i64_array(sh), byref(out))
        return Tensor._adopt(self._ctx, out.value, self._foreign)

    def flatten(self) -> "Tensor":
        """A 1-d tensor of all elements (a view when contiguous)."""
        return self.reshape(-1)

    def transpose(self, dim0: int, dim1: int) -> "Tensor":
        """Swap two dims (a view)."""
        d0 = to_int(dim0, "dim0", -(1 << 31), (1 << 31) - 1)
        d1 = to_int(dim1, "dim1", -(1 << 31), (1 << 31) - 1)
        if not self._shape and d0 in (0, -1) and d1 in (0, -1):  # PyTorch: a 0-d tensor's dim 0 / -1
            return self.reshape(())
        out = c_void_p()
        C.gpucore_tensor_transpose(self.handle, d0, d1, byref(out))
        return Tensor._adopt(self._ctx, out.value, self._foreign)

    def permute(self, *dims: Any) -> "Tensor":
        """Reorder dims: output dim i is input dim dims[i] (a view)."""
        if len(dims) == 1 and not isinstance(dims[0], numbers.Integral):
            dims = tuple(dims[0])
        nd = len(self.shape)
        if len(dims) != nd:
            raise InvalidArgumentError("permute: %d dims given for a %d-d tensor" % (len(dims), nd))
        perm = (c_int * max(1, nd))(*[to_int(d, "dims[%d]" % i, -(1 << 31), (1 << 31) - 1)
                                      for i, d in enumerate(dims)])
        out = c_void_p()
        C.gpucore_tensor_permute(self.handle, perm, byref(out))
        return Tensor._adopt(self._ctx, out.value, self._foreign)

    def t(self) -> "Tensor":
        """The transpose of a tensor of at most 2 dims (a view; 0-d and 1-d come back as they are),
        as torch.Tensor.t(); use transpose(d0, d1) or permute for more dims."""
        nd = len(self.shape)
        if nd > 2:
            raise ShapeMismatchError("t() expects a tensor with <= 2 dims, but this one has %d (shape %s); use "
                                     "transpose(dim0, dim1) or permute(...)" % (nd, self._shape))
        return self.transpose(0, 1) if nd == 2 else self[...]

    @property
    def T(self) -> "Tensor":
        """All dims reversed (a view)."""
        return self.permute(tuple(reversed(range(len(self.shape)))))

    def unsqueeze(self, dim: int) -> "Tensor":
        """Insert a dim of size 1 at ``dim`` (a view)."""
        nd = len(self.shape)
        d = to_int(dim, "dim", -(nd + 1), nd)
        d = d + nd + 1 if d < 0 else d
        if nd + 1 > MAX_DIMS:
            raise InvalidArgumentError("unsqueeze: the result would have %d dims; at most %d" % (nd + 1, MAX_DIMS))
        shape, strides = list(self._shape), list(self._strides)
        shape.insert(d, 1)
        strides.insert(d, 1)
        return self._as_strided(shape, strides)

    def squeeze(self, dim: Optional[int] = None) -> "Tensor":
        """Drop dims of size 1 (all, or just ``dim`` if it has size 1) (a view)."""
        shape, strides = list(self.shape), list(self._strides)
        if dim is None:
            keep = [i for i, s in enumerate(shape) if s != 1]
        else:
            d = check_dim(dim, len(shape))
            keep = [i for i in range(len(shape)) if i != d or shape[i] != 1]
        return self._as_strided([shape[i] for i in keep], [strides[i] for i in keep])

    # ---- copies ----
    def contiguous(self) -> "Tensor":
        """Self if contiguous, else a contiguous copy."""
        return self if self.is_contiguous() else self.clone()

    def clone(self) -> "Tensor":
        """A new contiguous tensor with the same values on the same context."""
        out = empty(self.shape, self.dtype, device=self._ctx)
        return out.copy_(self)

    def copy_(self, src: Any, stream: Optional[Stream] = None, non_blocking: bool = False) -> "Tensor":
        """Copy ``src`` into this tensor (in place); returns self.

        ``src`` may be a Tensor (same dtype and shape; another context goes through the
        host), a numpy array of the same numpy dtype and shape, or a list/scalar
        (converted). Copies never convert between tensor dtypes. With
        ``non_blocking=True`` host copies are queued on ``stream`` (the numpy buffer is
        kept alive until the stream is synchronised).
        """
        nb = to_bool(non_blocking, "non_blocking")
        s = self._ctx._stream_arg(stream)
        if isinstance(src, Tensor):
            if src._ctx is self._ctx:
                C.gpucore_copy(self.handle, src.handle, s)
                return self
            if src.dtype is not self.dtype:
                raise DtypeMismatchError("copy_: dst is %s but src is %s; copies do not convert"
                                         % (self.dtype.name, src.dtype.name))
            src = src._numpy_bits(True)
        arr = _host_array_for(self, src, "copy_")
        h = self.handle
        if nb:
            st = stream if stream is not None else self._ctx.current_stream
            st._keep(arr)
            C.gpucore_copy_from_host_async(h, arr.ctypes.data or None, arr.nbytes, s)
        else:
            C.gpucore_copy_from_host(h, arr.ctypes.data or None, arr.nbytes)
        return self

    def copy_to_numpy_(self, out: np.ndarray, stream: Optional[Stream] = None,
                       non_blocking: bool = False) -> np.ndarray:
        """Copy into the dense numpy array ``out`` (same shape, ``dtype.numpy``); returns it.

        With ``non_blocking=True`` the copy is queued on ``stream``; ``out`` is valid after
        that stream is synchronised.
        """
        if not isinstance(out, np.ndarray):
            raise InvalidArgumentTypeError("out must be a numpy array, not %s" % type(out).__name__)
        if out.dtype != self.dtype.numpy or tuple(out.shape) != self.shape:
            raise ShapeMismatchError("out is %s %s but the tensor needs %s %s" % (
                out.dtype, tuple(out.shape), self.dtype.numpy, self.shape))
        if not (out.flags.c_contiguous and out.flags.writeable):
            raise InvalidArgumentError("out must be a writeable C-contiguous array")
        s = self._ctx._stream_arg(stream)
        if to_bool(non_blocking, "non_blocking"):
            st = stream if stream is not None else self._ctx.current_stream
            st._keep(out)
            C.gpucore_copy_to_host_async(out.ctypes.data or None, out.nbytes, self.handle, s)
        else:
            C.gpucore_copy_to_host(out.ctypes.data or None, out.nbytes, self.handle)
        return out

    def to(self, *args: Any, dtype: Any = None, device: DeviceLike = None, copy: bool = False,
           non_blocking: bool = False) -> "Tensor":
        """This tensor with another dtype and/or on another context, as torch.Tensor.to:
        ``to(gpucore.bfloat16)``, ``to("cpu")``, ``to(ctx)``, ``to("cuda:0", "f16")``,
        ``to(other_tensor)`` (its dtype and context), or the keywords ``dtype=``/``device=``.

        Returns self when nothing changes (unless ``copy``). A dtype change is
        :func:`gpucore.cast` (float dtypes); a context change copies (through host memory
        between contexts). ``non_blocking`` is accepted for PyTorch's signature; copies between
        contexts wait for the data either way.
        """
        to_bool(non_blocking, "non_blocking")
        for a in args:
            if isinstance(a, bool):
                raise InvalidArgumentTypeError("to(): pass copy=/non_blocking= by keyword, not a positional %r" % a)
            if isinstance(a, Tensor):
                if len(args) != 1 or dtype is not None or device is not None:
                    raise InvalidArgumentError("to(other): a tensor argument comes alone (it gives both the dtype "
                                               "and the context)")
                dtype, device = a.dtype, a.context
            elif isinstance(a, Context) or (isinstance(a, str) and a.lower() not in _dt._BY_NAME):
                if device is not None:
                    raise InvalidArgumentError("to(): the device is given twice (%r and %r)" % (device, a))
                device = a
            else:
                if dtype is not None:
                    raise InvalidArgumentError("to(): the dtype is given twice (%r and %r)" % (dtype, a))
                dtype = a
        ctx = self._ctx if device is None else _context_for(device)
        dt = self.dtype if dtype is None else _dt.as_dtype(dtype)
        src = self
        if dt is not self._dtype:
            src = _elementwise.cast(self, dt)
        if ctx is self._ctx:
            return src.clone() if copy and src is self else src
        out = empty(src.shape, dt, device=ctx)
        return out.copy_(src)

    def cpu(self) -> "Tensor":
        """This tensor on the shared CPU context."""
        return self.to("cpu")

    # ---- fill and random ----
    def fill_(self, value: float, stream: Optional[Stream] = None) -> "Tensor":
        """Set every element to ``value`` (rounded to nearest even for floats; integers
        truncated toward zero and range-checked). Returns self."""
        v = to_float(value, "value")
        C.gpucore_fill(self.handle, v, self._ctx._stream_arg(stream))
        return self

    def zero_(self) -> "Tensor":
        """Fill with zeros. Returns self."""
        return self.fill_(0.0)

    def _random(self, dist: int, a: float, b: float, seed: Optional[int], offset: Optional[int],
                stream: Optional[Stream]) -> "Tensor":
        h = self.handle
        s = self._ctx._stream_arg(stream)
        if seed is None:
            sd, off = _generator["seed"], _generator["offset"]
            if offset is not None:
                off = to_int(offset, "offset", 0, UINT64_MAX)
            C.gpucore_random(h, dist, a, b, sd, off, s)
            _generator["offset"] = (off + C.gpucore_random_offset_advance(self.numel(), dist)) & UINT64_MAX
        else:
            sd = to_int(seed, "seed", 0, UINT64_MAX)
            off = 0 if offset is None else to_int(offset, "offset", 0, UINT64_MAX)
            C.gpucore_random(h, dist, a, b, sd, off, s)
        return self

    def uniform_(self, low: float = 0.0, high: float = 1.0, seed: Optional[int] = None,
                 offset: Optional[int] = None, stream: Optional[Stream] = None) -> "Tensor":
        """Fill with uniform numbers in [low, high) from Philox-4x32-10.

        With ``seed`` (and ``offset``, default 0) the numbers are reproducible on every
        backend; without, the default generator (:func:`gpucore.manual_seed`) is used and
        advanced. Floating dtypes only. Returns self.
        """
        return self._random(UNIFORM, to_float(low, "low"), to_float(high, "high"), seed, offset, stream)

    def normal_(self, mean: float = 0.0, std: float = 1.0, seed: Optional[int] = None,
                offset: Optional[int] = None, stream: Optional[Stream] = None) -> "Tensor":
        """Fill with normal numbers (Box-Muller over Philox); see :meth:`uniform_`. Returns self."""
        return self._random(NORMAL, to_float(mean, "mean"), to_float(std, "std"), seed, offset, stream)

    # ---- host interop ----
    def numpy(self, copy: Optional[bool] = None, convert: bool = False) -> np.ndarray:
        """The values as a numpy array.

        On a CPU context (and ``copy`` not True) the array *shares* the tensor's memory
        (zero-copy; strides preserved) and keeps it alive, even after the tensor or
        its context is closed. Elsewhere it is a copy (``copy=False`` then raises).
        The context is synchronised first.

        bf16 and fp8 come as ``ml_dtypes`` arrays (``ml_dtypes.bfloat16``,
        ``float8_e4m3fn``, ``float8_e5m2``: numpy arrays of those values, shared as above);
        without the ml_dtypes package they are refused. ``convert=True`` gives a float32
        copy of the values instead (for any dtype numpy lacks).
        """
        dt = self._dtype
        if dt.exact_numpy:
            return self._numpy_bits(copy)
        if convert:
            bits = self._numpy_bits(True)
            return _dt.bf16_to_float32(bits) if dt is _dt.bfloat16 else _dt.fp8_to_float32(bits, dt)
        value_dtype = _dt.VALUE_NUMPY.get(dt.value)
        if value_dtype is None:
            raise NotSupportedError("numpy(): %s has no numpy dtype here: install the ml_dtypes package "
                                    "(pip install ml_dtypes) for a %s array, or pass convert=True for a float32 "
                                    "copy" % (dt.long_name, dt.long_name))
        return self._numpy_bits(copy).view(value_dtype)

    def _numpy_bits(self, copy: Optional[bool]) -> np.ndarray:
        """numpy() with bf16/fp8 as their bits (uint16 / uint8)."""
        h = self.handle
        dt = self._dtype
        shareable = self._ctx.is_cpu
        if copy is False and not shareable:
            raise NotSupportedError("numpy(copy=False): the tensor is on %s; only CPU tensors can be shared "
                                    "with numpy without a copy" % self._ctx.device)
        if copy or not shareable or self.numel() == 0:
            out = np.empty(self._shape, dtype=dt.numpy)
            C.gpucore_copy_to_host(out.ctypes.data or None, out.nbytes, h)
            return out
        self._ctx.synchronize()
        keep = _Keep(self._view_handle(), self._ctx, self._foreign, counts_as_export=True)
        isz = dt.itemsize
        iface = {"version": 3, "shape": self._shape, "typestr": dt.numpy.str,
                 "data": (self.data_ptr(), False), "strides": tuple(s * isz for s in self._strides)}
        return np.asarray(_ArrayExport(iface, keep))

    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> np.ndarray:
        a = self.numpy(copy=copy, convert=not self._dtype.exact_numpy)
        return a if dtype is None else a.astype(dtype, copy=False)

    def tolist(self) -> Any:
        """The values as nested Python lists (bf16/fp8 converted to float)."""
        return self.numpy(copy=True, convert=True).tolist()

    def item(self) -> Any:
        """The value of a one-element tensor as a Python number."""
        n = self.numel()
        if n != 1:
            raise InvalidArgumentError("item(): the tensor has %d elements, not 1" % n)
        return self.numpy(copy=True, convert=True).reshape(()).item()

    def __bool__(self) -> bool:
        """bool(t) of a one-element tensor (its value is not zero); more or fewer elements raise,
        as in PyTorch (use (t != 0) with .numpy().any() / .all() for many)."""
        n = self.numel()
        if n != 1:
            raise InvalidArgumentError("Boolean value of Tensor with %s is ambiguous"
                                       % ("no values" if n == 0 else "more than one value"))
        return bool(self.item())

    def __float__(self) -> float:
        """float(t) of a one-element tensor."""
        return float(self._scalar("float"))

    def __int__(self) -> int:
        """int(t) of a one-element tensor (truncated toward zero, as int() of a float)."""
        return int(self._scalar("int"))

    def _scalar(self, what: str) -> Any:
        n = self.numel()
        if n != 1:
            raise InvalidArgumentError("%s(): only a tensor of one element converts to a Python scalar; this one "
                                       "has %d (shape %s)" % (what, n, self._shape))
        return self.item()

    # The comparison operators (below) return tensors, so == is no identity test; hashing stays
    # by identity (as torch.Tensor), so tensors still work as dict keys and in sets.
    __hash__ = object.__hash__

    # ---- DLPack and the CUDA array interface (see gpucore.interop) ----
    def __dlpack__(self, *, stream: Any = None, max_version: Optional[Tuple[int, int]] = None,
                   dl_device: Optional[Tuple[int, int]] = None, copy: Optional[bool] = None) -> Any:
        """Export as a DLPack capsule (zero-copy unless ``copy``); see gpucore.interop.to_dlpack."""
        from .interop import to_dlpack
        return to_dlpack(self, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)

    def __dlpack_device__(self) -> Tuple[int, int]:
        """(kDLCPU, 0) or (kDLCUDA, index)."""
        from .interop import dlpack_device
        return dlpack_device(self)

    @property
    def __cuda_array_interface__(self) -> dict:
        """Version-3 CUDA array interface of a CUDA tensor (AttributeError elsewhere)."""
        from .interop import cuda_array_interface
        return cuda_array_interface(self)

    # ---- operators and op methods: the ops live in gpucore.ops_elementwise, ops, ops_compose and nn ----
    def __add__(self, other: Any) -> "Tensor":
        return _elementwise._binary(_elementwise.ADD, self, other, None, None)

    def __radd__(self, other: Any) -> "Tensor":
        return _elementwise._binary(_elementwise.ADD, other, self, None, None)

    def __sub__(self, other: Any) -> "Tensor":
        return _elementwise._binary(_elementwise.SUB, self, other, None, None)

    def __rsub__(self, other: Any) -> "Tensor":
        return _elementwise._binary(_elementwise.SUB, other, self, None, None)

    def __mul__(self, other: Any) -> "Tensor":
        return _elementwise._binary(_elementwise.MUL, self, other, None, None)

    def __rmul__(self, other: Any) -> "Tensor":
        return _elementwise._binary(_elementwise.MUL, other, self, None, None)

    def __truediv__(self, other: Any) -> "Tensor":
        return _elementwise._binary(_elementwise.DIV, self, other, None, None)

    def __rtruediv__(self, other: Any) -> "Tensor":
        return _elementwise._binary(_elementwise.DIV, other, self, None, None)

    def __iadd__(self, other: Any) -> "Tensor":
        return _elementwise._binary(_elementwise.ADD, self, other, self, None)

    def __isub__(self, other: Any) -> "Tensor":
        return _elementwise._binary(_elementwise.SUB, self, other, self, None)

    def __imul__(self, other: Any) -> "Tensor":
        return _elementwise._binary(_elementwise.MUL, self, other, self, None)

    def __itruediv__(self, other: Any) -> "Tensor":
        return _elementwise._binary(_elementwise.DIV, self, other, self, None)

    def __neg__(self) -> "Tensor":
        return _elementwise.neg(self)

    def __abs__(self) -> "Tensor":
        return _elementwise.abs(self)

    def __pow__(self, exponent: Any) -> "Tensor":
        return _compose.pow(self, exponent)

    def __rpow__(self, base: Any) -> "Tensor":
        return _compose.pow(base, self)

    # comparisons give 1.0/0.0 masks (see gpucore.ops_compose); other types: NotImplemented
    def __eq__(self, other: Any) -> Any:  # type: ignore[override]
        return _compose._compare_operator("eq", self, other)

    def __ne__(self, other: Any) -> Any:  # type: ignore[override]
        return _compose._compare_operator("ne", self, other)

    def __lt__(self, other: Any) -> Any:
        return _compose._compare_operator("lt", self, other)

    def __le__(self, other: Any) -> Any:
        return _compose._compare_operator("le", self, other)

    def __gt__(self, other: Any) -> Any:
        return _compose._compare_operator("gt", self, other)

    def __ge__(self, other: Any) -> Any:
        return _compose._compare_operator("ge", self, other)

    def __matmul__(self, other: Any) -> Any:
        if not isinstance(other, Tensor):
            return NotImplemented
        return _nn.matmul(self, other)

    def __rmatmul__(self, other: Any) -> Any:
        # other @ self where other is no Tensor (numpy arrays answer @ themselves): a list or
        # scalar data becomes a tensor of self's dtype on self's context, as torch.tensor would
        return _nn.matmul(tensor(other, dtype=self.dtype, device=self.context), self)

    def matmul(self, other: "Tensor") -> "Tensor":
        """self @ other; see gpucore.matmul."""
        return _nn.matmul(self, other)

    def astype(self, dtype: Any) -> "Tensor":
        """This tensor converted to ``dtype`` (self when it already has it); see gpucore.cast."""
        return self if _dt.as_dtype(dtype) is self.dtype else _elementwise.cast(self, dtype)

    def float(self) -> "Tensor":
        """self.astype(gpucore.float32)."""
        return self.astype("float32")

    def double(self) -> "Tensor":
        """self.astype(gpucore.float64)."""
        return self.astype("float64")

    def half(self) -> "Tensor":
        """self.astype(gpucore.float16)."""
        return self.astype("float16")

    def bfloat16(self) -> "Tensor":
        """self.astype(gpucore.bfloat16)."""
        return self.astype("bfloat16")

    # t.exp(...) is gpucore.exp(t, ...), with the function's arguments
    exp = _OpMethod(_elementwise, "exp")
    log = _OpMethod(_elementwise, "log")
    sqrt = _OpMethod(_elementwise, "sqrt")
    rsqrt = _OpMethod(_elementwise, "rsqrt")
    abs = _OpMethod(_elementwise, "abs")
    neg = _OpMethod(_elementwise, "neg")
    clamp = _OpMethod(_elementwise, "clamp")
    relu = _OpMethod(_elementwise, "relu")
    gelu = _OpMethod(_elementwise, "gelu")
    silu = _OpMethod(_elementwise, "silu")
    sigmoid = _OpMethod(_elementwise, "sigmoid")
    tanh = _OpMethod(_elementwise, "tanh")
    sum = _OpMethod(_ops, "sum")
    mean = _OpMethod(_ops, "mean")
    amax = _OpMethod(_ops, "amax")
    amin = _OpMethod(_ops, "amin")
    argmax = _OpMethod(_ops, "argmax")
    softmax = _OpMethod(_ops, "softmax")
    log_softmax = _OpMethod(_ops, "log_softmax")
    eq = _OpMethod(_compose, "eq")
    ne = _OpMethod(_compose, "ne")
    lt = _OpMethod(_compose, "lt")
    le = _OpMethod(_compose, "le")
    gt = _OpMethod(_compose, "gt")
    ge = _OpMethod(_compose, "ge")
    pow = _OpMethod(_compose, "pow")
    max = _OpMethod(_compose, "max")
    min = _OpMethod(_compose, "min")
    all = _OpMethod(_compose, "all")
    any = _OpMethod(_compose, "any")


def _context_for(device: DeviceLike) -> Context:
    """get_context for to(): a string that names no device says it is neither a dtype nor a device."""
    try:
        return get_context(device)
    except InvalidArgumentError as e:
        if not isinstance(device, str) or isinstance(e, InvalidArgumentTypeError):
            raise
        raise InvalidArgumentError("to(%r): neither a dtype (e.g. gpucore.bfloat16, 'float16') nor a device "
                                   "('cpu', 'cuda', 'cuda:N', a Context): %s" % (device, e)) from None


# ---- host data for copies ----

def _host_array_for(t: Tensor, src: Any, what: str) -> np.ndarray:
    """A dense numpy array with t's bytes layout (t.dtype.numpy, t.shape) built from src."""
    dt = t.dtype
    if isinstance(src, np.ndarray):
        if dt.value in _dt.VALUE_NUMPY and src.dtype == _dt.VALUE_NUMPY[dt.value]:  # an ml_dtypes array of t's dtype
            src = src.view(dt.numpy)
        if src.dtype != dt.numpy:
            if dt is _dt.bfloat16 and src.dtype.kind == "f":
                src = _dt.float32_to_bf16(src)
            else:
                raise DtypeMismatchError("%s: the array is %s but the tensor is %s (numpy %s); copies do not "
                                         "convert, use array.astype(...)" % (what, src.dtype, dt.long_name,
                                                                            dt.numpy))
    else:
        if src is None:
            raise NullPointerError("%s: src is None" % what)
        try:
            if dt is _dt.bfloat16:
                src = _dt.float32_to_bf16(np.asarray(src, dtype=np.float32))
            elif not dt.exact_numpy:
                src = np.asarray(src, dtype=np.uint8)
            else:
                src = np.asarray(src, dtype=dt.numpy)
        except (TypeError, ValueError, OverflowError) as e:
            raise InvalidArgumentTypeError("%s: cannot convert %s to %s: %s" % (what, type(src).__name__,
                                                                                 dt.long_name, e)) from None
    if tuple(src.shape) != t.shape:
        raise ShapeMismatchError("%s: the source has shape %s but the tensor has shape %s"
                                 % (what, tuple(src.shape), t.shape))
    return np.ascontiguousarray(src)


# ---- factories ----

def _size_args(what: str, size: Tuple[Any, ...], rest_names: Sequence[str], given: Dict[str, Any]) -> Tuple[int, ...]:
    """PyTorch's size arguments: the sizes as varargs (``empty(2, 3)``) or as one sequence
    (``empty((2, 3))``, ``empty([2, 3])``). After a sequence, further positional arguments are
    the older positional parameters named in rest_names (dtype, device, ...), stored into given
    (a keyword given as well is an error)."""
    if not size:
        raise InvalidArgumentTypeError("%s(): give the sizes, e.g. %s(2, 3) or %s((2, 3)); %s(()) makes a 0-d "
                                       "tensor" % (what, what, what, what))
    first = size[0]
    if isinstance(first, numbers.Integral) and not isinstance(first, bool):
        for i, n in enumerate(size):
            if not isinstance(n, numbers.Integral) or isinstance(n, bool):
                raise InvalidArgumentTypeError("%s(): size %d is %r; sizes are ints (give dtype= and device= by "
                                               "keyword after varargs sizes)" % (what, i, n))
        return to_shape(size, "shape")
    rest = size[1:]
    if len(rest) > len(rest_names):
        raise InvalidArgumentTypeError("%s(): %d positional arguments after the size; at most %d (%s)"
                                       % (what, len(rest), len(rest_names), ", ".join(rest_names)))
    for name, v in zip(rest_names, rest):
        if given.get(name) is not None:
            raise InvalidArgumentTypeError("%s(): %s given both by position and by keyword" % (what, name))
        given[name] = v
    return to_shape(first, "shape")


def _dtype_or_f32(dtype: Any) -> Any:
    return _dt.float32 if dtype is None else _dt.as_dtype(dtype)


def empty(*size: Any, dtype: Any = None, device: DeviceLike = None) -> Tensor:
    """An uninitialised contiguous tensor.

    Args:
        size: sizes as varargs ``empty(2, 3)`` or one sequence ``empty((2, 3))`` (0..8 dims,
            each >= 0; ``empty(())`` is 0-d). After a sequence, dtype and device may follow by
            position (the older spelling).
        dtype: a gpucore dtype, a name ("f32", "bfloat16") or a numpy dtype (default float32).
        device: a Context, a device string ("cpu", "cuda:0") or None (default context).
    """
    kw = {"dtype": dtype, "device": device}
    shape = _size_args("empty", size, ("dtype", "device"), kw)
    return _new(get_context(kw["device"]), shape, _dtype_or_f32(kw["dtype"]))


def _new(ctx: Context, shape: Tuple[int, ...], dt: Any) -> Tensor:
    """A new contiguous tensor from an already checked shape tuple and DType (the ops' outputs).
    The per-op hot path: one argtypes-free C call (ctx._hp is None once the context is closed)."""
    info = _shape_cache.get(shape) or _shape_info(shape)
    out = c_void_p()
    st = _fast_tensor_create(ctx._hp, dt.value, len(shape), info[0], byref(out))
    if st and (st := retry_after_release(st, _fast_tensor_create, ctx._hp, dt.value, len(shape), info[0], byref(out))):
        ctx.handle  # a closed context says so
        raise_status(st, "gpucore_tensor_create")
    return _fresh(ctx, out, shape, info[1], dt, info[2])


def _fresh(ctx: Context, handle: c_void_p, shape: Tuple[int, ...], strides: Tuple[int, ...], dt: Any,
           batch: bool = False) -> Tensor:
    """A Tensor on a new handle of ours (a c_void_p, kept) whose metadata the caller knows.
    batch: the handle is a new allocation of its own, small (_shape_info's flag): when dropped, it
    goes back in its context's batch."""
    t = _object_new(Tensor)
    t._batch = batch
    t._h = handle.value
    t._hp = handle
    t._ctx = ctx
    t._foreign = False
    t._keep = None
    t._dead = None
    t._shape = shape
    t._strides = strides
    t._dtype = dt
    return t


_object_new = object.__new__
_raw_tensor_destroy = C.raw_gpucore_tensor_destroy
_raw_context_synchronize = C.raw_gpucore_context_synchronize
_fast_tensor_create = fast_function("gpucore_tensor_create")
_fast_tensor_destroy = fast_function("gpucore_tensor_destroy")
_fast_clear_error = fast_function("gpucore_clear_error", None)
_fast_tensor_ndim = fast_function("gpucore_tensor_ndim")
_fast_tensor_dtype = fast_function("gpucore_tensor_dtype")
_fast_tensor_shape = fast_function("gpucore_tensor_shape")
_fast_tensor_strides = fast_function("gpucore_tensor_strides")
_I64_MAX_DIMS = c_int64 * MAX_DIMS
_RELEASE_BATCH = 64  # dropped small results per batched release (Context._release_pending)


def _filled(what: str, value: float, size: Tuple[Any, ...], dtype: Any, device: DeviceLike) -> Tensor:
    kw = {"dtype": dtype, "device": device}
    shape = _size_args(what, size, ("dtype", "device"), kw)
    return _new(get_context(kw["device"]), shape, _dtype_or_f32(kw["dtype"])).fill_(value)


def zeros(*size: Any, dtype: Any = None, device: DeviceLike = None) -> Tensor:
    """A tensor of zeros (sizes as varargs or one sequence; see :func:`empty`)."""
    return _filled("zeros", 0.0, size, dtype, device)


def ones(*size: Any, dtype: Any = None, device: DeviceLike = None) -> Tensor:
    """A tensor of ones (sizes as varargs or one sequence; see :func:`empty`)."""
    return _filled("ones", 1.0, size, dtype, device)


def full(shape: Any, value: float, dtype: Any = "float32", device: DeviceLike = None) -> Tensor:
    """A tensor filled with ``value`` (shape a sequence, as torch.full; see :func:`empty`)."""
    return empty(shape, dtype=dtype, device=device).fill_(value)


def empty_like(t: Tensor, dtype: Any = None, device: DeviceLike = None) -> Tensor:
    """An uninitialised contiguous tensor with t's shape (and dtype/context unless given)."""
    if not isinstance(t, Tensor):
        raise InvalidArgumentTypeError("empty_like needs a gpucore.Tensor, not %s" % type(t).__name__)
    return empty(t.shape, dtype=t.dtype if dtype is None else dtype, device=t.context if device is None else device)


def zeros_like(t: Tensor, dtype: Any = None, device: DeviceLike = None) -> Tensor:
    """Zeros with t's shape (and dtype/context unless given)."""
    return empty_like(t, dtype, device).fill_(0.0)


def ones_like(t: Tensor, dtype: Any = None, device: DeviceLike = None) -> Tensor:
    """Ones with t's shape (and dtype/context unless given)."""
    return empty_like(t, dtype, device).fill_(1.0)


def full_like(t: Tensor, fill_value: float, dtype: Any = None, device: DeviceLike = None) -> Tensor:
    """``fill_value`` with t's shape (and dtype/context unless given), as torch.full_like."""
    return empty_like(t, dtype, device).fill_(fill_value)


def _random_tensor(what: str, dist: int, size: Tuple[Any, ...], dtype: Any, device: DeviceLike,
                   seed: Optional[int]) -> Tensor:
    kw = {"dtype": dtype, "device": device, "seed": seed}
    shape = _size_args(what, size, ("dtype", "device", "seed"), kw)
    t = _new(get_context(kw["device"]), shape, _dtype_or_f32(kw["dtype"]))
    return t._random(dist, 0.0, 1.0, kw["seed"], None, None)


def rand(*size: Any, dtype: Any = None, device: DeviceLike = None, seed: Optional[int] = None) -> Tensor:
    """Uniform [0, 1) numbers (sizes as varargs or one sequence; see Tensor.uniform_)."""
    return _random_tensor("rand", UNIFORM, size, dtype, device, seed)


def randn(*size: Any, dtype: Any = None, device: DeviceLike = None, seed: Optional[int] = None) -> Tensor:
    """Standard normal numbers (sizes as varargs or one sequence; see Tensor.normal_)."""
    return _random_tensor("randn", NORMAL, size, dtype, device, seed)


def tensor(data: Any, dtype: Any = None, device: DeviceLike = None) -> Tensor:
    """A new tensor holding a *copy* of ``data`` (numpy array, nested lists, scalar, Tensor).

    Without ``dtype`` the numpy dtype decides (Python floats become float32, Python
    ints int64). For ``bfloat16``, floats are rounded to nearest even and a uint16
    array is taken as raw bits; fp8 takes uint8 bits only.
    """
    if isinstance(data, Tensor):
        out = data.to(device if device is not None else data.context, copy=True)
        if dtype is not None and _dt.as_dtype(dtype) is not out.dtype:
            raise DtypeMismatchError("tensor(): converting %s to %s is not supported (copies do not convert)"
                                     % (out.dtype.name, _dt.as_dtype(dtype).name))
        return out
    if data is None:
        raise NullPointerError("tensor(): data is None")
    is_nd = isinstance(data, np.ndarray)
    try:
        arr = np.asarray(data)
    except Exception as e:
        raise InvalidArgumentTypeError("tensor(): cannot make an array from %s: %s" % (type(data).__name__, e)) \
            from None
    if dtype is None:
        if arr.dtype == np.float64 and not is_nd:
            arr = arr.astype(np.float32)
        if arr.dtype.kind == "b":
            arr = arr.astype(np.uint8)
        dt = _dt.as_dtype(arr.dtype)
    else:
        dt = _dt.as_dtype(dtype)
        if dt is _dt.bfloat16 and arr.dtype != np.uint16:
            arr = _dt.float32_to_bf16(arr.astype(np.float32))
        elif not dt.exact_numpy and dt is not _dt.bfloat16:
            if dt.value in _dt.VALUE_NUMPY and arr.dtype == _dt.VALUE_NUMPY[dt.value]:
                arr = arr.view(np.uint8)
            if arr.dtype != np.uint8:
                raise DtypeMismatchError("tensor(): %s data must be given as uint8 bits" % dt.long_name)
        elif arr.dtype != dt.numpy:
            arr = arr.astype(dt.numpy)
    out = empty(arr.shape, dt, device)
    src = np.ascontiguousarray(arr)
    C.gpucore_copy_from_host(out.handle, src.ctypes.data or None, src.nbytes)
    return out


def from_numpy(array: np.ndarray, dtype: Any = None, device: DeviceLike = None) -> Tensor:
    """A tensor that *shares* ``array``'s memory (no copy) on a CPU context.

    Writes through either side are seen by the other (after ``synchronize()``, since
    ops are asynchronous). The array is kept alive while any view of the tensor
    lives. Needs a writeable, aligned, native-byte-order array with non-negative
    strides that are multiples of the item size. ``dtype`` may reinterpret bits of
    the same width: ``from_numpy(u16_array, dtype=gpucore.bfloat16)``. ``device``
    defaults to the shared "cpu" context; use :func:`gpucore.tensor` for a copy.
    """
    if not isinstance(array, np.ndarray):
        raise InvalidArgumentTypeError("from_numpy needs a numpy.ndarray, not %s (gpucore.tensor() copies "
                                       "other data)" % type(array).__name__)
    ctx = get_context("cpu" if device is None else device)
    if not ctx.is_cpu:
        raise NotSupportedError("from_numpy shares host memory, but the context is on %s; use "
                                "gpucore.tensor(array, device=...) to copy it there" % ctx.device)
    if dtype is None:
        dt = _dt.as_dtype(array.dtype)
    else:
        dt = _dt.as_dtype(dtype)
        if array.dtype != dt.numpy:
            raise DtypeMismatchError("from_numpy: the array is %s but %s needs numpy %s (no conversion "
                                     "without a copy)" % (array.dtype, dt.long_name, dt.numpy))
        if not array.dtype.isnative:
            raise InvalidArgumentError("from_numpy: the array is not in native byte order")
    if array.ndim > MAX_DIMS:
        raise InvalidArgumentError("from_numpy: the array has %d dims; at most %d" % (array.ndim, MAX_DIMS))
    if not array.flags.writeable:
        raise InvalidArgumentError("from_numpy: the array is read-only and gpucore may write to it; pass "
                                   "array.copy() or use gpucore.tensor(array)")
    if not array.flags.aligned:
        raise InvalidArgumentError("from_numpy: the array is not aligned to its item size")
    isz = dt.itemsize
    strides = []
    for i, (s, n) in enumerate(zip(array.strides, array.shape)):
        if n > 1 and (s < 0 or s % isz):
            raise NotSupportedError("from_numpy: stride %d of dim %d is %s; gpucore needs non-negative strides "
                                    "that are multiples of the item size (%d); pass np.ascontiguousarray(array)"
                                    % (s, i, s, isz))
        strides.append(s // isz if n > 1 else (s // isz if s >= 0 and s % isz == 0 else 0))
    key = register_owner(array)
    out = c_void_p()
    try:
        C.gpucore_tensor_wrap(ctx.handle, dt.value, array.ndim, _i64_array(array.shape), _i64_array(strides),
                              array.ctypes.data or None, DELETER, key, byref(out))
    except BaseException:
        forget_owner(key)
        raise
    return Tensor._adopt(ctx, out.value, foreign=True)
