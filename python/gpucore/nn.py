"""Matrix multiply, fully connected layers and convolution (forward and backward).

* :func:`matmul` — ``d = epilogue(alpha * op(a) @ op(b) + beta * c)`` with fused
  epilogues (bias, ReLU, GELU, their gradients), 2-d or 3-d (strided batches),
  f32/f16/bf16 (and fp8 on CUDA sm_89+); accumulation is always fp32.
* :func:`linear` / :func:`linear_backward` — ``y = act(x @ W.T + b)`` in one fused
  GEMM; the backward gives (dx, dW, db) in two.
* :func:`conv2d` / :func:`conv1d` and :func:`conv2d_backward_data` /
  :func:`conv2d_backward_filter` — PyTorch's conv2d semantics (cross-correlation),
  NCHW or NHWC, stride/padding/dilation/groups, fused bias + ReLU.

Every call is asynchronous on ``stream`` (None: the context's current stream).
"""
from __future__ import annotations

import ctypes
import numbers
from ctypes import byref, c_int, c_int64
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np

from . import dtypes as _dt
from ._lib import C, ConvOptions, ConvStats, MatmulOptions, MatmulStats
from ._op_args import _act, _opt, _out, _same_ctx, _stream, _tensor
from ._validate import to_float, to_int, to_shape
from .context import Context, DeviceLike, Stream, get_context
from .errors import InvalidArgumentError, InvalidArgumentTypeError, ShapeMismatchError
from .ops import sum as _sum
from .tensor import Tensor, _i64_array, empty, zeros

__all__ = ["matmul", "matmul_backward", "linear", "linear_backward", "conv2d", "conv1d", "conv2d_backward",
           "conv2d_backward_data", "conv2d_backward_filter", "conv_output_shape", "conv_stats", "matmul_stats", "EPILOGUES", "IntPair"]

EPILOGUES = {"none": 0, "bias": 1, "relu": 2, "bias_relu": 3, "gelu": 4, "bias_gelu": 5, "dgelu": 6,
             "dgelu_bgrad": 7, "bgrad_a": 8, "bgrad_b": 9}
IntPair = Union[int, Tuple[int, int]]


def _tf32(allow_tf32: Optional[bool]) -> int:
    return -1 if allow_tf32 is None else (1 if allow_tf32 else 0)


# ---------------------------------------------------------------- matmul

def matmul(a: Tensor, b: Tensor, out: Optional[Tensor] = None, *, trans_a: bool = False, trans_b: bool = False,
           alpha: float = 1.0, beta: float = 0.0, c: Optional[Tensor] = None, bias: Optional[Tensor] = None,
           epilogue: Optional[str] = None, aux: Optional[Tensor] = None, bias_grad: Optional[Tensor] = None,
           out_dtype: Any = None, allow_tf32: Optional[bool] = None, scale_a: Optional[Tensor] = None,
           scale_b: Optional[Tensor] = None, amax_d: Optional[Tensor] = None,
           stream: Optional[Stream] = None) -> Tensor:
    """d = epilogue(alpha * op(a) @ op(b) + beta * c); returns d (``out`` or a new tensor).

    Args:
        a, b: [M, K] and [K, N] after op (``trans_a``/``trans_b`` use the transpose), or 3-d
            [batch, ., .] (a 2-d operand is used for every batch). Transposed views work too.
        out: d, [M, N] (or [batch, M, N]), row-major rows; may be ``c`` (accumulate in place).
        alpha, beta, c: scale and addend (c: d's shape and dtype; None means d itself).
        bias: [N]; implies epilogue "bias" when epilogue is None.
        epilogue: "none", "bias", "relu", "bias_relu", "gelu", "bias_gelu" (GELU is the tanh
            form; ``aux`` receives the pre-activation), "dgelu", "dgelu_bgrad" (aux input; bias_grad
            output [N]), "bgrad_a" ([M]), "bgrad_b" ([N]).
        out_dtype: d's dtype for a new d (default a's; f32 for fp8 operands).
        allow_tf32: f32 on CUDA: None uses the context's setting.
        scale_a, scale_b, amax_d: fp8 only (CUDA): f32 scalar tensors.
    Dtypes: f32 -> f32; f16 -> f16/f32; bf16 -> bf16/f32; fp8 (CUDA 8.9+) -> f32/f16/bf16.
    """
    a = _tensor(a, "a")
    b = _tensor(b, "b")
    ctx = a._ctx
    _same_ctx(ctx, (b, "b"), (out, "out"), (c, "c"), (bias, "bias"), (aux, "aux"), (bias_grad, "bias_grad"))
    plain = not (trans_a or trans_b or c is not None or bias is not None or epilogue not in (None, "none") or
                 aux is not None or bias_grad is not None or scale_a is not None or scale_b is not None or
                 amax_d is not None or alpha != 1.0 or beta != 0.0 or allow_tf32 is not None)
    if plain and _needs_torch_shapes(a.shape, b.shape):
        return _matmul_broadcast(a, b, out, out_dtype, stream)
    if len(a.shape) not in (2, 3) or len(b.shape) not in (2, 3):
        raise ShapeMismatchError("matmul: a and b must be 2-d or 3-d, not %s and %s" % (a.shape, b.shape))
    sa, sb = list(a.shape), list(b.shape)
    if trans_a:
        sa[-1], sa[-2] = sa[-2], sa[-1]
    if trans_b:
        sb[-1], sb[-2] = sb[-2], sb[-1]
    if sa[-1] != sb[-2]:
        raise ShapeMismatchError("matmul: inner dimensions differ: op(a) is %s and op(b) is %s" % (sa, sb))
    if len(sa) == 3 or len(sb) == 3:
        ba = sa[0] if len(sa) == 3 else 1
        bb = sb[0] if len(sb) == 3 else 1
        if ba != bb and ba != 1 and bb != 1:
            raise ShapeMismatchError("matmul: batch counts %d and %d differ" % (ba, bb))
        dshape: Tuple[int, ...] = (max(ba, bb), sa[-2], sb[-1])
    else:
        dshape = (sa[-2], sb[-1])
    if out is None:
        if out_dtype is not None:
            dt = _dt.as_dtype(out_dtype)
        elif a.dtype in (_dt.float8_e4m3, _dt.float8_e5m2):
            dt = _dt.float32
        else:
            dt = a.dtype
        d = empty(dshape, dt, device=ctx)
    else:
        d = _out(out, dshape, None, ctx)
    o = MatmulOptions()
    C.gpucore_matmul_options_init(byref(o))
    o.trans_a = 1 if trans_a else 0
    o.trans_b = 1 if trans_b else 0
    o.alpha = to_float(alpha, "alpha")
    o.beta = to_float(beta, "beta")
    o.c = _opt(c, "c")
    if epilogue is None:
        epilogue = "bias" if bias is not None else "none"
    if epilogue not in EPILOGUES:
        raise InvalidArgumentError("matmul: epilogue must be one of %s, not %r" % (", ".join(EPILOGUES), epilogue))
    o.epilogue = EPILOGUES[epilogue]
    o.allow_tf32 = _tf32(allow_tf32)
    o.bias = _opt(bias, "bias")
    o.aux = _opt(aux, "aux")
    o.bias_grad = _opt(bias_grad, "bias_grad")
    o.scale_a = _opt(scale_a, "scale_a")
    o.scale_b = _opt(scale_b, "scale_b")
    o.amax_d = _opt(amax_d, "amax_d")
    C.gpucore_matmul(a.handle, b.handle, d.handle, byref(o), _stream(ctx, stream))
    return d


def _needs_torch_shapes(sa: Sequence[int], sb: Sequence[int]) -> bool:
    """True when torch.matmul's rules go beyond the GEMM's 2-d/3-d operands: a 1-d
    operand, more than one batch dim, or batch counts that broadcast from 1."""
    if len(sa) < 2 or len(sb) < 2 or len(sa) > 3 or len(sb) > 3:
        return True
    return len(sa) == 3 and len(sb) == 3 and sa[0] != sb[0]


def _matmul_broadcast(a: Tensor, b: Tensor, out: Optional[Tensor], out_dtype: Any, stream: Optional[Stream]) -> Tensor:
    """torch.matmul's shape rules (gpucore_matmul_nd): a 1-d a is a row and a 1-d b a
    column (the added dim dropped; both 1-d is a dot product, a 0-d result); batch dims
    broadcast numpy-style. One batched GEMM on strided views."""
    if not a.shape or not b.shape:
        raise ShapeMismatchError("matmul: both operands need at least 1 dim, not %s and %s" % (a.shape, b.shape))
    m = (a.shape[-2],) if len(a.shape) > 1 else ()
    n = (b.shape[-1],) if len(b.shape) > 1 else ()
    try:
        batch = tuple(np.broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-2])))
    except ValueError:
        batch = ()  # the library names the shapes that do not broadcast
    d = empty(batch + m + n, a.dtype if out_dtype is None else _dt.as_dtype(out_dtype), device=a._ctx) \
        if out is None else _tensor(out, "out")
    C.gpucore_matmul_nd(a.handle, b.handle, d.handle, _stream(a._ctx, stream))
    return d


def _sum_to(t: Tensor, shape: Sequence[int], stream: Optional[Stream]) -> Tensor:
    """t summed over the dims that broadcasting added or stretched from 1, as ``shape``."""
    lead = len(t.shape) - len(shape)
    dims = list(range(lead)) + [lead + i for i, s in enumerate(shape) if s == 1 and t.shape[lead + i] != 1]
    if dims:
        t = _sum(t, dim=tuple(dims), keepdim=True, stream=stream)
    return t.reshape(tuple(shape))


def matmul_backward(grad_output: Tensor, a: Tensor, b: Tensor, input_grad: bool = True, other_grad: bool = True,
                    stream: Optional[Stream] = None) -> Tuple[Optional[Tensor], Optional[Tensor]]:
    """Backward of ``y = matmul(a, b)`` with torch.matmul's shape rules (1-d operands, broadcast
    batch dims): returns (da, db) = (dy·bᵀ, aᵀ·dy), each summed over the batch dims it was
    broadcast along and shaped as its operand; None when not asked for."""
    dy = _tensor(grad_output, "grad_output")
    a = _tensor(a, "a")
    b = _tensor(b, "b")
    if not a.shape or not b.shape:
        raise ShapeMismatchError("matmul_backward: both operands need at least 1 dim, not %s and %s" % (a.shape, b.shape))
    a2 = a.reshape((1, a.shape[0])) if len(a.shape) == 1 else a
    b2 = b.reshape((b.shape[0], 1)) if len(b.shape) == 1 else b
    batch = tuple(np.broadcast_shapes(tuple(a2.shape[:-2]), tuple(b2.shape[:-2])))
    dy2 = dy.reshape(batch + (a2.shape[-2], b2.shape[-1]))
    da = db = None
    if input_grad:
        da = _sum_to(matmul(dy2, b2.transpose(-1, -2), stream=stream), a2.shape, stream).reshape(a.shape)
    if other_grad:
        db = _sum_to(matmul(a2.transpose(-1, -2), dy2, stream=stream), b2.shape, stream).reshape(b.shape)
    return da, db


# ---------------------------------------------------------------- linear

_LINEAR_ACTS = {"none": 0, "relu": 1, "gelu": 3, "gelu_tanh": 3}


def linear(input: Tensor, weight: Tensor, bias: Optional[Tensor] = None, activation: str = "none",
           return_aux: bool = False, out: Optional[Tensor] = None,
           stream: Optional[Stream] = None) -> Any:
    """y = act(input @ weight.T + bias) in one fused GEMM (torch.nn.functional.linear plus an
    activation).

    Args:
        input: [..., in] (leading dims must merge into one row dim).
        weight: [out, in]; bias: [out] or None.
        activation: "none", "relu" or "gelu" (the tanh form, = "gelu_tanh").
        return_aux: GELU only: also return the pre-activation (input @ W.T + b), which
            :func:`linear_backward` needs as ``x_gelu_aux`` of the layer above (or to form
            this layer's dy with :func:`gpucore.gelu_backward` ``approximate="tanh"``).
    Returns y, or (y, aux) with return_aux.
    """
    x = _tensor(input, "input")
    w = _tensor(weight, "weight")
    if activation not in _LINEAR_ACTS:
        raise InvalidArgumentError("linear: activation must be 'none', 'relu' or 'gelu', not %r" % (activation,))
    act = _LINEAR_ACTS[activation]
    if len(w.shape) != 2 or not x.shape:
        raise ShapeMismatchError("linear: weight must be [out, in] and input [..., in]; got %s and %s"
                                 % (w.shape, x.shape))
    ctx = x._ctx
    _same_ctx(ctx, (w, "weight"), (bias, "bias"), (out, "out"))
    yshape = tuple(x.shape[:-1]) + (w.shape[0],)
    y = _out(out, yshape, x.dtype, ctx)
    aux = None
    if return_aux:
        if act != 3:
            raise InvalidArgumentError("linear: return_aux needs activation='gelu'")
        aux = empty(yshape, x.dtype, device=ctx)
    C.gpucore_linear_forward(x.handle, w.handle, _opt(bias, "bias"), act, y.handle, _opt(aux, "aux"),
                             _stream(ctx, stream))
    return (y, aux) if return_aux else y


def linear_backward(grad_output: Tensor, input: Tensor, weight: Tensor, x_gelu_aux: Optional[Tensor] = None,
                    input_grad: bool = True, weight_grad: bool = True, bias_grad: bool = True,
                    stream: Optional[Stream] = None) -> Tuple[Optional[Tensor], Optional[Tensor], Optional[Tensor]]:
    """Backward of y = input @ weight.T + bias: returns (dx, dw, db) =
    (dy @ W, dy.T @ x, sum_rows dy); each None when not asked for (db needs weight_grad).

    ``x_gelu_aux``: when input = gelu_tanh(x_gelu_aux) (the aux the layer below returned),
    dx is instead the gradient w.r.t. x_gelu_aux ((dy @ W) * gelu_tanh'(aux)), fused."""
    dy = _tensor(grad_output, "grad_output")
    x = _tensor(input, "input")
    w = _tensor(weight, "weight")
    ctx = dy._ctx
    _same_ctx(ctx, (x, "input"), (w, "weight"), (x_gelu_aux, "x_gelu_aux"))
    dx = empty(x.shape, x.dtype, device=ctx) if input_grad else None
    dw = empty(w.shape, w.dtype, device=ctx) if weight_grad else None
    db = empty((w.shape[0],), w.dtype, device=ctx) if (bias_grad and weight_grad) else None
    C.gpucore_linear_backward(dy.handle, x.handle, w.handle, _opt(x_gelu_aux, "x_gelu_aux"), _opt(dx, "dx"),
                              _opt(dw, "dw"), _opt(db, "db"), _stream(ctx, stream))
    return dx, dw, db


# ---------------------------------------------------------------- convolution

_LAYOUTS = {"nchw": 0, "nhwc": 1, "ncw": 0, "nwc": 1}
_ALGOS = {"heuristic": 0, "autotune": 1, "deterministic": 2}


def _pair(v: Any, what: str, lo: int) -> Tuple[int, int]:
    if isinstance(v, numbers.Integral) and not isinstance(v, bool):
        i = to_int(v, what, lo)
        return i, i
    if isinstance(v, (tuple, list)) and len(v) == 2:
        return to_int(v[0], what + "[0]", lo), to_int(v[1], what + "[1]", lo)
    if isinstance(v, (tuple, list)) and len(v) == 1:
        i = to_int(v[0], what + "[0]", lo)
        return i, i
    raise InvalidArgumentTypeError("%s must be an int or a pair of ints, not %r" % (what, v))


def _conv_options(ndim: int, stride: IntPair, padding: Union[IntPair, str], dilation: IntPair, groups: int,
                  layout: str, activation: Any, algo: str, allow_tf32: Optional[bool],
                  workspace_limit: int) -> ConvOptions:
    o = ConvOptions()
    C.gpucore_conv_options_init(byref(o))
    lay = layout.lower() if isinstance(layout, str) else layout
    if lay not in _LAYOUTS:
        raise InvalidArgumentError("layout must be 'nchw' or 'nhwc' ('ncw'/'nwc' for 1-d), not %r" % (layout,))
    o.layout = _LAYOUTS[lay]
    if algo not in _ALGOS:
        raise InvalidArgumentError("algo must be 'heuristic', 'autotune' or 'deterministic', not %r" % (algo,))
    o.algo = _ALGOS[algo]
    sh, sw = _pair(stride, "stride", 1)
    dh, dw = _pair(dilation, "dilation", 1)
    if isinstance(padding, str):
        if padding == "same":
            o.padding_same = 1
            ph = pw = 0
        elif padding == "valid":
            ph = pw = 0
        else:
            raise InvalidArgumentError("padding must be an int, a pair, 'same' or 'valid', not %r" % (padding,))
    else:
        ph, pw = _pair(padding, "padding", 0)
    if ndim == 3:  # 1-d convolution: only the _w entries are used
        sh, dh, ph = 1, 1, 0
    o.stride_h, o.stride_w = sh, sw
    o.pad_h, o.pad_w = ph, pw
    o.dil_h, o.dil_w = dh, dw
    o.groups = to_int(groups, "groups", 1)
    o.allow_tf32 = _tf32(allow_tf32)
    o.activation = _act(activation)
    o.workspace_limit = to_int(workspace_limit, "workspace_limit", 0)
    return o


def conv_output_shape(input: Tensor, weight: Tensor, stride: IntPair = 1, padding: Union[IntPair, str] = 0,
                      dilation: IntPair = 1, groups: int = 1, layout: str = "nchw") -> Tuple[int, ...]:
    """The output shape :func:`conv2d` gives for these arguments (raises as the call would)."""
    x = _tensor(input, "input")
    w = _tensor(weight, "weight")
    o = _conv_options(len(x.shape), stride, padding, dilation, groups, layout, "none", "heuristic", None, 0)
    nd = c_int()
    shape = (c_int64 * 8)()
    C.gpucore_conv_output_shape(x.handle, w.handle, byref(o), byref(nd), shape)
    return tuple(shape[i] for i in range(nd.value))


def _pad_same_odd(x: Tensor, w: Tensor, dilation: IntPair, layout: str) -> Optional[Tuple[Tensor, Tuple[int, int]]]:
    """padding="same" where dilation·(kernel−1) is odd in a dim: x with the one extra
    zero row/column at the end of that dim, and the symmetric padding left for the
    kernel; None when the padding is symmetric already."""
    dh, dw = _pair(dilation, "dilation", 1)
    hw = (1, 2) if layout == "nhwc" else (2, 3)
    kr, ks = (w.shape[1], w.shape[2]) if layout == "nhwc" else (w.shape[2], w.shape[3])
    th, tw = dh * (kr - 1), dw * (ks - 1)
    if th % 2 == 0 and tw % 2 == 0:
        return None
    shape = list(x.shape)
    shape[hw[0]] += th % 2
    shape[hw[1]] += tw % 2
    xp = zeros(tuple(shape), x.dtype, device=x._ctx)
    index = [slice(None)] * 4
    index[hw[0]] = slice(0, x.shape[hw[0]])
    index[hw[1]] = slice(0, x.shape[hw[1]])
    xp[tuple(index)].copy_(x)
    return xp, (th // 2, tw // 2)


def conv2d(input: Tensor, weight: Tensor, bias: Optional[Tensor] = None, stride: IntPair = 1,
           padding: Union[IntPair, str] = 0, dilation: IntPair = 1, groups: int = 1, *, layout: str = "nchw",
           activation: str = "none", algo: str = "heuristic", allow_tf32: Optional[bool] = None,
           workspace_limit: int = 0, out: Optional[Tensor] = None, stream: Optional[Stream] = None) -> Tensor:
    """2-D convolution (cross-correlation, as torch.nn.functional.conv2d), optionally + bias, ReLU.

    Args:
        input: [N, C, H, W] (layout "nchw") or [N, H, W, C] ("nhwc").
        weight: [K, C/groups, R, S] ("nchw") or [K, R, S, C/groups] ("nhwc").
        bias: [K] or None.
        stride, dilation: int or (h, w), >= 1.  padding: int, (h, w), "valid" or "same".
        groups: splits C and K (groups == C is depthwise).
        activation: "none" or "relu" (fused after the bias).
        algo: "heuristic", "autotune" (cudnn.benchmark) or "deterministic" (CUDA).
        allow_tf32: f32 on CUDA (None: the context's setting).
    Returns y: [N, K, P, Q] ("nchw") or [N, P, Q, K], P = (H + 2 pad - dil (R-1) - 1) // stride + 1.
    f32, f16 or bf16 (one dtype), fp32 accumulation. CPU: im2col + GEMM; CUDA: cuDNN.
    3-d tensors are 1-D convolution (see :func:`conv1d`), except a 3-d input with a 4-d
    weight: an unbatched [C, H, W] ([H, W, C] for "nhwc") image, as PyTorch (returns 3-d).
    """
    x = _tensor(input, "input")
    w = _tensor(weight, "weight")
    if len(x.shape) == 3 and len(w.shape) == 4:  # unbatched image: a batch of one
        y1 = conv2d(x.unsqueeze(0), w, bias, stride, padding, dilation, groups, layout=layout,
                    activation=activation, algo=algo, allow_tf32=allow_tf32, workspace_limit=workspace_limit,
                    out=None if out is None else out.unsqueeze(0), stream=stream)
        return y1.squeeze(0) if out is None else out
    if padding == "same" and len(x.shape) == 4 and len(w.shape) == 4:
        padded = _pad_same_odd(x, w, dilation, layout)
        if padded is not None:  # PyTorch puts the odd extra row/column at the bottom/right
            x, padding = padded
    ctx = x._ctx
    _same_ctx(ctx, (w, "weight"), (bias, "bias"), (out, "out"))
    o = _conv_options(len(x.shape), stride, padding, dilation, groups, layout, activation, algo, allow_tf32,
                      workspace_limit)
    nd = c_int()
    shape = (c_int64 * 8)()
    C.gpucore_conv_output_shape(x.handle, w.handle, byref(o), byref(nd), shape)
    y = _out(out, tuple(shape[i] for i in range(nd.value)), x.dtype, ctx)
    C.gpucore_conv_forward(x.handle, w.handle, _opt(bias, "bias"), y.handle, byref(o), _stream(ctx, stream))
    return y


def conv1d(input: Tensor, weight: Tensor, bias: Optional[Tensor] = None, stride: int = 1,
           padding: Union[int, str] = 0, dilation: int = 1, groups: int = 1, *, layout: str = "ncw",
           activation: str = "none", out: Optional[Tensor] = None, stream: Optional[Stream] = None) -> Tensor:
    """1-D convolution: input [N, C, W] ("ncw") or [N, W, C] ("nwc"), weight [K, C/g, S] (or
    [K, S, C/g]); see :func:`conv2d` for the other arguments."""
    return conv2d(input, weight, bias, stride, padding, dilation, groups, layout=layout, activation=activation,
                  out=out, stream=stream)


def conv2d_backward_data(grad_output: Tensor, weight: Tensor, input_shape: Sequence[int], stride: IntPair = 1,
                         padding: Union[IntPair, str] = 0, dilation: IntPair = 1, groups: int = 1, *,
                         layout: str = "nchw", algo: str = "heuristic", allow_tf32: Optional[bool] = None,
                         out: Optional[Tensor] = None, stream: Optional[Stream] = None) -> Tensor:
    """dx = dL/d input of :func:`conv2d` given dy (apply :func:`gpucore.relu_backward` to dy
    first when the forward fused a ReLU). ``input_shape``: the forward input's shape."""
    dy = _tensor(grad_output, "grad_output")
    w = _tensor(weight, "weight")
    ctx = dy._ctx
    _same_ctx(ctx, (w, "weight"), (out, "out"))
    o = _conv_options(len(dy.shape), stride, padding, dilation, groups, layout, "none", algo, allow_tf32, 0)
    dx = _out(out, to_shape(input_shape, "input_shape"), dy.dtype, ctx)
    C.gpucore_conv_backward_data(dy.handle, w.handle, dx.handle, byref(o), _stream(ctx, stream))
    return dx


def conv2d_backward_filter(grad_output: Tensor, input: Tensor, weight_shape: Sequence[int], stride: IntPair = 1,
                           padding: Union[IntPair, str] = 0, dilation: IntPair = 1, groups: int = 1, *,
                           layout: str = "nchw", algo: str = "heuristic", allow_tf32: Optional[bool] = None,
                           out: Optional[Tensor] = None, stream: Optional[Stream] = None) -> Tensor:
    """dw = dL/d weight of :func:`conv2d` given dy and the forward input. The bias gradient is
    a reduction: ``gpucore.bias_grad(dy)`` for NHWC, ``dy.sum`` over N, H, W for NCHW."""
    dy = _tensor(grad_output, "grad_output")
    x = _tensor(input, "input")
    ctx = dy._ctx
    _same_ctx(ctx, (x, "input"), (out, "out"))
    o = _conv_options(len(dy.shape), stride, padding, dilation, groups, layout, "none", algo, allow_tf32, 0)
    dw = _out(out, to_shape(weight_shape, "weight_shape"), dy.dtype, ctx)
    C.gpucore_conv_backward_filter(dy.handle, x.handle, dw.handle, byref(o), _stream(ctx, stream))
    return dw


def conv2d_backward(grad_output: Tensor, input: Tensor, weight: Tensor, bias_grad: bool = False, stride: IntPair = 1,
                    padding: Union[IntPair, str] = 0, dilation: IntPair = 1, groups: int = 1, *,
                    layout: str = "nchw", input_grad: bool = True, weight_grad: bool = True,
                    stream: Optional[Stream] = None) -> Tuple[Optional[Tensor], Optional[Tensor], Optional[Tensor]]:
    """(dx, dw, db) of :func:`conv2d` with the forward's arguments (an unbatched [C, H, W]
    input and ``padding="same"`` included, as the forward takes them); db ([K], the sum of dy
    over N, H, W) only with ``bias_grad``; each None when not asked for."""
    dy = _tensor(grad_output, "grad_output")
    x = _tensor(input, "input")
    w = _tensor(weight, "weight")
    if len(x.shape) == 3 and len(w.shape) == 4:  # unbatched image: a batch of one
        dx, dw, db = conv2d_backward(dy.unsqueeze(0), x.unsqueeze(0), w, bias_grad, stride, padding, dilation, groups,
                                     layout=layout, input_grad=input_grad, weight_grad=weight_grad, stream=stream)
        return (None if dx is None else dx.squeeze(0)), dw, db
    xp = x
    if padding == "same" and len(x.shape) == 4 and len(w.shape) == 4:
        padded = _pad_same_odd(x, w, dilation, layout)
        if padded is not None:  # the forward ran on x with an extra zero row/column: crop its gradient
            xp, padding = padded
    dx = dw = db = None
    if input_grad:
        dx = conv2d_backward_data(dy, w, xp.shape, stride, padding, dilation, groups, layout=layout, stream=stream)
        if xp is not x:
            dx = dx[tuple(slice(0, n) for n in x.shape)].contiguous()
    if weight_grad:
        dw = conv2d_backward_filter(dy, xp, w.shape, stride, padding, dilation, groups, layout=layout, stream=stream)
    if bias_grad:
        dims = (0, 1, 2) if layout == "nhwc" else (0, 2, 3)
        db = _sum(dy, dim=dims[:len(dy.shape) - 1] if len(dy.shape) == 3 else dims, stream=stream)
    return dx, dw, db


def fallback_stats(ctx: Context, stats_type, get, reset_fn, reason_text, reset: bool) -> Tuple[Any, dict]:
    """Read one of the C library's fallback counters (``gpucore_<area>_get_stats``): the filled
    struct, and its ``fallback_by_reason`` as {reason text: count} for the nonzero reasons;
    ``reset``: zero the counters after reading."""
    s = stats_type()
    s.struct_size = ctypes.sizeof(stats_type)
    get(ctx.handle, byref(s))
    by = {reason_text(i).decode(): n for i, n in enumerate(s.fallback_by_reason) if n}
    if reset:
        reset_fn(ctx.handle)
    return s, by


def matmul_stats(device: DeviceLike = None, reset: bool = False) -> dict:
    """How the device's GEMMs ran (CUDA): ``gemms`` dispatched, ``fallback_gemms`` of them on the
    hand-written kernel because cuBLASLt offered no usable algorithm, and ``fallback_by_reason``
    ({reason text: count}, nonzero ones). ``reset``: zero them after reading."""
    s, by = fallback_stats(get_context(device), MatmulStats, C.gpucore_matmul_get_stats, C.gpucore_matmul_reset_stats,
                           C.gpucore_matmul_fallback_reason_text, reset)
    return {"gemms": s.gemms, "fallback_gemms": s.fallback_gemms, "fallback_by_reason": by}


def conv_stats(device: DeviceLike = None) -> dict:
    """Counters of the device's convolution plan cache (CUDA; zeros on the CPU)."""
    ctx = get_context(device)
    s = ConvStats()
    s.struct_size = ctypes.sizeof(ConvStats)
    C.gpucore_conv_get_stats(ctx.handle, byref(s))
    return {n: getattr(s, n) for n, _ in ConvStats._fields_ if n != "struct_size"}

