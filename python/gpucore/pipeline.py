"""Layers on several devices: a GPipe pipeline over checkpoint executors (``gpucore_pipeline_*``).

Each stage is a :class:`CheckpointExecutor` on its own context (``cuda:0``, ``cuda:1``;
several CPU contexts on the CPU backend) holding consecutive layers; stage s's output
is stage s+1's input::

    s0 = gpucore.CheckpointExecutor(ctx0); s0.add_linear(...)      # weights on ctx0
    s1 = gpucore.CheckpointExecutor(ctx1); s1.add_linear(...)      # weights on ctx1
    pipe = gpucore.Pipeline([s0, s1])
    pipe.step(x, micro_batches=4, loss=lambda m, y, dy: ...)       # write dL/dy into dy

``step`` splits x along dim 0 into micro-batches, runs every forward (fill) and then
every backward (drain) without host waits, moving activations and gradients between
contexts on streams; the parameter gradients (summed over micro-batches in a fixed
order) land in the tensors given to the segments. See the ``gpucore_pipeline_*`` block
of include/gpucore.h for the full contract (memory: GPipe's re-materialisation).
An exception raised by ``loss`` is raised again from :meth:`Pipeline.step`, chained to
the library's error naming the stage and micro-batch.
"""
from __future__ import annotations

from ctypes import byref, c_void_p
from typing import Any, Callable, Optional, Sequence

from ._lib import C, PIPELINE_LOSS_FN
from ._validate import to_int
from .checkpoint import CheckpointExecutor, _release, _status_of
from .errors import GpucoreError, InvalidArgumentTypeError
from .optim import _Owned
from .tensor import Tensor

__all__ = ["Pipeline"]


class Pipeline(_Owned):
    """GPipe-style pipeline over ``stages`` (distinct executors, in order; they must stay open
    while the pipeline is used)."""

    _destroy_fn = "gpucore_pipeline_destroy"
    _what = "pipeline"
    _close_order = -1  # before the executors it wraps

    def __init__(self, stages: Sequence[CheckpointExecutor]) -> None:
        self._h: Optional[int] = None
        stages = list(stages)
        if not stages or not all(isinstance(s, CheckpointExecutor) for s in stages):
            raise InvalidArgumentTypeError("stages must be a non-empty list of gpucore.CheckpointExecutor")
        self._init_owned(stages[0]._ctx)
        self._stages = stages
        arr = (c_void_p * len(stages))(*[s.handle for s in stages])
        h = c_void_p()
        C.gpucore_pipeline_create(arr, len(stages), byref(h))
        self._h = h.value

    @property
    def stages(self) -> Sequence[CheckpointExecutor]:
        return tuple(self._stages)

    def step(self, x: Tensor, micro_batches: int, loss: Callable[[int, Tensor, Tensor], None],
             dx: Optional[Tensor] = None) -> Optional[Tensor]:
        """One training step. ``loss(m, y, dy)`` is called once per micro-batch with its
        last-stage output y and must write dL/dy into dy (both valid only during the call).
        dx: None, or a tensor of x's shape on stage 0's context receiving the input gradient.
        Returns dx. Work is queued; nothing waits for it."""
        if not isinstance(x, Tensor):
            raise InvalidArgumentTypeError("x must be a gpucore.Tensor, not %s" % type(x).__name__)
        if dx is not None and not isinstance(dx, Tensor):
            raise InvalidArgumentTypeError("dx must be a gpucore.Tensor or None")
        if not callable(loss):
            raise InvalidArgumentTypeError("loss must be callable")
        last = self._stages[-1]._ctx
        caught: list = []

        def f(user: Any, m: int, y: int, dy: int, stream: Any) -> int:
            ty = tdy = None
            try:
                ty = Tensor._borrow(last, y)
                tdy = Tensor._borrow(last, dy)
                loss(int(m), ty, tdy)
                return 0
            except BaseException as e:
                if not caught:
                    caught.append(e)
                return _status_of(e)
            finally:
                _release(ty)
                _release(tdy)

        cb = PIPELINE_LOSS_FN(f)
        try:
            C.gpucore_pipeline_step(self.handle, x.handle, to_int(micro_batches, "micro_batches"), cb, None,
                                    None if dx is None else dx.handle)
        except GpucoreError as err:
            if caught:
                raise caught[0] from err
            raise
        return dx
