"""Collective communication and the DDP gradient reducer.

Communicators join ranks: NCCL on CUDA contexts, MPI on CPU contexts.

* ``Communicator.from_mpi(ctx)`` — under mpirun/srun, every process (rank and size
  from MPI).
* ``Communicator.local([ctx0, ctx1, ...])`` — one process driving several devices
  (on the CPU backend only one: a 1-rank communicator that needs no MPI).
* ``unique_id(ctx)`` + ``Communicator(ctx, id, rank, size)`` — any launcher (CUDA).

Collectives run on the communicator's own stream, ordered after the work already on
``stream`` (None: current), and later work on ``stream`` waits for them.
:class:`DDPReducer` does bucketed gradient allreduce overlapping backward.
"""
from __future__ import annotations

import contextlib
import ctypes
from ctypes import byref, c_int, c_int64, c_void_p
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from ._lib import C, DdpOptions, DdpTraceEvent
from ._validate import to_float, to_int
from .context import Context, Stream
from .errors import InvalidArgumentError, InvalidArgumentTypeError
from .optim import _Owned, _tensor_list
from .tensor import Tensor

__all__ = ["Communicator", "unique_id", "comm_group", "DDPReducer", "COMM_ID_BYTES"]

COMM_ID_BYTES = 128
_OPS = {"sum": 0, "avg": 1, "mean": 1, "max": 2, "min": 3}
_TRACE_KINDS = ("ready", "launch", "start", "done", "finish")


def _op(op: str) -> int:
    if op not in _OPS:
        raise InvalidArgumentError("op must be one of 'sum', 'avg', 'max', 'min', not %r" % (op,))
    return _OPS[op]


def _t(t: Any, what: str) -> Tensor:
    if not isinstance(t, Tensor):
        raise InvalidArgumentTypeError("%s must be a gpucore.Tensor, not %s" % (what, type(t).__name__))
    return t


def unique_id(ctx: Context) -> bytes:
    """A new communicator id (CUDA/NCCL): ship it to every rank, then ``Communicator(ctx, id, rank, size)``."""
    if not isinstance(ctx, Context):
        raise InvalidArgumentTypeError("unique_id: ctx must be a gpucore.Context, not %s" % type(ctx).__name__)
    buf = ctypes.create_string_buffer(COMM_ID_BYTES)
    C.gpucore_comm_unique_id(ctx.handle, buf, COMM_ID_BYTES)
    return buf.raw


@contextlib.contextmanager
def comm_group() -> Iterator[None]:
    """``with comm_group():`` issue one round of collectives on several local communicators
    from one thread (NCCL group; avoids deadlock)."""
    C.gpucore_comm_group_start()
    try:
        yield
    finally:
        C.gpucore_comm_group_end()


class Communicator(_Owned):
    """A communicator (see the module docstring for the ways to make one).

    Attributes: ``rank``, ``size``, ``context``, ``stream`` (its own). Collectives:
    :meth:`all_reduce`, :meth:`reduce_scatter`, :meth:`all_gather`, :meth:`broadcast`,
    :meth:`barrier`; each returns its sequence number, which :meth:`wait` takes.
    Tensors are contiguous, f32/f64/f16/bf16/i32, and every rank passes the same."""

    _destroy_fn = "gpucore_comm_destroy"
    _what = "communicator"
    _close_order = 2

    def __init__(self, ctx: Context, id: bytes, rank: int, size: int) -> None:  # noqa: A002
        self._h: Optional[int] = None
        if not isinstance(id, (bytes, bytearray)) or len(id) != COMM_ID_BYTES:
            raise InvalidArgumentError("id must be the %d bytes unique_id() returned" % COMM_ID_BYTES)
        self._init_owned(ctx)
        h = c_void_p()
        C.gpucore_comm_create(ctx.handle, bytes(id), COMM_ID_BYTES, to_int(rank, "rank", 0, 1 << 30),
                              to_int(size, "size", 1, 1 << 30), byref(h))
        self._h = h.value

    @classmethod
    def _adopt(cls, ctx: Context, h: int) -> "Communicator":
        c = cls.__new__(cls)
        c._h = None
        c._init_owned(ctx)
        c._h = h
        return c

    @classmethod
    def from_mpi(cls, ctx: Context) -> "Communicator":
        """Every process of MPI_COMM_WORLD calls this (under mpirun/srun); NotSupportedError without MPI."""
        h = c_void_p()
        C.gpucore_comm_create_mpi(ctx.handle, byref(h))
        return cls._adopt(ctx, h.value)

    @classmethod
    def local(cls, ctxs: Sequence[Context]) -> List["Communicator"]:
        """One communicator per context (rank i on ctxs[i]; distinct CUDA devices, or one CPU context)."""
        if isinstance(ctxs, Context):
            ctxs = [ctxs]
        lst = list(ctxs)
        for i, c in enumerate(lst):
            if not isinstance(c, Context):
                raise InvalidArgumentTypeError("ctxs[%d] must be a gpucore.Context" % i)
        if not lst:
            raise InvalidArgumentError("Communicator.local needs at least one context")
        arr = (c_void_p * len(lst))(*[c.handle for c in lst])
        out = (c_void_p * len(lst))()
        C.gpucore_comm_create_local(arr, len(lst), out)
        return [cls._adopt(c, out[i]) for i, c in enumerate(lst)]

    @property
    def rank(self) -> int:
        return int(C.gpucore_comm_rank(self.handle))

    @property
    def size(self) -> int:
        return int(C.gpucore_comm_size(self.handle))

    @property
    def context(self) -> Context:
        return self._ctx

    @property
    def stream(self) -> Stream:
        """The communicator's own stream (owned by it)."""
        h = c_void_p()
        C.gpucore_comm_stream(self.handle, byref(h))
        return Stream._wrap_existing(self._ctx, h.value)

    def set_timeout(self, seconds: float) -> None:
        """Seconds a collective may run before the communicator is failed (> 0)."""
        C.gpucore_comm_set_timeout(self.handle, to_float(seconds, "seconds"))

    def _s(self, stream: Optional[Stream]) -> Optional[int]:
        return self._ctx._stream_arg(stream)

    def all_reduce(self, tensor: Tensor, op: str = "sum", out: Optional[Tensor] = None,
                   stream: Optional[Stream] = None) -> int:
        """out = op over ranks of tensor (in place when out is None). op: sum, avg, max, min."""
        t = _t(tensor, "tensor")
        o = t if out is None else _t(out, "out")
        C.gpucore_comm_allreduce(self.handle, o.handle, t.handle, _op(op), self._s(stream))
        return self.last_sequence

    def reduce_scatter(self, out: Tensor, input: Tensor, op: str = "sum", stream: Optional[Stream] = None) -> int:
        """out = the rank-th slice of the reduction of input (size * numel(out) elements)."""
        C.gpucore_comm_reduce_scatter(self.handle, _t(out, "out").handle, _t(input, "input").handle, _op(op),
                                      self._s(stream))
        return self.last_sequence

    def all_gather(self, out: Tensor, input: Tensor, stream: Optional[Stream] = None) -> int:
        """out (size * numel(input) elements) = every rank's input, rank r at slice r."""
        C.gpucore_comm_all_gather(self.handle, _t(out, "out").handle, _t(input, "input").handle, self._s(stream))
        return self.last_sequence

    def broadcast(self, tensor: Tensor, root: int = 0, out: Optional[Tensor] = None,
                  stream: Optional[Stream] = None) -> int:
        """out = root's tensor on every rank (in place when out is None)."""
        t = _t(tensor, "tensor")
        o = t if out is None else _t(out, "out")
        C.gpucore_comm_broadcast(self.handle, o.handle, t.handle, to_int(root, "root", 0, 1 << 30), self._s(stream))
        return self.last_sequence

    def barrier(self, stream: Optional[Stream] = None) -> int:
        """Work queued on ``stream`` afterwards waits until every rank reached it."""
        C.gpucore_comm_barrier(self.handle, self._s(stream))
        return self.last_sequence

    @property
    def last_sequence(self) -> int:
        """Sequence number of the last collective issued (0: none yet)."""
        return int(C.gpucore_comm_last_sequence(self.handle))

    def wait(self, seq: int = 0, timeout: Optional[float] = None) -> None:
        """Block until collective ``seq`` (0: all issued) completed. CommError if the communicator
        failed; GpucoreTimeoutError if ``timeout`` seconds passed first (it may be waited on again)."""
        C.gpucore_comm_wait(self.handle, to_int(seq, "seq", 0), -1.0 if timeout is None else
                            to_float(timeout, "timeout"))


class DDPReducer(_Owned):
    """DDP-style bucketed allreduce of gradients (registered in parameter order; bucket 0 holds
    the last ones, which backward makes first). During backward call :meth:`mark_ready(i)`
    as gradient i is done; full buckets are reduced at once, overlapping the rest of backward;
    :meth:`finish` writes the averaged (or summed) values back into the gradients, ordered by
    events (no host wait); :meth:`grad_view` lets a gradient live in its bucket instead.
    ``with reducer.no_sync():`` accumulates locally (gradient accumulation)."""

    _destroy_fn = "gpucore_ddp_destroy"
    _what = "DDP reducer"
    _close_order = 1

    def __init__(self, comm: Communicator, grads: Sequence[Tensor], first_bucket_bytes: Optional[int] = None,
                 bucket_bytes: Optional[int] = None, wire_dtype: Any = None, average: bool = True,
                 trace: bool = False) -> None:
        self._h: Optional[int] = None
        if not isinstance(comm, Communicator):
            raise InvalidArgumentTypeError("comm must be a gpucore.Communicator, not %s" % type(comm).__name__)
        lst, arr, _ = _tensor_list(grads, "grads", comm.context)
        self.grads = lst
        self.comm = comm
        self._init_owned(comm.context)
        o = DdpOptions()
        C.gpucore_ddp_options_default(byref(o))
        if first_bucket_bytes is not None:
            o.first_bucket_bytes = to_int(first_bucket_bytes, "first_bucket_bytes", 1)
        if bucket_bytes is not None:
            o.bucket_bytes = to_int(bucket_bytes, "bucket_bytes", 1)
        if wire_dtype is not None:
            from .dtypes import as_dtype
            o.wire_dtype = as_dtype(wire_dtype).value
        o.average = 1 if average else 0
        o.trace = 1 if trace else 0
        h = c_void_p()
        C.gpucore_ddp_create(comm.handle, arr, len(lst), byref(o), byref(h))
        self._h = h.value

    @property
    def bucket_count(self) -> int:
        n = c_int()
        C.gpucore_ddp_bucket_count(self.handle, byref(n))
        return n.value

    def bucket_info(self, bucket: int) -> Tuple[int, int, int]:
        """(grad_begin, grad_end, bytes) of bucket ``bucket``."""
        b, e, n = c_int(), c_int(), c_int64()
        C.gpucore_ddp_bucket_info(self.handle, to_int(bucket, "bucket", -(1 << 31), (1 << 31) - 1), byref(b),
                                  byref(e), byref(n))
        return b.value, e.value, n.value

    def set_no_sync(self, no_sync: bool) -> None:
        """True: following steps only accumulate locally; False: synchronise again."""
        C.gpucore_ddp_set_no_sync(self.handle, 1 if no_sync else 0)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Accumulate locally inside the block (like DDP.no_sync)."""
        self.set_no_sync(True)
        try:
            yield
        finally:
            if self._h is not None:
                self.set_no_sync(False)

    def mark_ready(self, grad: int, stream: Optional[Stream] = None) -> None:
        """Gradient ``grad`` (its index) is complete on ``stream``."""
        C.gpucore_ddp_mark_ready(self.handle, to_int(grad, "grad", -(1 << 31), (1 << 31) - 1),
                                 self._ctx._stream_arg(stream))

    def finish(self, stream: Optional[Stream] = None) -> None:
        """Queue the copy of every bucket's result back into the gradients on ``stream``, ordered
        after the reductions by events (the host does not wait: reading the gradients on that
        stream, or synchronizing it, does)."""
        C.gpucore_ddp_finish(self.handle, self._ctx._stream_arg(stream))

    def grad_view(self, grad: int) -> Tensor:
        """A view of gradient ``grad``'s place in its bucket, holding its current value (like
        DDP's gradient_as_bucket_view). From then on the view is that gradient: write it there;
        mark_ready reduces it in place and finish leaves the result in it (no copies)."""
        h = c_void_p()
        C.gpucore_ddp_grad_view(self.handle, to_int(grad, "grad", -(1 << 31), (1 << 31) - 1), byref(h))
        return Tensor._adopt(self._ctx, h.value)

    def trace(self, max_events: int = 4096) -> List[Dict[str, Any]]:
        """Events recorded since the last call (trace=True): dicts with kind ("ready", "launch",
        "start", "done", "finish"), index, step, time_ns."""
        cap = to_int(max_events, "max_events", 1, 1 << 24)
        arr = (DdpTraceEvent * cap)()
        n = c_int()
        C.gpucore_ddp_trace(self.handle, arr, cap, byref(n))
        out = []
        for e in arr[:min(n.value, cap)]:
            kind = _TRACE_KINDS[e.kind] if 0 <= e.kind < len(_TRACE_KINDS) else e.kind
            out.append({"kind": kind, "index": e.index, "step": e.step, "time_ns": e.time_ns})
        return out
