"""The CPU backend's portable bodies (GPUCORE_CPU_PORTABLE=1, as on a CPU without AVX2) against
its AVX2 bodies, in two processes on the same data: the reductions' sums give the same bits
(cpu_vec.c's fixed lanes and fold are the same in both), so do bf16 and f32 add/sub/mul/div, the
softmax backward and attention forward/backward (cpu_attention.c's AVX2 build of its tiles: both
processes run GPUCORE_CPU_ATTENTION=tiles, since the portable build has no oneDNN GEMM for the
whole-head path, whose accuracy test_attention checks against float64), the elementwise math agrees
within the accuracy contract (SLEEF/libmvec against libm)."""
import os
import subprocess
import sys

import numpy as np

SCRIPT = r"""
import sys, numpy as np, gpucore
ctx = gpucore.Context("cpu")
m = ctx.empty((301, 1037)).uniform_(-1, 1, seed=3)
b = ctx.empty((4099,), "bfloat16").uniform_(-3, 3, seed=4)
x = ctx.empty((4099,)).uniform_(-6, 6, seed=5)
parts = [gpucore.sum(m), gpucore.sum(m, dim=0), gpucore.sum(m, dim=1), gpucore.mean(m, dim=1),
         gpucore.cast(gpucore.sum(b, dim=0), "float32")]
ew = [gpucore.gelu(x), gpucore.gelu(x, approximate="tanh"), gpucore.silu(x), gpucore.sigmoid(x),
      gpucore.tanh(x), gpucore.exp(x), gpucore.gelu_backward(x, x), gpucore.cast(gpucore.cast(x, "bfloat16"), "float32")]
# the row ops' vector primitives (max, exp-sum, scale, mean/variance, normalize) on rows with and
# without a tail, and the unary ops with a vector body
w = ctx.empty((1037,)).uniform_(-1, 1, seed=13)
for r in (m, ctx.empty((9, 33)).uniform_(-5, 5, seed=14)):
    ew += [gpucore.softmax(r), gpucore.log_softmax(r), gpucore.amax(r, dim=1), gpucore.amin(r, dim=1)]
ew += [gpucore.layer_norm(m, (1037,), w, w), gpucore.log(gpucore.exp(x)), gpucore.sqrt(gpucore.exp(x)),
       gpucore.rsqrt(gpucore.exp(x))]
c = ctx.empty((4099,), "bfloat16").uniform_(-3, 3, seed=6)
bits = [gpucore.cast(op(b, c), "float32") for op in (gpucore.add, gpucore.sub, gpucore.mul, gpucore.div)]
x2 = ctx.empty((4099,)).uniform_(-6, 6, seed=15)  # dense f32 arithmetic (16/32 lanes and the tail)
bits += [op(x, x2) for op in (gpucore.add, gpucore.sub, gpucore.mul, gpucore.div)]
ew.append(gpucore.bias_act(x, x2, "silu"))  # the same with a fused activation
h, h2 = gpucore.cast(x, "float16"), gpucore.cast(ctx.empty((4099,)).uniform_(-6, 6, seed=12), "float16")
bits += [gpucore.cast(h, "float32"), gpucore.cast(gpucore.add(h, h2), "float32")]  # F16C or the portable rounding
bits.append(gpucore.softmax_backward(m, ctx.empty((301, 1037)).uniform_(0, 1, seed=7), dim=1))
q, k, v, g = (ctx.empty((8, 4, 100, 16)).uniform_(-2, 2, seed=s) for s in (8, 9, 10, 11))
o, l = gpucore.scaled_dot_product_attention(q, k, v, is_causal=True, return_stats=True)
bits += [o, l, *gpucore.scaled_dot_product_attention_backward(g, q, k, v, o, l, is_causal=True)]
np.savez(sys.argv[1], sums=np.concatenate([p.numpy().ravel() for p in parts]),
         ew=np.concatenate([e.numpy().ravel() for e in ew]),
         bits=np.concatenate([e.numpy().ravel() for e in bits]))
"""


def _run(tmp_path, name, portable, no_avx512=False):
    env = dict(os.environ)
    env.pop("GPUCORE_CPU_PORTABLE", None)
    env.pop("GPUCORE_CPU_NO_AVX512", None)
    env["GPUCORE_CPU_ATTENTION"] = "tiles"  # the tiled kernel's bodies in both processes (see above)
    if portable:
        env["GPUCORE_CPU_PORTABLE"] = "1"
    if no_avx512:
        env["GPUCORE_CPU_NO_AVX512"] = "1"
    out = str(tmp_path / (name + ".npz"))
    subprocess.run([sys.executable, "-c", SCRIPT, out], env=env, check=True, timeout=300)
    return np.load(out)


def test_portable_and_simd_bodies_agree(tmp_path):
    simd = _run(tmp_path, "simd", False)
    port = _run(tmp_path, "portable", True)
    assert np.array_equal(simd["sums"].view(np.uint32), port["sums"].view(np.uint32))
    # dense bf16 arithmetic and the softmax backward's products: the same bits in every body
    assert np.array_equal(simd["bits"].view(np.uint32), port["bits"].view(np.uint32))
    a, b = simd["ew"].astype(np.float64), port["ew"].astype(np.float64)
    assert not np.isnan(a).any() and not np.isnan(b).any()
    assert np.max(np.abs(a - b)) / np.max(np.abs(b)) < 1e-6


def test_avx2_and_avx512_bodies_agree(tmp_path):
    """The 16-lane AVX-512 bodies (bf16 arithmetic and rounding, the exp-based activations and unary
    math, the row ops' primitives) against the AVX2 ones
    (GPUCORE_CPU_NO_AVX512=1): the same bits everywhere (on a CPU without AVX-512 both runs take
    the AVX2 bodies)."""
    wide = _run(tmp_path, "avx512", False)
    avx2 = _run(tmp_path, "avx2", False, no_avx512=True)
    for key in ("sums", "ew", "bits"):
        assert np.array_equal(wide[key].view(np.uint32), avx2[key].view(np.uint32)), key
