"""PyTorch's own operator samples (the OpInfo database) driven through gpucore's BACKWARD calls.

The companion of test_opinfo_samples.py (which drives the forwards). For every op that has a
backward in gpucore's API (the activations' *_backward, softmax_backward/log_softmax_backward,
layer_norm_backward, cross_entropy_backward, embedding_backward, matmul_backward,
linear_backward, conv2d_backward), each of PyTorch's autograd samples
(``op.sample_inputs("cpu", dtype, requires_grad=True)``) in f32, bf16 and f16 is run as

    forward (what the backward needs, e.g. softmax's output) -> our backward(grad_output)

with a random grad_output of the output's shape (rounded to the dtype). The reference is torch
autograd in float64 on the same values (inputs and grad_output), each gradient rounded to its
tensor's dtype. Only the gradients our backward gives are compared (e.g. cross-entropy: the
logits'; embedding: the table's). Each sample ends as right, wrong, excepted (a listed
deliberate exception: refused cleanly, or a documented ill-conditioned case) or refused; the test fails on any wrong
sample and any refusal that is not listed. Ops without a backward in gpucore's API (exp, log,
abs, neg, sqrt, rsqrt, add, sub, mul, div, clamp, the reductions) are not driven here.
Counts go to ``$GPUCORE_OPINFO_BACKWARD_REPORT`` (JSON) when set.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
opinfo = pytest.importorskip("torch.testing._internal.common_methods_invocations")

import gpucore as g  # noqa: E402
import test_opinfo_samples as fwd  # noqa: E402  (the forward test's conversions and comparison)

Refused = fwd.Refused


# ---------------------------------------------------------------- adapters: (x, args, kwargs, dy) -> grads
# Each entry: (which torch tensors of the sample get gradients, as paths; our backward).
# A path is "input", ("arg", i) or ("kwarg", name); a path whose value is None is skipped.

def _act(name, **fixed):
    def grads(x, args, kwargs, dy):
        fwd.no_kwargs(kwargs, tuple(fixed))
        extra = {k: kwargs.get(k, v) for k, v in fixed.items()}
        return [getattr(g, name + "_backward")(dy, x, **extra)]
    return ["input"], grads


def _softmax(log_):
    def grads(x, args, kwargs, dy):
        dim = args[0] if args else kwargs.get("dim")
        dtype = args[1] if len(args) > 1 else kwargs.get("dtype")
        fwd.no_kwargs(kwargs, ("dim", "dtype"))
        f = g.log_softmax if log_ else g.softmax
        b = g.log_softmax_backward if log_ else g.softmax_backward
        y = f(x, dim=dim, dtype=fwd.g_dtype(dtype))
        dx = b(dy, y, dim=dim)
        return [dx if dx.dtype == x.dtype else g.cast(dx, x.dtype)]
    return ["input"], grads


def _layer_norm_grads(x, args, kwargs, dy):
    shape = args[0]
    w = args[1] if len(args) > 1 else kwargs.get("weight")
    b = args[2] if len(args) > 2 else kwargs.get("bias")
    eps = args[3] if len(args) > 3 else kwargs.get("eps", 1e-5)
    fwd.no_kwargs(kwargs, ("weight", "bias", "eps"))
    _, mean, rstd = g.layer_norm(x, list(shape), w, b, eps=eps, return_stats=True)
    dx, dw, db = g.layer_norm_backward(dy, x, mean, rstd, w)
    return [dx, dw, db]


def _cross_entropy_grads(x, args, kwargs, dy):
    fwd.no_kwargs(kwargs, ("weight", "label_smoothing", "ignore_index", "reduction"))
    return [g.cross_entropy_backward(x, args[0], dy, weight=kwargs.get("weight"),
                                     ignore_index=kwargs.get("ignore_index", -100),
                                     reduction=kwargs.get("reduction", "mean"),
                                     label_smoothing=kwargs.get("label_smoothing", 0.0))]


def _embedding_grads(w, args, kwargs, dy):
    idx = args[0]
    names = ("padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse")
    fwd.no_kwargs(kwargs, names)
    if kwargs.get("max_norm") is not None:  # the forward renormalises rows of w in place
        g.embedding(idx, w, max_norm=kwargs["max_norm"], norm_type=kwargs.get("norm_type", 2.0))
    return [g.embedding_backward(dy, idx, w.shape[0], padding_idx=kwargs.get("padding_idx"),
                                 scale_grad_by_freq=bool(kwargs.get("scale_grad_by_freq", False)))]


def _matmul_grads(a, args, kwargs, dy):
    fwd.no_kwargs(kwargs)
    return list(g.matmul_backward(dy, a, args[0]))


def _linear_grads(x, args, kwargs, dy):
    w = args[0]
    bias = args[1] if len(args) > 1 else kwargs.get("bias")
    fwd.no_kwargs(kwargs, ("bias",))
    dx, dw, db = g.linear_backward(dy, x, w, bias_grad=bias is not None)
    return [dx, dw, db]


def _conv2d_grads(x, args, kwargs, dy):
    names = ("bias", "stride", "padding", "dilation", "groups")
    opts = dict(zip(names, args[1:]))
    opts.update(kwargs)
    fwd.no_kwargs(opts, names)
    bias = opts.pop("bias", None)
    return list(g.conv2d_backward(dy, x, args[0], bias_grad=bias is not None, **opts))


BACKWARDS = {
    "nn.functional.relu": _act("relu"), "nn.functional.silu": _act("silu"),
    "nn.functional.gelu": _act("gelu", approximate="none"), "sigmoid": _act("sigmoid"), "tanh": _act("tanh"),
    "softmax": _softmax(0), "log_softmax": _softmax(1),
    "nn.functional.layer_norm": (["input", ("arg", 1), ("arg", 2)], _layer_norm_grads),
    "nn.functional.cross_entropy": (["input"], _cross_entropy_grads),
    "nn.functional.embedding": (["input"], _embedding_grads),
    "matmul": (["input", ("arg", 0)], _matmul_grads),
    "nn.functional.linear": (["input", ("arg", 0), ("arg", 1)], _linear_grads),
    "nn.functional.conv2d": (["input", ("arg", 0), ("arg", 1)], _conv2d_grads),
}


def _layer_norm_kw_paths(sample):
    """layer_norm's weight/bias may come as keywords."""
    return ["input", ("arg", 1) if len(sample.args) > 1 else ("kwarg", "weight"),
            ("arg", 2) if len(sample.args) > 2 else ("kwarg", "bias")]


def _conv_linear_bias_path(sample):
    return ("arg", 1) if len(sample.args) > 1 else ("kwarg", "bias")


def grad_paths(op, sample):
    paths = list(BACKWARDS[op.name][0])
    if op.name == "nn.functional.layer_norm":
        paths = _layer_norm_kw_paths(sample)
    elif op.name in ("nn.functional.linear", "nn.functional.conv2d"):
        paths[2] = _conv_linear_bias_path(sample)
    return paths


def _get(sample_input, args, kwargs, path):
    if path == "input":
        return sample_input
    kind, key = path
    if kind == "arg":
        return args[key] if key < len(args) else None
    return kwargs.get(key)


# ---------------------------------------------------------------- deliberate exceptions

def _tiny_norm(sample):
    """LayerNorm over 1 or 2 elements: xhat is 0 (one element) or +-sqrt(var / (var + eps)) (two),
    so dweight (one) and dx (two) are pure cancellation, of the size of eps / var: the f32
    statistics (mean, rstd) saved by the forward cannot resolve them. torch's own f32 backward
    misses its f64 one there as well (dx by 3e-3, dweight 1e-5 against 1e-15)."""
    return int(np.prod(sample.args[0])) <= 2


# (op name, which samples, why): a listed sample may be refused or inexact, and is counted apart.
EXCEPTIONS = [
    fwd.NEGATIVE_EPS,
    ("nn.functional.layer_norm", _tiny_norm, "normalized_shape of 1 or 2 elements: the gradient is a "
                                             "cancellation below f32's resolution (torch's f32 misses too)"),
]


# ---------------------------------------------------------------- one sample

def _round(t, tdt):
    """A float64 torch tensor rounded to tdt, as a float64 numpy array."""
    r = t.detach().to(tdt)
    return (r.float() if tdt == torch.bfloat16 else r).numpy().astype(np.float64)


def reference(op, sample, paths, seed):
    """(grad_output rounded to the output dtype, the float64 gradients rounded to their tensors' dtypes)."""
    inp = fwd.to_f64(sample.input)
    args = list(fwd.to_f64(list(sample.args)))
    kwargs = {k: fwd.to_f64(v) for k, v in sample.kwargs.items()}
    leaves = []
    for p in paths:
        t = _get(inp, args, kwargs, p)
        if t is not None:
            t = t.clone().requires_grad_(True)
            if p == "input":
                inp = t
            elif p[0] == "arg":
                args[p[1]] = t
            else:
                kwargs[p[1]] = t
        leaves.append(t)
    out = op.op(inp, *args, **kwargs)
    odt = sample.input.dtype
    if op.name in ("softmax", "log_softmax"):
        d = sample.args[1] if len(sample.args) > 1 else sample.kwargs.get("dtype")
        odt = d if d is not None else odt
    gen = torch.Generator().manual_seed(seed)
    dy = torch.randn(out.shape, generator=gen, dtype=torch.float64).to(odt).double()
    want = [t for t in leaves if t is not None]
    grads = torch.autograd.grad(out, want, dy, allow_unused=True)
    it = iter(grads)
    ref = []
    for p, t in zip(paths, leaves):
        if t is None:
            ref.append(None)
            continue
        gr = next(it)
        src = _get(sample.input, list(sample.args), sample.kwargs, p)
        gr = torch.zeros_like(t) if gr is None else gr
        ref.append(_round(gr, src.dtype))
    return dy.to(odt), ref


def run_sample(op, sample, tdt, tol, ctx, seed):
    paths = grad_paths(op, sample)
    try:
        dy_t, ref = reference(op, sample, paths, seed)
    except Exception as e:  # torch itself refuses the float64 form: not a sample we can judge
        return "refused", "no float64 reference: %s" % str(e)[:100]
    ours, why = fwd.call_ours(BACKWARDS[op.name][1], sample, ctx, dy_t)
    if why is not None:
        return "refused", why
    for i, (o, r) in enumerate(zip(ours, ref)):
        if r is None:
            continue
        if o is None:
            return "wrong", "gradient %d (%s) not given" % (i, paths[i])
        why = fwd.compare(o, r, tol)
        if why is not None:
            return "wrong", "gradient %d (%s): %s" % (i, paths[i], why)
    return "right", ""


def test_opinfo_backward_samples():
    fwd.drive(BACKWARDS, lambda op: op.supported_backward_dtypes("cpu") if op.supports_autograd else (),
              lambda op, tdt: op.sample_inputs("cpu", tdt, requires_grad=True),
              lambda op, sample, tdt, tol, ctx, k: run_sample(op, sample, tdt, tol, ctx, seed=k),
              lambda op, sample: fwd.exception_for(op, sample, EXCEPTIONS),
              "GPUCORE_OPINFO_BACKWARD_REPORT", "op (backward)", 250, excepted_if=("refused", "wrong"))
