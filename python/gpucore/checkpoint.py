"""Gradient checkpointing: the segment executor (``gpucore_ckpt_*``).

A model is an ordered chain of segments (each takes one tensor, returns one). The
executor runs them forward, then backward, and per its policy keeps what each
segment's backward needs or recomputes it (activation checkpointing)::

    ex = gpucore.CheckpointExecutor(ctx, "mlp")
    ex.add_linear("fc1", w1, b1, "relu", dw1, db1)
    ex.add("my_layer", forward, backward)          # Python-defined segment
    ex.add_linear("fc2", w2, b2, "none", dw2, db2)
    ex.set_policy("sqrt_n")
    y = ex.forward(x); ...loss, dy...; ex.backward(dy)   # dw*, db* now hold gradients

Python segments: ``forward(call, x) -> y`` and ``backward(call, dy, dx) -> None``.
``forward`` saves what its backward needs with ``call.save(t)`` (never by keeping
references: a recompute policy drops them) and draws random numbers with
``call.rng(n)``; ``backward`` reads them with ``call.saved(i)`` and overwrites
``dx`` (None when the input gradient is not wanted), e.g. through ``out=dx``.
The tensors a callback receives are valid only during the callback.

Exceptions raised inside a callback never cross into C: they are caught, the
step fails with an error status (the executor releases what the step held), and
the original exception is raised again from :meth:`forward` / :meth:`backward`,
chained to the library's error that names the segment.
"""
from __future__ import annotations

import contextlib
import ctypes
import itertools
from ctypes import byref, c_char_p, c_double, c_int32, c_int64, c_uint64, c_void_p
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from ._lib import (C, CKPT_BACKWARD_FN, CKPT_DISCARD_FN, CKPT_FORWARD_FN, CKPT_GRAD_READY_FN, CKPT_PACK_FN,
                   CKPT_SEGMENT_HOOK_FN, CKPT_UNPACK_FN, CkptStats)
from ._op_args import _act
from ._validate import UINT64_MAX, to_float, to_int
from .context import Context, DeviceLike, get_context
from .errors import (ERR_INVALID_ARGUMENT, GpucoreError, InvalidArgumentError, InvalidArgumentTypeError,
                     InvalidHandleError)
from .nn import IntPair, _conv_options
from .optim import _Owned
from .tensor import Tensor

__all__ = ["CheckpointExecutor", "CheckpointCall", "POLICIES", "PHASES", "AttentionBlock", "MlpBlock"]

POLICIES = {"keep_all": 0, "recompute_all": 1, "every_k": 2, "sqrt_n": 3, "budget": 4}
MODES = ("kept", "checkpoint", "recomputed")
PHASES = ("forward", "recompute", "backward")


def _release(t: Optional[Tensor]) -> None:
    """Destroy a callback-scoped tensor without touching the thread's last error."""
    if t is None:
        return
    h, t._h = t._h, None
    t._dead = "it was only valid during the checkpoint callback"
    if h is not None:
        C.raw_gpucore_tensor_destroy(h)


def _status_of(e: BaseException) -> int:
    if isinstance(e, GpucoreError) and e.status:
        return int(e.status)
    C.gpucore_clear_error()  # do not let a stale message stand for this exception
    return ERR_INVALID_ARGUMENT


class CheckpointCall:
    """What a Python segment's callbacks get for the call in progress (valid only then)."""

    def __init__(self, ex: "CheckpointExecutor", handle: int) -> None:
        self._ex = ex
        self._h: Optional[int] = handle
        self._borrowed: List[Tensor] = []

    @property
    def handle(self) -> int:
        if self._h is None:
            raise InvalidHandleError("the checkpoint call is over (call objects are valid only during the "
                                     "callback)")
        return self._h

    def _wrap(self, h: int) -> Tensor:
        t = Tensor._borrow(self._ex._ctx, h)
        self._borrowed.append(t)
        return t

    def save(self, t: Tensor) -> None:
        """Forward only: keep ``t`` for this segment's backward (read it with :meth:`saved`)."""
        if not isinstance(t, Tensor):
            raise InvalidArgumentTypeError("save needs a gpucore.Tensor, not %s" % type(t).__name__)
        C.gpucore_ckpt_save(self.handle, t.handle)

    def saved(self, index: int) -> Tensor:
        """Backward only: saved tensor ``index`` (0, 1, ... in save order)."""
        h = c_void_p()
        C.gpucore_ckpt_saved(self.handle, to_int(index, "index"), byref(h))
        return self._wrap(h.value)

    def rng(self, counters: int) -> Tuple[int, int]:
        """Reserve ``counters`` Philox counters (``gpucore.C.gpucore_random_offset_advance(n, dist)``):
        returns (seed, offset) for ``uniform_``/``dropout``; replayed identically on recompute."""
        s, o = c_uint64(), c_uint64()
        C.gpucore_ckpt_rng(self.handle, to_int(counters, "counters", 0, UINT64_MAX), byref(s), byref(o))
        return s.value, o.value

    def grad_ready(self, param: int, grad: Tensor) -> None:
        """Backward: parameter gradient ``param`` of this segment is complete (calls the
        executor's grad-ready callback, e.g. to start its DDP allreduce)."""
        if not isinstance(grad, Tensor):
            raise InvalidArgumentTypeError("grad must be a gpucore.Tensor, not %s" % type(grad).__name__)
        C.gpucore_ckpt_grad_ready(self.handle, to_int(param, "param", -(1 << 31), (1 << 31) - 1), grad.handle)

    @property
    def segment(self) -> Tuple[int, str]:
        """(top-level index, name) of the segment being called."""
        i = c_int64()
        n = c_char_p()
        C.gpucore_ckpt_call_segment(self.handle, byref(i), byref(n))
        return i.value, (n.value or b"").decode()

    def _end(self) -> None:
        self._h = None
        for t in self._borrowed:
            _release(t)
        self._borrowed.clear()


class CheckpointExecutor(_Owned):
    """The gradient-checkpointing segment executor (see the module docstring).

    Args:
        device: a Context, device string or None (default context).
        name: used in error messages.
    """

    _destroy_fn = "gpucore_ckpt_destroy"
    _what = "checkpoint executor"
    _close_order = 0

    def __init__(self, device: DeviceLike = None, name: Optional[str] = None) -> None:
        self._h: Optional[int] = None
        ctx = get_context(device)
        if name is not None and not isinstance(name, str):
            raise InvalidArgumentTypeError("name must be a string or None")
        self._init_owned(ctx)
        self._callbacks: List[Any] = []   # CFUNCTYPE objects C holds: alive as long as the executor
        self._refs: List[Any] = []        # tensors the built-in segments use (must outlive the executor)
        self._exc: Optional[BaseException] = None
        self._packed: Dict[int, Any] = {}
        self._keys = itertools.count(1)
        self._x_shape: Optional[Tuple[Tuple[int, ...], Any]] = None
        self._y: Optional[Tensor] = None
        h = c_void_p()
        C.gpucore_ckpt_create(ctx.handle, None if name is None else name.encode(), byref(h))
        self._h = h.value

    # ---- running C calls that may call back into Python ----
    def _store(self, e: BaseException) -> None:
        if self._exc is None:
            self._exc = e

    def _run(self, fn: Callable[..., Any], *args: Any) -> None:
        self._exc = None
        try:
            fn(*args)
        except GpucoreError as err:
            exc, self._exc = self._exc, None
            if exc is not None:
                raise exc from err
            raise
        exc, self._exc = self._exc, None
        if exc is not None:
            raise exc

    # ---- segments ----
    def __len__(self) -> int:
        return int(C.gpucore_ckpt_segment_count(self.handle))

    @property
    def segment_count(self) -> int:
        """Number of top-level segments (a residual block counts as one)."""
        return len(self)

    def add(self, name: str, forward: Callable[[CheckpointCall, Tensor], Tensor],
            backward: Callable[[CheckpointCall, Tensor, Optional[Tensor]], None]) -> None:
        """Add a Python segment: ``forward(call, x) -> y`` and ``backward(call, dy, dx)`` (write dx
        in place; dx is None when not wanted). See the module docstring."""
        if not callable(forward) or not callable(backward):
            raise InvalidArgumentTypeError("forward and backward must be callables")
        ctx = self._ctx

        def fwd(call: int, x: int, y_out: Any, stream: int, user: int) -> int:
            c = CheckpointCall(self, call)
            try:
                xt = c._wrap(x)
                y = forward(c, xt)
                if not isinstance(y, Tensor):
                    raise InvalidArgumentTypeError("checkpoint segment %r: forward must return a gpucore.Tensor, "
                                                   "not %s" % (name, type(y).__name__))
                if y.context is not ctx:
                    raise InvalidArgumentError("checkpoint segment %r returned a tensor of another context" % name)
                y_out[0] = y._view_handle()
                return 0
            except BaseException as e:  # never let it escape into C
                self._store(e)
                return _status_of(e)
            finally:
                c._end()

        def bwd(call: int, dy: int, dx: int, stream: int, user: int) -> int:
            c = CheckpointCall(self, call)
            try:
                dyt = c._wrap(dy)
                dxt = c._wrap(dx) if dx else None
                backward(c, dyt, dxt)
                return 0
            except BaseException as e:
                self._store(e)
                return _status_of(e)
            finally:
                c._end()

        f, b = CKPT_FORWARD_FN(fwd), CKPT_BACKWARD_FN(bwd)
        self._callbacks += [f, b]
        C.gpucore_ckpt_add_custom(self.handle, _name(name), f, b, None)

    def add_linear(self, name: str, weight: Tensor, bias: Optional[Tensor], activation: str, dweight: Tensor,
                   dbias: Optional[Tensor] = None) -> None:
        """y = act(x @ weight.T + bias) (act "none", "relu" or "gelu" = tanh form); dweight/dbias
        receive the gradients (overwritten; params 0 and 1)."""
        a = {"none": 0, "relu": 1, "gelu": 3, "gelu_tanh": 3}.get(activation)
        if a is None:
            raise InvalidArgumentError("add_linear: activation must be 'none', 'relu' or 'gelu'")
        self._refs += [weight, bias, dweight, dbias]
        C.gpucore_ckpt_add_linear(self.handle, _name(name), _h(weight, "weight"), _h(bias, "bias", True), a,
                                  _h(dweight, "dweight"), _h(dbias, "dbias", True))

    def add_conv2d(self, name: str, weight: Tensor, bias: Optional[Tensor], dweight: Tensor,
                   dbias: Optional[Tensor] = None, stride: IntPair = 1, padding: Any = 0, dilation: IntPair = 1,
                   groups: int = 1, layout: str = "nchw", activation: str = "none") -> None:
        """y = act(conv2d(x, weight) + bias) (act "none" or "relu"); see :func:`gpucore.conv2d`."""
        o = _conv_options(len(weight.shape) if isinstance(weight, Tensor) else 4, stride, padding, dilation,
                          groups, layout, "none", "heuristic", None, 0)
        self._refs += [weight, bias, dweight, dbias]
        C.gpucore_ckpt_add_conv2d(self.handle, _name(name), _h(weight, "weight"), _h(bias, "bias", True), byref(o),
                                  _act(activation), _h(dweight, "dweight"), _h(dbias, "dbias", True))

    def add_layer_norm(self, name: str, weight: Optional[Tensor] = None, bias: Optional[Tensor] = None,
                       eps: float = 1e-5, dweight: Optional[Tensor] = None, dbias: Optional[Tensor] = None) -> None:
        """LayerNorm over the last dim; weight/bias and dweight/dbias all given or all None."""
        self._refs += [weight, bias, dweight, dbias]
        C.gpucore_ckpt_add_layer_norm(self.handle, _name(name), _h(weight, "weight", True), _h(bias, "bias", True),
                                      to_float(eps, "eps"), _h(dweight, "dweight", True), _h(dbias, "dbias", True))

    def add_attention_block(self, name: str, **fields: Any) -> None:
        """A pre-norm attention block, y = x + out_proj(attention(rope(qkv_proj(norm(x))))), as one
        segment. Keyword arguments are the fields of ``gpucore_ckpt_attention_block`` (heads, kv_heads,
        layer_norm, is_causal, eps, norm_weight, w_qkv, b_qkv, w_out, b_out, rope_cos, rope_sin,
        their gradients d_norm_weight, dw_qkv, ..., LoRA adapters lora_qkv_a/_b, lora_out_a/_b with
        d_lora_*, lora_scale, lora_dropout). x is [B, S, D]."""
        blk = AttentionBlock()
        C.gpucore_ckpt_attention_block_init(byref(blk))
        _fill_block(blk, "add_attention_block", fields, self._refs)
        C.gpucore_ckpt_add_attention_block(self.handle, _name(name), byref(blk))

    def add_mlp_block(self, name: str, **fields: Any) -> None:
        """A pre-norm MLP block, y = x + fc2(act(fc1(norm(x)))) with act GELU (tanh form) or, with
        swiglu=True, silu(gate)·up from fc1's two halves. Keyword arguments are the fields of
        ``gpucore_ckpt_mlp_block`` (layer_norm, swiglu, eps, norm_weight, norm_bias, w_fc1, b_fc1,
        w_fc2, b_fc2 and their gradients d_norm_weight, ..., dw_fc2, db_fc2)."""
        blk = MlpBlock()
        C.gpucore_ckpt_mlp_block_init(byref(blk))
        _fill_block(blk, "add_mlp_block", fields, self._refs)
        C.gpucore_ckpt_add_mlp_block(self.handle, _name(name), byref(blk))

    def add_dropout(self, name: str, p: float) -> None:
        """Inverted dropout with probability p (mask replayed on recompute and backward)."""
        C.gpucore_ckpt_add_dropout(self.handle, _name(name), to_float(p, "p"))

    @contextlib.contextmanager
    def residual(self, name: str) -> Iterator[None]:
        """``with ex.residual("block"):`` the segments added inside form f in y = x + f(x)."""
        C.gpucore_ckpt_begin_residual(self.handle, _name(name))
        ok = False
        try:
            yield
            ok = True
        finally:
            if ok:
                C.gpucore_ckpt_end_residual(self.handle)

    # ---- policy ----
    def set_policy(self, policy: str, param: int = 0) -> None:
        """"keep_all" (default), "recompute_all", "every_k" (param = k), "sqrt_n", or "budget"
        (param = bytes the step's peak may reach)."""
        if policy not in POLICIES:
            raise InvalidArgumentError("policy must be one of %s, not %r" % (", ".join(POLICIES), policy))
        C.gpucore_ckpt_set_policy(self.handle, POLICIES[policy], to_int(param, "param"))

    def plan(self) -> List[str]:
        """Per top-level segment: "kept", "checkpoint" or "recomputed" (the last forward's plan)."""
        n = max(1, len(self))
        arr = (ctypes.c_int32 * n)()
        C.gpucore_ckpt_get_plan(self.handle, arr, n)
        return [MODES[m] if 0 <= m < 3 else str(m) for m in arr[:len(self)]]

    def set_seed(self, seed: int, offset: int = 0) -> None:
        """Base Philox key and offset of the next forward."""
        C.gpucore_ckpt_set_seed(self.handle, to_int(seed, "seed", 0, UINT64_MAX),
                                to_int(offset, "offset", 0, UINT64_MAX))

    # ---- the step ----
    def forward(self, x: Tensor) -> Tensor:
        """Run every segment on x; returns y (x must stay unchanged until :meth:`backward`)."""
        if not isinstance(x, Tensor):
            raise InvalidArgumentTypeError("x must be a gpucore.Tensor, not %s" % type(x).__name__)
        h = c_void_p()
        self._run(C.gpucore_ckpt_forward, self.handle, x.handle, byref(h))
        self._x_shape = (x.shape, x.dtype)
        self._x = x
        return Tensor._borrow(self._ctx, h.value)

    def backward(self, dy: Tensor, dx: Optional[Tensor] = None, input_grad: bool = False) -> Optional[Tensor]:
        """Backpropagate dy (y's shape and dtype), recomputing as planned. The parameter gradients
        land in the tensors given to the segments. Returns dx (the given one, or a new one with
        ``input_grad=True``), else None."""
        if not isinstance(dy, Tensor):
            raise InvalidArgumentTypeError("dy must be a gpucore.Tensor, not %s" % type(dy).__name__)
        if dx is None and input_grad:
            if self._x_shape is None:
                raise InvalidArgumentError("backward: no forward ran")
            from .tensor import empty
            dx = empty(self._x_shape[0], self._x_shape[1], device=self._ctx)
        if dx is not None and not isinstance(dx, Tensor):
            raise InvalidArgumentTypeError("dx must be a gpucore.Tensor or None")
        self._run(C.gpucore_ckpt_backward, self.handle, dy.handle, None if dx is None else dx.handle)
        self._x = None
        return dx

    def reset(self) -> None:
        """Drop a step in progress (a forward without backward)."""
        self._run(C.gpucore_ckpt_reset, self.handle)
        self._x = None

    # ---- hooks ----
    def set_saved_tensor_hooks(self, pack: Optional[Callable[[Tensor], Any]],
                               unpack: Optional[Callable[[Any], Tensor]] = None,
                               discard: Optional[Callable[[Any], None]] = None) -> None:
        """Replace how tensors saved by KEPT segments are held: ``pack(t) -> obj`` in forward,
        ``unpack(obj) -> Tensor`` (same shape and dtype) before the backward, ``discard(obj)``
        for values never unpacked. ``pack=None`` removes the hooks."""
        if pack is None:
            C.gpucore_ckpt_set_saved_tensor_hooks(self.handle, CKPT_PACK_FN(), CKPT_UNPACK_FN(), CKPT_DISCARD_FN(),
                                                  None)
            return
        if not callable(pack) or not callable(unpack):
            raise InvalidArgumentTypeError("pack and unpack must be callables")

        def p(user: int, t: int, stream: int, packed: Any) -> int:
            tt = None
            try:
                tt = Tensor._borrow(self._ctx, t)
                obj = pack(tt)
                key = next(self._keys)
                self._packed[key] = obj
                packed[0] = key
                return 0
            except BaseException as e:
                self._store(e)
                return _status_of(e)
            finally:
                _release(tt)

        def u(user: int, packed: int, stream: int, out: Any) -> int:
            try:
                obj = self._packed.pop(packed or 0)
                t = unpack(obj)
                if not isinstance(t, Tensor):
                    raise InvalidArgumentTypeError("unpack must return a gpucore.Tensor, not %s" % type(t).__name__)
                out[0] = t._view_handle()
                return 0
            except BaseException as e:
                self._store(e)
                return _status_of(e)

        def d(user: int, packed: int) -> None:
            try:
                obj = self._packed.pop(packed or 0, None)
                if discard is not None and obj is not None:
                    discard(obj)
            except BaseException as e:
                self._store(e)

        cbs = (CKPT_PACK_FN(p), CKPT_UNPACK_FN(u), CKPT_DISCARD_FN(d))
        self._callbacks += list(cbs)
        C.gpucore_ckpt_set_saved_tensor_hooks(self.handle, cbs[0], cbs[1], cbs[2], None)

    def set_offload(self, enable: bool = True, min_bytes: int = 0) -> None:
        """Offload saved tensors of at least ``min_bytes`` to pinned host memory (overlapped copies)."""
        C.gpucore_ckpt_set_offload(self.handle, 1 if enable else 0, to_int(min_bytes, "min_bytes", 0))

    def set_segment_hook(self, hook: Optional[Callable[[int, str, str, bool], None]]) -> None:
        """``hook(segment, name, phase, is_post)`` before/after each segment's forward, recompute and
        backward (phase "forward", "recompute", "backward"); None removes it."""
        if hook is None:
            C.gpucore_ckpt_set_segment_hook(self.handle, CKPT_SEGMENT_HOOK_FN(), None)
            return

        def f(user: int, seg: int, name: bytes, phase: int, is_post: int) -> int:
            try:
                hook(seg, (name or b"").decode(), PHASES[phase] if 0 <= phase < 3 else str(phase), bool(is_post))
                return 0
            except BaseException as e:
                self._store(e)
                return _status_of(e)

        cb = CKPT_SEGMENT_HOOK_FN(f)
        self._callbacks.append(cb)
        C.gpucore_ckpt_set_segment_hook(self.handle, cb, None)

    def set_grad_ready_callback(self, fn: Optional[Callable[[int, str, int, Tensor], None]]) -> None:
        """``fn(segment, name, param, grad)`` as soon as a parameter gradient is complete (e.g.
        ``lambda *a: reducer.mark_ready(index_of[a[1], a[2]])``); None removes it. ``grad`` is
        valid only during the call."""
        if fn is None:
            C.gpucore_ckpt_set_grad_ready_callback(self.handle, CKPT_GRAD_READY_FN(), None)
            return

        def f(user: int, seg: int, name: bytes, param: int, grad: int, stream: int) -> int:
            g = None
            try:
                g = Tensor._borrow(self._ctx, grad)
                fn(seg, (name or b"").decode(), param, g)
                return 0
            except BaseException as e:
                self._store(e)
                return _status_of(e)
            finally:
                _release(g)

        cb = CKPT_GRAD_READY_FN(f)
        self._callbacks.append(cb)
        C.gpucore_ckpt_set_grad_ready_callback(self.handle, cb, None)

    def stats(self) -> Dict[str, int]:
        """Memory accounting of the last step: baseline_bytes, peak_allocated_bytes, held_bytes,
        keep_all_bytes, bytes_saved, estimated_peak_bytes, segments, kept, checkpoints,
        recomputed, recompute_runs, packed_tensors, unpacked_tensors, offloaded_bytes."""
        s = CkptStats()
        s.struct_size = ctypes.sizeof(CkptStats)
        C.gpucore_ckpt_get_stats(self.handle, byref(s))
        return {n: getattr(s, n) for n, _ in CkptStats._fields_ if n != "struct_size"}


_T = c_void_p  # a tensor handle field


class AttentionBlock(ctypes.Structure):
    """ctypes mirror of ``gpucore_ckpt_attention_block`` (include/gpucore.h documents the fields)."""
    _fields_ = [("struct_size", c_int64), ("layer_norm", c_int32), ("heads", c_int32), ("kv_heads", c_int32),
                ("is_causal", c_int32), ("rope_interleaved", c_int32), ("reserved", c_int32), ("eps", c_double)] + \
               [(n, _T) for n in ("norm_weight", "norm_bias", "w_qkv", "b_qkv", "w_out", "b_out", "rope_cos",
                                  "rope_sin", "d_norm_weight", "d_norm_bias", "dw_qkv", "db_qkv", "dw_out", "db_out",
                                  "lora_qkv_a", "lora_qkv_b", "lora_out_a", "lora_out_b", "d_lora_qkv_a",
                                  "d_lora_qkv_b", "d_lora_out_a", "d_lora_out_b")] + \
               [("lora_scale", c_double), ("lora_dropout", c_double)]


class MlpBlock(ctypes.Structure):
    """ctypes mirror of ``gpucore_ckpt_mlp_block``."""
    _fields_ = [("struct_size", c_int64), ("layer_norm", c_int32), ("swiglu", c_int32), ("eps", c_double)] + \
               [(n, _T) for n in ("norm_weight", "norm_bias", "w_fc1", "b_fc1", "w_fc2", "b_fc2", "d_norm_weight",
                                  "d_norm_bias", "dw_fc1", "db_fc1", "dw_fc2", "db_fc2")]


def _fill_block(blk: ctypes.Structure, what: str, fields: Dict[str, Any], refs: List[Any]) -> None:
    """Set a block struct's fields from keyword arguments: tensors for handle fields, numbers
    (or bools) for the rest; unknown names are an error."""
    types = dict(blk._fields_)
    for k, v in fields.items():
        if k not in types or k in ("struct_size", "reserved"):
            raise InvalidArgumentError("%s: unknown field %r; fields are %s" %
                                       (what, k, ", ".join(n for n in types if n not in ("struct_size", "reserved"))))
        if types[k] is _T:
            setattr(blk, k, _h(v, k, True))
            refs.append(v)
        elif types[k] is c_double:
            setattr(blk, k, to_float(v, k))
        else:
            setattr(blk, k, int(v))


def _name(name: Any) -> bytes:
    if not isinstance(name, str):
        raise InvalidArgumentTypeError("a segment name must be a string, not %s" % type(name).__name__)
    return name.encode()


def _h(t: Any, what: str, optional: bool = False) -> Optional[int]:
    if t is None and optional:
        return None
    if not isinstance(t, Tensor):
        raise InvalidArgumentTypeError("%s must be a gpucore.Tensor%s, not %s" %
                                       (what, " or None" if optional else "", type(t).__name__))
    return t.handle
