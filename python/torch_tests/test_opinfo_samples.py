"""PyTorch's own operator samples (the OpInfo database) driven through gpucore's Python API.

For each of the ops libgpucore shares with PyTorch, every sample input that PyTorch's operator
tests use (``op.sample_inputs("cpu", dtype)``) is translated to a gpucore call, in f32, bf16 and
f16. The reference is torch in float64 on the same values, rounded to the output dtype. Each
sample ends as one of:

* right    -- same shape, same NaN/Inf positions, normalised error within DESIGN.md's contract
              (f32: 1e-5, f16/bf16: 1e-2; integer results exactly equal);
* wrong    -- anything else: the test fails on any wrong sample;
* excepted -- a sample of the short list of deliberate exceptions below (EXCEPTIONS: what gpucore
              does not support on purpose, with the reason); gpucore must refuse it cleanly;
* refused  -- gpucore cannot express the call (an argument PyTorch takes that gpucore has not, or
              a clean gpucore error) and the sample is not a listed exception: the test fails on
              any, so every sample is either right or a deliberate, listed exception.

A refusal is never a crash: the library raises a gpucore error and stays usable. The counts go to
``$GPUCORE_OPINFO_REPORT`` (JSON) when set. Runs where torch with its test helpers is importable
(Debian's python3-torch; scripts/test.sh runs it with that interpreter).
"""
from __future__ import annotations

import collections
import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
opinfo = pytest.importorskip("torch.testing._internal.common_methods_invocations")

import gpucore as g  # noqa: E402

DTYPES = {"float32": (torch.float32, g.float32, 1e-5),
          "bfloat16": (torch.bfloat16, g.bfloat16, 1e-2),
          "float16": (torch.float16, g.float16, 1e-2)}


class Refused(Exception):
    """gpucore cannot express this sample; the message says why."""


# ---------------------------------------------------------------- conversions

def to_g(x, ctx):
    """A torch tensor (or a nested value) as gpucore's equivalent."""
    if isinstance(x, torch.Tensor):
        if x.is_complex():
            raise Refused("complex tensors")
        if x.dtype == torch.bfloat16:
            return g.tensor(x.detach().float().numpy(), dtype=g.bfloat16, device=ctx)
        if x.dtype == torch.bool:
            raise Refused("bool tensors")
        return g.tensor(x.detach().contiguous().numpy(), device=ctx)
    if isinstance(x, (list, tuple)):
        return type(x)(to_g(v, ctx) for v in x)
    return x


def to_f64(x):
    """A torch argument for the float64 reference: floating tensors in float64."""
    if isinstance(x, torch.Tensor):
        return x.detach().double() if x.is_floating_point() else x.detach()
    if isinstance(x, (list, tuple)):
        return type(x)(to_f64(v) for v in x)
    return x


def g_to_np(t):
    return np.asarray(t.numpy(copy=True, convert=True))


# ---------------------------------------------------------------- adapters: one per op

def no_kwargs(kwargs, allowed=()):
    extra = {k: v for k, v in kwargs.items() if k not in allowed}
    if extra:
        raise Refused("keyword argument(s) %s" % ", ".join(sorted(extra)))


def unary(fn):
    def call(x, args, kwargs):
        if args:
            raise Refused("positional arguments beyond the input")
        no_kwargs(kwargs)
        return fn(x)
    return call


def binary(fn):
    def call(x, args, kwargs):
        no_kwargs(kwargs)
        if len(args) != 1:
            raise Refused("%d operands" % (len(args) + 1))
        return fn(x, args[0])
    return call


def g_dtype(d):
    """A torch dtype argument (dtype=) as gpucore's; None stays None."""
    if d is None:
        return None
    names = {torch.float32: g.float32, torch.float64: g.float64, torch.float16: g.float16,
             torch.bfloat16: g.bfloat16}
    if d not in names:
        raise Refused("dtype=%s" % d)
    return names[d]


def add_sub(fn):
    def call(x, args, kwargs):
        no_kwargs(kwargs, ("alpha",))
        return fn(x, args[0], alpha=kwargs.get("alpha", 1))
    return call


def div(x, args, kwargs):
    no_kwargs(kwargs, ("rounding_mode",))
    return g.div(x, args[0], rounding_mode=kwargs.get("rounding_mode"))


def clamp(x, args, kwargs):
    lo = args[0] if len(args) > 0 else kwargs.get("min")
    hi = args[1] if len(args) > 1 else kwargs.get("max")
    return g.clamp(x, lo, hi)


def gelu(x, args, kwargs):
    no_kwargs(kwargs, ("approximate",))
    return g.gelu(x, approximate=kwargs.get("approximate", "none"))


def softmax_like(fn):
    def call(x, args, kwargs):
        dim = args[0] if args else kwargs.get("dim")
        dtype = args[1] if len(args) > 1 else kwargs.get("dtype")
        no_kwargs(kwargs, ("dim", "dtype"))
        return fn(x, dim=dim, dtype=g_dtype(dtype))
    return call


def reduction(fn, has_dtype=False):
    def call(x, args, kwargs):
        dim = args[0] if args else kwargs.get("dim")
        keepdim = args[1] if len(args) > 1 else kwargs.get("keepdim", False)
        no_kwargs(kwargs, ("dim", "keepdim", "dtype") if has_dtype else ("dim", "keepdim"))
        if has_dtype:
            return fn(x, dim=dim, keepdim=keepdim, dtype=g_dtype(kwargs.get("dtype")))
        return fn(x, dim=dim, keepdim=keepdim)
    return call


def matmul(x, args, kwargs):
    no_kwargs(kwargs)
    return g.matmul(x, args[0])


def linear(x, args, kwargs):
    w = args[0]
    bias = args[1] if len(args) > 1 else kwargs.get("bias")
    no_kwargs(kwargs, ("bias",))
    return g.linear(x, w, bias)


def layer_norm(x, args, kwargs):
    shape = args[0]
    w = args[1] if len(args) > 1 else kwargs.get("weight")
    b = args[2] if len(args) > 2 else kwargs.get("bias")
    eps = args[3] if len(args) > 3 else kwargs.get("eps", 1e-5)
    no_kwargs(kwargs, ("weight", "bias", "eps"))
    return g.layer_norm(x, list(shape), w, b, eps=eps)


def cross_entropy(x, args, kwargs):
    no_kwargs(kwargs, ("weight", "label_smoothing", "ignore_index", "reduction"))
    return g.cross_entropy(x, args[0], weight=kwargs.get("weight"), ignore_index=kwargs.get("ignore_index", -100),
                           reduction=kwargs.get("reduction", "mean"),
                           label_smoothing=kwargs.get("label_smoothing", 0.0))


def conv2d(x, args, kwargs):
    names = ("bias", "stride", "padding", "dilation", "groups")
    opts = dict(zip(names, args[1:]))
    opts.update(kwargs)
    no_kwargs(opts, names)
    return g.conv2d(x, args[0], **opts)


def embedding(w, args, kwargs):
    idx = args[0]  # torch's OpInfo passes (weight, indices) in that order
    names = ("padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse")
    no_kwargs(kwargs, names)
    return g.embedding(idx, w, **{k: v for k, v in kwargs.items() if v is not None or k == "padding_idx"})


ADAPTERS = {
    "abs": unary(g.abs), "exp": unary(g.exp), "log": unary(g.log), "neg": unary(g.neg),
    "tanh": unary(g.tanh), "rsqrt": unary(g.rsqrt), "sqrt": unary(g.sqrt), "sigmoid": unary(g.sigmoid),
    "nn.functional.relu": unary(g.relu), "nn.functional.silu": unary(g.silu), "nn.functional.gelu": gelu,
    "add": add_sub(g.add), "sub": add_sub(g.sub), "mul": binary(g.mul), "div": div, "clamp": clamp,
    "softmax": softmax_like(g.softmax), "log_softmax": softmax_like(g.log_softmax),
    "sum": reduction(g.sum, True), "mean": reduction(g.mean, True), "amax": reduction(g.amax), "amin": reduction(g.amin),
    "argmax": reduction(g.argmax), "matmul": matmul, "nn.functional.linear": linear,
    "nn.functional.layer_norm": layer_norm, "nn.functional.cross_entropy": cross_entropy,
    "nn.functional.conv2d": conv2d, "nn.functional.embedding": embedding,
}


# ---------------------------------------------------------------- deliberate exceptions

def _negative_eps(sample):
    eps = sample.args[3] if len(sample.args) > 3 else sample.kwargs.get("eps", 1e-5)
    return eps < 0


NEGATIVE_EPS = ("nn.functional.layer_norm", _negative_eps, "eps < 0: gpucore requires eps >= 0 (var + eps may go "
                                                           "negative, giving NaN)")
# (op name, which samples, why gpucore refuses them on purpose)
EXCEPTIONS = [
    NEGATIVE_EPS,
]


def exception_for(op, sample, exceptions=None):
    """Why this sample is a listed exception (of ``exceptions``, default EXCEPTIONS), or None."""
    for name, matches, why in EXCEPTIONS if exceptions is None else exceptions:
        if name == op.name and matches(sample):
            return why
    return None


# ---------------------------------------------------------------- comparison

def compare(ours, ref, tol):
    """None when ours matches ref within the contract, else what differs."""
    if ours.shape != ref.shape:
        return "shape %s, expected %s" % (ours.shape, ref.shape)
    if ref.dtype.kind in "iub":
        return None if np.array_equal(ours, ref) else "integer result differs"
    o, r = ours.astype(np.float64), ref.astype(np.float64)
    if not np.array_equal(np.isnan(o), np.isnan(r)):
        return "NaN positions differ"
    fin = np.isfinite(r)
    if not np.array_equal(o[~fin & ~np.isnan(r)], r[~fin & ~np.isnan(r)]):
        return "infinities differ"
    if not np.all(np.isfinite(o[fin])):
        return "non-finite where the reference is finite"
    if o.size == 0 or not fin.any():
        return None
    err = np.linalg.norm(o[fin] - r[fin]) / max(np.linalg.norm(r[fin]), 1e-30)
    return None if err <= tol else "normalised error %.3g > %g" % (err, tol)


def reference(op, sample, tdt):
    """torch in float64 on the sample's values, rounded to the output dtype."""
    inp = to_f64(sample.input)
    out = op.op(inp, *to_f64(sample.args), **{k: to_f64(v) for k, v in sample.kwargs.items()})
    if out.is_floating_point():
        out = out.to(tdt)
        return (out.float() if tdt == torch.bfloat16 else out).numpy().astype(np.float64)
    return out.numpy()


def call_ours(fn, sample, ctx, *extra):
    """fn(x, args, kwargs, *extra) on the sample's values as gpucore tensors (extra: torch tensors
    converted too); (its result(s) as numpy, None), or (None, why) when gpucore refused."""
    try:
        x = to_g(sample.input, ctx)
        args = to_g(list(sample.args), ctx)
        kwargs = {k: to_g(v, ctx) for k, v in sample.kwargs.items()}
        ours = fn(x, args, kwargs, *[to_g(e, ctx) for e in extra])
        ctx.synchronize()
        if isinstance(ours, list):
            return [None if o is None else g_to_np(o) for o in ours], None
        return g_to_np(ours), None
    except Refused as e:
        return None, str(e)
    except g.GpucoreError as e:
        return None, "gpucore: " + str(e).split("\n")[0][:160]
    except TypeError as e:
        return None, "binding: " + str(e)[:160]


def run_sample(op, sample, tdt, tol, ctx):
    ours, why = call_ours(ADAPTERS[op.name], sample, ctx)
    if why is not None:
        return "refused", why
    try:
        ref = reference(op, sample, tdt)
    except Exception as e:  # torch itself refuses the float64 form: not a sample we can judge
        return "refused", "no float64 reference: %s" % str(e)[:100]
    why = compare(ours, ref, tol)
    return ("right", "") if why is None else ("wrong", why)


def drive(ops, dtypes_of, samples_of, run, exception_for, report_env, title, min_total, excepted_if=("refused",)):
    """Run every sample of every op (``samples_of(op, tdt)``) through ``run(op, sample, tdt, tol, ctx,
    k)``, classify, print the per-op counts, write the JSON report (``$report_env``) and fail on any
    wrong or unlisted refused sample. A result in ``excepted_if`` with a listed exception counts as
    excepted."""
    ctx = g.default_context()
    counts = collections.defaultdict(collections.Counter)
    reasons = collections.defaultdict(collections.Counter)
    wrong, refused = [], []
    for op in opinfo.op_db:
        if op.name not in ops or op.variant_test_name == "complex":
            continue
        for dname, (tdt, _gdt, tol) in DTYPES.items():
            if tdt not in dtypes_of(op):
                continue
            torch.manual_seed(0)
            for k, sample in enumerate(samples_of(op, tdt)):
                result, why = run(op, sample, tdt, tol, ctx, k)
                excepted = exception_for(op, sample)
                if result in excepted_if and excepted is not None:
                    result, why = "excepted", excepted
                counts[op.name][result] += 1
                if result in ("refused", "excepted"):
                    reasons[op.name][why] += 1
                line = "%s[%s] %s: %s" % (op.name, dname, tuple(sample.input.shape), why)
                if result == "refused":
                    refused.append(line)
                elif result == "wrong":
                    wrong.append(line)
    total = collections.Counter()
    lines = ["%-28s %6s %6s %8s %8s" % (title, "right", "wrong", "excepted", "refused")]
    for name in sorted(counts):
        c = counts[name]
        total.update(c)
        lines.append("%-28s %6d %6d %8d %8d" % (name, c["right"], c["wrong"], c["excepted"], c["refused"]))
    lines.append("%-28s %6d %6d %8d %8d" % ("total", total["right"], total["wrong"], total["excepted"],
                                             total["refused"]))
    print("\n".join(lines))
    report = os.environ.get(report_env)
    if report:
        with open(report, "w") as f:
            json.dump({"counts": {k: dict(v) for k, v in counts.items()},
                       "reasons": {k: dict(v) for k, v in reasons.items()},
                       "wrong": wrong, "refused": refused}, f, indent=1, sort_keys=True)
    assert sum(total.values()) > min_total, "OpInfo gave too few samples: %s" % dict(total)
    assert not wrong, "%d wrong samples:\n%s" % (len(wrong), "\n".join(wrong[:40]))
    assert not refused, "%d samples refused that are not listed in EXCEPTIONS:\n%s" % (
        len(refused), "\n".join(refused[:40]))


def test_opinfo_samples():
    drive(ADAPTERS, lambda op: op.supported_dtypes("cpu"), lambda op, tdt: op.sample_inputs("cpu", tdt),
          lambda op, sample, tdt, tol, ctx, k: run_sample(op, sample, tdt, tol, ctx), exception_for,
          "GPUCORE_OPINFO_REPORT", "op (forward)", 500)
