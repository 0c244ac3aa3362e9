"""Fused optimizers (SGD, AdamW), dynamic loss scaling and gradient clipping.

A training step built from these needs no host synchronisation: the learning rate,
the step counter, the loss scale and the found-inf flag live in device memory (0-d
tensors the ops read and write on the stream)::

    opt = gpucore.AdamW(params, lr=1e-3)          # bf16 params get f32 master weights
    scaler = gpucore.LossScaler(ctx)
    ... loss * scaler.scale -> backward -> grads ...
    scaler.unscale_(grads)
    gpucore.clip_grad_norm_(grads, 1.0)
    opt.step(grads, found_inf=scaler.found_inf)   # skipped on overflow
    scaler.update()

There is no autograd: you pass the gradients (same shapes as the parameters; their
dtype or f32) to :meth:`Optimizer.step`.
"""
from __future__ import annotations

import ctypes
from ctypes import byref, c_void_p
from typing import Any, List, Mapping, Optional, Sequence, Tuple

from ._lib import C, LossScalerConfig, OptimizerConfig
from ._validate import to_float, to_int
from .context import Context, Stream
from .errors import InvalidArgumentError, InvalidArgumentTypeError, InvalidHandleError, NullPointerError
from .tensor import Tensor, empty

__all__ = ["Optimizer", "SGD", "AdamW", "LossScaler", "clip_grad_norm_"]


def _tensor_list(ts: Any, what: str, ctx: Optional[Context] = None) -> Tuple[List[Tensor], Any, Context]:
    """(list, ctypes array of handles, context) of a non-empty sequence of tensors on one context."""
    if ts is None:
        raise NullPointerError("%s is None; give a list of gpucore.Tensor" % what)
    if isinstance(ts, Tensor):
        ts = [ts]
    elif isinstance(ts, Mapping):  # name -> tensor (gpucore.models' trainable_parameters() / gradients())
        ts = list(ts.values())
    try:
        lst = list(ts)
    except TypeError:
        raise InvalidArgumentTypeError("%s must be a list of gpucore.Tensor, not %s" % (what, type(ts).__name__)) \
            from None
    for i, t in enumerate(lst):
        if not isinstance(t, Tensor):
            raise InvalidArgumentTypeError("%s[%d] must be a gpucore.Tensor, not %s" % (what, i, type(t).__name__))
    if not lst:
        raise InvalidArgumentError("%s is empty" % what)
    c = ctx if ctx is not None else lst[0].context
    arr = (c_void_p * len(lst))(*[t.handle for t in lst])
    return lst, arr, c


class _Owned:
    """A library object bound to a context, destroyed before the context is."""

    _destroy_fn = ""
    _what = "object"
    _close_order = 10

    def _init_owned(self, ctx: Context) -> None:
        self._ctx = ctx
        ctx._others.add(self)

    @property
    def handle(self) -> int:
        h = getattr(self, "_h", None)
        if h is None:
            raise InvalidHandleError("the %s was closed (or its context was)" % self._what)
        self._ctx.handle
        return h

    def close(self) -> None:
        """Destroy the library object now (idempotent); tensors obtained from it stay valid."""
        h, self._h = getattr(self, "_h", None), None
        if h is not None and not self._ctx.closed:
            getattr(C, self._destroy_fn)(h)

    def _context_closing(self) -> None:
        h, self._h = getattr(self, "_h", None), None
        if h is not None:
            getattr(C, "raw_" + self._destroy_fn)(h)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if getattr(self, "_h", None) is not None and not self._ctx.closed:
                self.close()
        except Exception:
            pass


class Optimizer(_Owned):
    """A fused multi-tensor optimizer over a fixed list of parameter tensors (contiguous,
    f32/f16/bf16, one context). f16/bf16 parameters get an f32 master copy that the step
    updates (the parameter receives it rounded) — mixed precision without extra code.
    The parameters must stay alive as long as the optimizer (it keeps references)."""

    _destroy_fn = "gpucore_optimizer_destroy"
    _what = "optimizer"
    _close_order = 5

    def __init__(self, params: Sequence[Tensor], config: OptimizerConfig) -> None:
        self._h: Optional[int] = None
        lst, arr, ctx = _tensor_list(params, "params")
        self.params = lst
        self._init_owned(ctx)
        h = c_void_p()
        C.gpucore_optimizer_create(ctx.handle, byref(config), arr, len(lst), byref(h))
        self._h = h.value
        self.config = config
        self._lr_t: Optional[Tensor] = None

    def step(self, grads: Sequence[Tensor], found_inf: Optional[Tensor] = None,
             stream: Optional[Stream] = None) -> None:
        """One fused update of every parameter from ``grads`` (same order and shapes; the
        parameter's dtype or f32). ``found_inf``: a 0-d f32 tensor (a LossScaler's); when it is
        non-zero at the time the step runs, nothing changes (not even the step counter)."""
        lst, arr, _ = _tensor_list(grads, "grads", self._ctx)
        if found_inf is not None and not isinstance(found_inf, Tensor):
            if isinstance(found_inf, LossScaler):
                found_inf = found_inf.found_inf
            else:
                raise InvalidArgumentTypeError("found_inf must be a gpucore.Tensor, a LossScaler or None")
        C.gpucore_optimizer_step(self.handle, arr, len(lst), None if found_inf is None else found_inf.handle,
                                 self._ctx._stream_arg(stream))

    @property
    def lr_tensor(self) -> Tensor:
        """The device-resident 0-d f32 learning rate (write it to schedule without a host sync)."""
        h = c_void_p()
        C.gpucore_optimizer_lr(self.handle, byref(h))
        return Tensor._borrow(self._ctx, h.value)

    @property
    def lr(self) -> float:
        """The learning rate (reads the device value; setting it fills the device tensor)."""
        return float(self.lr_tensor.item())

    @lr.setter
    def lr(self, value: float) -> None:
        self.lr_tensor.fill_(to_float(value, "lr"))

    @property
    def step_count(self) -> int:
        """Steps taken (read from the device counter)."""
        h = c_void_p()
        C.gpucore_optimizer_step_count(self.handle, byref(h))
        return int(Tensor._borrow(self._ctx, h.value).item())

    def __len__(self) -> int:
        return int(C.gpucore_optimizer_param_count(self.handle))

    def state(self, index: int, name: str) -> Tensor:
        """State tensor ``name`` of parameter ``index``: "exp_avg", "exp_avg_sq" (AdamW),
        "momentum_buffer" (SGD with momentum), "master" (f16/bf16 parameters). A view: writes
        change the optimizer's state."""
        if not isinstance(name, str):
            raise InvalidArgumentTypeError("name must be a string, not %s" % type(name).__name__)
        h = c_void_p()
        C.gpucore_optimizer_state(self.handle, to_int(index, "index"), name.encode(), byref(h))
        return Tensor._borrow(self._ctx, h.value)


class SGD(Optimizer):
    """torch.optim.SGD: momentum, dampening, Nesterov, L2 weight decay (see :class:`Optimizer`)."""

    def __init__(self, params: Sequence[Tensor], lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False) -> None:
        cfg = OptimizerConfig()
        cfg.struct_size = ctypes.sizeof(OptimizerConfig)
        C.gpucore_optimizer_config_default(0, byref(cfg))
        cfg.lr = to_float(lr, "lr")
        cfg.momentum = to_float(momentum, "momentum")
        cfg.dampening = to_float(dampening, "dampening")
        cfg.weight_decay = to_float(weight_decay, "weight_decay")
        cfg.nesterov = 1 if nesterov else 0
        super().__init__(params, cfg)


class AdamW(Optimizer):
    """torch.optim.AdamW: bias correction, decoupled weight decay (see :class:`Optimizer`)."""

    def __init__(self, params: Sequence[Tensor], lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2) -> None:
        cfg = OptimizerConfig()
        cfg.struct_size = ctypes.sizeof(OptimizerConfig)
        C.gpucore_optimizer_config_default(1, byref(cfg))
        cfg.lr = to_float(lr, "lr")
        try:
            b1, b2 = betas
        except (TypeError, ValueError):
            raise InvalidArgumentTypeError("betas must be a pair of floats, not %r" % (betas,)) from None
        cfg.beta1 = to_float(b1, "betas[0]")
        cfg.beta2 = to_float(b2, "betas[1]")
        cfg.eps = to_float(eps, "eps")
        cfg.weight_decay = to_float(weight_decay, "weight_decay")
        super().__init__(params, cfg)


class LossScaler(_Owned):
    """Dynamic loss scaling (torch.amp.GradScaler's rule), all on the device.

    Per step: multiply the loss (or its gradient) by :attr:`scale` ->
    backward -> :meth:`unscale_` (grads /= scale; found_inf = any Inf/NaN) ->
    ``opt.step(grads, found_inf=scaler.found_inf)`` -> :meth:`update` (halve on overflow,
    double after ``growth_interval`` clean steps)."""

    _destroy_fn = "gpucore_loss_scaler_destroy"
    _what = "loss scaler"
    _close_order = 5

    def __init__(self, device: Any = None, init_scale: float = 65536.0, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000) -> None:
        from .context import get_context
        self._h: Optional[int] = None
        ctx = get_context(device)
        self._init_owned(ctx)
        cfg = LossScalerConfig()
        cfg.struct_size = ctypes.sizeof(LossScalerConfig)
        C.gpucore_loss_scaler_config_default(byref(cfg))
        cfg.init_scale = to_float(init_scale, "init_scale")
        cfg.growth_factor = to_float(growth_factor, "growth_factor")
        cfg.backoff_factor = to_float(backoff_factor, "backoff_factor")
        cfg.growth_interval = to_int(growth_interval, "growth_interval")
        h = c_void_p()
        C.gpucore_loss_scaler_create(ctx.handle, byref(cfg), byref(h))
        self._h = h.value

    def _get(self, fn: str) -> Tensor:
        h = c_void_p()
        getattr(C, fn)(self.handle, byref(h))
        return Tensor._borrow(self._ctx, h.value)

    @property
    def scale_tensor(self) -> Tensor:
        """The 0-d f32 scale on the device (multiply the loss gradient by it)."""
        return self._get("gpucore_loss_scaler_scale")

    @property
    def scale(self) -> float:
        """The current scale (reads the device value)."""
        return float(self.scale_tensor.item())

    @property
    def found_inf(self) -> Tensor:
        """The 0-d f32 flag (0 or 1) set by :meth:`unscale_`; pass it to ``Optimizer.step``."""
        return self._get("gpucore_loss_scaler_found_inf")

    @property
    def growth_tracker(self) -> Tensor:
        """The 0-d i32 count of clean steps in a row."""
        return self._get("gpucore_loss_scaler_growth_tracker")

    def unscale_(self, grads: Sequence[Tensor], stream: Optional[Stream] = None) -> None:
        """grads *= 1/scale in place; found_inf = 1 if any gradient holds Inf or NaN."""
        lst, arr, _ = _tensor_list(grads, "grads", self._ctx)
        C.gpucore_loss_scaler_unscale(self.handle, arr, len(lst), self._ctx._stream_arg(stream))

    def update(self, stream: Optional[Stream] = None) -> None:
        """Back off on overflow, else count a clean step (and grow after growth_interval)."""
        C.gpucore_loss_scaler_update(self.handle, self._ctx._stream_arg(stream))


def clip_grad_norm_(grads: Sequence[Tensor], max_norm: float, return_coef: bool = False,
                    stream: Optional[Stream] = None) -> Any:
    """Scale every gradient in place by min(1, max_norm / (total_norm + 1e-6)), total_norm the
    global L2 norm (torch.nn.utils.clip_grad_norm_; deterministic). Returns total_norm as a 0-d
    f32 tensor on the device (no host sync), or (total_norm, clip_coef) with return_coef."""
    lst, arr, ctx = _tensor_list(grads, "grads")
    total = empty((), "float32", device=ctx)
    coef = empty((), "float32", device=ctx) if return_coef else None
    C.gpucore_clip_grad_norm(arr, len(lst), to_float(max_norm, "max_norm"), total.handle,
                             None if coef is None else coef.handle, ctx._stream_arg(stream))
    return (total, coef) if return_coef else total
