"""ZeRO: sharded data-parallel training (stages 0-3) over a :class:`Communicator`.

``ZeroTrainer(comm, params, stage=..., lr=...)`` owns the f32 master weights and AdamW
moments of this rank's 1/N shard (stages >= 1), keeps only the local gradient shard
after each bucket's reduce-scatter (stages >= 2) and, at stage 3, the parameters too:
``gather(bucket)`` / ``release(bucket)`` bracket their use and ``param(i)`` reads them.
Per step: ``g = trainer.grad(i)`` (zeros), write or add the gradient into it,
``trainer.mark_ready(i)`` (last parameter first), then ``trainer.step(scaler)``.
See the ``gpucore_zero_*`` block of include/gpucore.h for the full contract.
"""
from __future__ import annotations

import contextlib
import ctypes
from ctypes import byref, c_int, c_int64, c_void_p
from typing import Any, Dict, Iterator, Optional, Sequence, Tuple

from ._lib import C, OptimizerConfig, ZeroOptions, ZeroStats
from ._validate import to_float, to_int
from .context import Stream
from .distributed import Communicator, DDPReducer
from .errors import InvalidArgumentTypeError
from .optim import LossScaler, _Owned, _tensor_list
from .tensor import Tensor

__all__ = ["ZeroTrainer"]

_I32 = (-(1 << 31), (1 << 31) - 1)


class ZeroTrainer(_Owned):
    """A sharded AdamW (or SGD: ``optimizer="sgd"``) trainer over ``comm``.

    stage: 0 (plain data parallel), 1 (optimizer state sharded), 2 (+ gradients), 3 (+ parameters).
    units: optional per-parameter group ids; a bucket never spans two groups (e.g. one
    bucket per layer, so a stage-3 gather holds one layer)."""

    _destroy_fn = "gpucore_zero_destroy"
    _what = "ZeRO trainer"
    _close_order = 1

    def __init__(self, comm: Communicator, params: Sequence[Tensor], stage: int = 1, lr: float = 1e-3,
                 betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2,
                 optimizer: str = "adamw", momentum: float = 0.0, bucket_bytes: Optional[int] = None,
                 max_grad_norm: float = 0.0, average: bool = True, units: Optional[Sequence[int]] = None) -> None:
        self._h: Optional[int] = None
        if not isinstance(comm, Communicator):
            raise InvalidArgumentTypeError("comm must be a gpucore.Communicator, not %s" % type(comm).__name__)
        lst, arr, _ = _tensor_list(params, "params", comm.context)
        self.comm = comm
        self.stage = to_int(stage, "stage", 0, 3)
        self._params = lst if self.stage < 3 else None  # stage 3 copies its shard out at creation
        self._init_owned(comm.context)
        if optimizer not in ("adamw", "sgd"):
            raise InvalidArgumentTypeError("optimizer must be 'adamw' or 'sgd', not %r" % (optimizer,))
        cfg = OptimizerConfig()
        cfg.struct_size = ctypes.sizeof(OptimizerConfig)
        C.gpucore_optimizer_config_default(1 if optimizer == "adamw" else 0, byref(cfg))
        cfg.lr = to_float(lr, "lr")
        cfg.weight_decay = to_float(weight_decay, "weight_decay")
        if optimizer == "adamw":
            cfg.beta1, cfg.beta2 = to_float(betas[0], "betas[0]"), to_float(betas[1], "betas[1]")
            cfg.eps = to_float(eps, "eps")
        else:
            cfg.momentum = to_float(momentum, "momentum")
        o = ZeroOptions()
        C.gpucore_zero_options_default(byref(o))
        o.stage = self.stage
        o.average = 1 if average else 0
        if bucket_bytes is not None:
            o.bucket_bytes = to_int(bucket_bytes, "bucket_bytes", 1)
        o.max_grad_norm = to_float(max_grad_norm, "max_grad_norm")
        unit_arr = None
        if units is not None:
            if len(units) != len(lst):
                raise InvalidArgumentTypeError("units must have one entry per parameter (%d), not %d"
                                               % (len(lst), len(units)))
            unit_arr = (ctypes.c_int32 * len(lst))(*[to_int(u, "units[i]", *_I32) for u in units])
            o.units = ctypes.cast(unit_arr, ctypes.POINTER(ctypes.c_int32))
        h = c_void_p()
        C.gpucore_zero_create(comm.handle, arr, len(lst), byref(cfg), byref(o), byref(h))
        self._h = h.value
        self.count = len(lst)

    def _s(self, stream: Optional[Stream]) -> Optional[int]:
        return self._ctx._stream_arg(stream)

    def _i(self, i: int, what: str = "param") -> int:
        return to_int(i, what, *_I32)

    @property
    def bucket_count(self) -> int:
        n = c_int()
        C.gpucore_zero_bucket_count(self.handle, byref(n))
        return n.value

    def bucket_info(self, bucket: int) -> Tuple[int, int, int, int]:
        """(param_begin, param_end, numel, shard) of bucket ``bucket``."""
        b, e, n, s = c_int(), c_int(), c_int64(), c_int64()
        C.gpucore_zero_bucket_info(self.handle, self._i(bucket, "bucket"), byref(b), byref(e), byref(n), byref(s))
        return b.value, e.value, n.value, s.value

    def bucket_of(self, param: int) -> int:
        b = c_int()
        C.gpucore_zero_bucket_of(self.handle, self._i(param), byref(b))
        return b.value

    def grad(self, param: int, stream: Optional[Stream] = None) -> Tensor:
        """The gradient buffer of ``param`` to write or add into (zeros at the start of a round).
        Stages 2/3: drop it after :meth:`mark_ready` (holding it keeps the bucket's memory)."""
        out = c_void_p()
        C.gpucore_zero_grad(self.handle, self._i(param), self._s(stream), byref(out))
        return Tensor._borrow(self._ctx, out.value)

    def mark_ready(self, param: int, stream: Optional[Stream] = None) -> None:
        """Gradient ``param`` is complete; a complete bucket's reduce-scatter starts at once."""
        C.gpucore_zero_mark_ready(self.handle, self._i(param), self._s(stream))

    def set_no_sync(self, no_sync: bool) -> None:
        C.gpucore_zero_set_no_sync(self.handle, 1 if no_sync else 0)

    # ``with trainer.no_sync():`` accumulates locally inside the block (stages 0/1; stages 2/3
    # reduce every micro-batch): the reducer's context manager, over set_no_sync.
    no_sync = DDPReducer.no_sync

    def step(self, scaler: Optional[LossScaler] = None, stream: Optional[Stream] = None) -> None:
        """Average, unscale (scaler), clip (max_grad_norm), step the shards and put the new
        parameters in place. Call ``scaler.update()`` afterwards as usual."""
        if scaler is not None and not isinstance(scaler, LossScaler):
            raise InvalidArgumentTypeError("scaler must be a gpucore.LossScaler or None")
        C.gpucore_zero_step(self.handle, scaler.handle if scaler is not None else None, self._s(stream))

    def grad_norm(self) -> Tensor:
        """The last step's global gradient norm (0-d f32, before clipping; needs max_grad_norm > 0)."""
        out = c_void_p()
        C.gpucore_zero_grad_norm(self.handle, byref(out))
        return Tensor._borrow(self._ctx, out.value)

    @property
    def lr_tensor(self) -> Tensor:
        """The device-resident learning rate of the trainer's optimizer (write it to schedule)."""
        opt, out = c_void_p(), c_void_p()
        C.gpucore_zero_optimizer(self.handle, byref(opt))
        C.gpucore_optimizer_lr(opt.value, byref(out))
        return Tensor._borrow(self._ctx, out.value)

    def gather(self, bucket: int) -> None:
        """Stage 3: all-gather bucket ``bucket``'s parameters (on the comm stream; issue the next
        one early to overlap). No-op at stages 0-2."""
        C.gpucore_zero_gather(self.handle, self._i(bucket, "bucket"))

    def release(self, bucket: int, stream: Optional[Stream] = None) -> None:
        """Stage 3: free the gathered parameters after the work queued on ``stream``."""
        C.gpucore_zero_release(self.handle, self._i(bucket, "bucket"), self._s(stream))

    @contextlib.contextmanager
    def gathered(self, bucket: int, prefetch: Optional[int] = None) -> Iterator[None]:
        """``with trainer.gathered(b, prefetch=next_b):`` parameters of b are readable inside."""
        self.gather(bucket)
        if prefetch is not None:
            self.gather(prefetch)
        try:
            yield
        finally:
            if self._h is not None:
                self.release(bucket)

    def param(self, param: int, stream: Optional[Stream] = None) -> Tensor:
        """Parameter ``param``: the caller's tensor (stages 0-2) or a view into its gathered bucket
        (stage 3; valid until release)."""
        if self._params is not None:
            return self._params[self._i(param)]
        out = c_void_p()
        C.gpucore_zero_param(self.handle, self._i(param), self._s(stream), byref(out))
        return Tensor._borrow(self._ctx, out.value)

    def bind_checkpoint(self, executor: Any, params: Sequence[Tensor], grads: Sequence[Optional[Tensor]],
                        bucket_of_segment: Optional[Sequence[int]] = None) -> None:
        """Run ``executor``'s built-in segments (linear, layer norm, attention and MLP blocks)
        under this trainer: ``params[i]`` / ``grads[i]`` are the tensors bound to the segments
        as parameter i and its gradient (the list given at creation; None for no gradient).
        Segments then read parameters through :meth:`param` and write gradients into
        :meth:`grad`, marked ready as the segments announce them. ``bucket_of_segment`` (one
        bucket, or -1, per top-level segment) also installs the hook that gathers a segment's
        bucket around its forward, recompute and backward (needed at stage 3). The bound
        tensors are keys only afterwards (at stage 3 they may be dropped)."""
        from .checkpoint import CheckpointExecutor
        if not isinstance(executor, CheckpointExecutor):
            raise InvalidArgumentTypeError("executor must be a gpucore.CheckpointExecutor")
        if len(params) != self.count or len(grads) != self.count:
            raise InvalidArgumentTypeError("params and grads need %d entries each" % self.count)
        ps = (c_void_p * self.count)(*[p.handle for p in params])
        gs = (c_void_p * self.count)(*[None if g is None else g.handle for g in grads])
        C.gpucore_zero_bind_ckpt(self.handle, executor.handle, ps, gs)
        self._bound = executor  # the executor must not outlive our use of it
        if bucket_of_segment is not None:
            arr = (ctypes.c_int32 * len(bucket_of_segment))(*[to_int(b, "bucket", *_I32) for b in bucket_of_segment])
            C.gpucore_zero_attach_ckpt(self.handle, executor.handle, arr, len(bucket_of_segment))

    def stats(self) -> Dict[str, int]:
        """Bytes this rank holds: param_bytes, grad_bytes, state_bytes, live_grad_bytes,
        gathered_bytes, and numel, shard_numel, stage, rank, size, buckets."""
        s = ZeroStats()
        s.struct_size = ctypes.sizeof(ZeroStats)
        C.gpucore_zero_get_stats(self.handle, byref(s))
        return {k: getattr(s, k) for k, _ in ZeroStats._fields_ if k != "struct_size"}

    def save_sharded(self, prefix: str, scaler: Optional[LossScaler] = None) -> None:
        """Every rank: ``<prefix>.rank<r>.safetensors`` + (rank 0) ``<prefix>.index.json``."""
        C.gpucore_zero_save_sharded(self.handle, prefix.encode(), scaler.handle if scaler else None)

    def load_sharded(self, prefix: str, scaler: Optional[LossScaler] = None) -> None:
        C.gpucore_zero_load_sharded(self.handle, prefix.encode(), scaler.handle if scaler else None)

    def _names(self, names: Sequence[str]) -> Any:
        if len(names) != self.count:
            raise InvalidArgumentTypeError("names must have one entry per parameter (%d)" % self.count)
        return (ctypes.c_char_p * self.count)(*[n.encode() for n in names])

    def save_consolidated(self, path: str, names: Sequence[str], scaler: Optional[LossScaler] = None) -> None:
        """Every rank calls; rank 0 writes the full parameters and f32 state to one file."""
        C.gpucore_zero_save_consolidated(self.handle, path.encode(), self._names(names),
                                         scaler.handle if scaler else None)

    def load_consolidated(self, path: str, names: Sequence[str], scaler: Optional[LossScaler] = None) -> None:
        C.gpucore_zero_load_consolidated(self.handle, path.encode(), self._names(names),
                                         scaler.handle if scaler else None)
