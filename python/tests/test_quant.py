"""Quantized formats against their references, bit for bit: GGUF blocks against the gguf
package's numpy quantize/dequantize (ggml's reference C functions mirrored), bitsandbytes'
NF4 / FP4 / int8 rows against bitsandbytes' documented code books, packing and rounding written
here in numpy."""
from __future__ import annotations

import numpy as np
import pytest

import gpucore

try:
    import gguf
    T = gguf.GGMLQuantizationType
except ImportError:  # scripts/setup.sh installs it; the bitsandbytes checks below run without it
    gguf = None
needs_gguf = pytest.mark.skipif(gguf is None, reason="the gguf package is not installed (scripts/setup.sh installs it)")

GGUF_WRITE = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0"]
GGUF_READ = GGUF_WRITE + ["q4_k", "q5_k", "q6_k"]


def bits(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def weights(rng, rows, cols):
    # mixed magnitudes per block, some negative-dominated blocks, a zero block
    x = rng.standard_normal((rows, cols)).astype(np.float32) * rng.uniform(0.01, 3.0, (rows, 1)).astype(np.float32)
    x.reshape(-1)[: min(32, x.size)] = 0.0
    return x


def gp(x, dtype=None):
    return gpucore.from_numpy(np.ascontiguousarray(x)) if dtype is None else gpucore.from_numpy(x).to(dtype)


@needs_gguf
@pytest.mark.parametrize("fmt", GGUF_WRITE)
@pytest.mark.parametrize("shape", [(3, 64), (7, 96), (1, 32)])
def test_gguf_quantize_matches_gguf_package(fmt, shape):
    rng = np.random.default_rng(hash((fmt, shape)) % 2**32)
    x = weights(rng, *shape)
    ref = gguf.quantize(x, getattr(T, fmt.upper())).reshape(-1)
    q = gpucore.quantize(gp(x), fmt).numpy()
    assert q.dtype == np.uint8 and q.shape == ref.shape
    assert np.array_equal(q, ref), "first differing byte at %d" % int(np.argmax(q != ref))
    back = gpucore.dequantize(gpucore.from_numpy(q), fmt, shape).numpy()
    assert np.array_equal(bits(back), bits(gguf.dequantize(ref.reshape(shape[0], -1), getattr(T, fmt.upper()))))


def random_blocks(rng, fmt, nblocks):
    t = getattr(T, fmt.upper())
    be, bb = gguf.GGML_QUANT_SIZES[t]
    raw = rng.integers(0, 256, size=(nblocks, bb), dtype=np.uint8)
    # keep the f16 scales finite (random bytes would give Inf/NaN scales now and then)
    scale_at = {"q4_0": [0], "q4_1": [0, 2], "q5_0": [0], "q5_1": [0, 2], "q8_0": [0], "q4_k": [0, 2],
                "q5_k": [0, 2], "q6_k": [208]}[fmt]
    for o in scale_at:
        raw[:, o + 1] &= 0x3b
    return raw, be


@needs_gguf
@pytest.mark.parametrize("fmt", GGUF_READ)
def test_gguf_dequantize_matches_gguf_package(fmt):
    rng = np.random.default_rng(sum(map(ord, fmt)))
    raw, be = random_blocks(rng, fmt, 24)
    rows = 4
    ref = gguf.dequantize(raw.reshape(rows, -1), getattr(T, fmt.upper()))
    for dt in ("float32", "bfloat16"):
        out = gpucore.dequantize(gpucore.from_numpy(raw.reshape(-1)), fmt, ref.shape, dtype=dt)
        got = out.to("float32").numpy()
        want = ref if dt == "float32" else gpucore.from_numpy(ref).to("bfloat16").to("float32").numpy()
        assert np.array_equal(bits(got), bits(want)), "%s %s: first difference at %d" % (
            fmt, dt, int(np.argmax(bits(got) != bits(want))))


# ------------------------------------------------------------------ bitsandbytes, in numpy
# bitsandbytes' code books (functional.get_4bit_type) and its blockwise 4-bit rule: f32 absmax
# per block of the flattened tensor, x * (1 / absmax) clamped to [-1, 1], the nearest code
# (argmin: the first on a tie), two indices per byte with the earlier value high, an odd
# count padded with a quantized 0.
NF4 = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                0.7229568362236023, 1.0], dtype=np.float32)
FP4 = np.array([0, 0.0625, 8, 12, 4, 6, 2, 3, -0.0, -0.0625, -8, -12, -4, -6, -2, -3], dtype=np.float32) / np.float32(12)
CODES = {"nf4": NF4, "fp4": FP4}


def bnb4_quantize_ref(x, fmt, block):
    code = CODES[fmt]
    flat = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    n = flat.size
    nb = -(-n // block)
    absmax = np.array([np.abs(flat[b * block:(b + 1) * block]).max() for b in range(nb)], dtype=np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = (np.float32(1) / absmax).astype(np.float32)
        scaled = np.clip(flat * np.repeat(inv, block)[:n], np.float32(-1), np.float32(1)).astype(np.float32)
    if n % 2:
        scaled = np.concatenate([scaled, np.zeros(1, np.float32)])
    idx = np.argmin(np.abs(scaled[:, None] - code[None, :]), axis=1).astype(np.uint8)
    packed = (idx[0::2] << 4) | idx[1::2]
    pad = (-packed.size) % 4
    return np.concatenate([packed, np.zeros(pad, np.uint8), absmax.view(np.uint8)])


def bnb4_dequantize_ref(raw, fmt, n, block):
    code = CODES[fmt]
    nbytes = (n + 1) // 2
    packed = raw[:nbytes]
    idx = np.stack([packed >> 4, packed & 15], axis=1).reshape(-1)[:n]
    off = nbytes + (-nbytes) % 4
    absmax = raw[off:].view(np.float32)
    return (code[idx] * np.repeat(absmax, block)[:n]).astype(np.float32)


def int8_quantize_ref(x):
    x = np.ascontiguousarray(x, dtype=np.float32)
    scb = np.abs(x).max(axis=1).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.rint(x * (np.float32(127) / scb)[:, None])
    q = np.nan_to_num(q).astype(np.int8)
    pad = (-q.size) % 4
    return np.concatenate([q.view(np.uint8).reshape(-1), np.zeros(pad, np.uint8), scb.view(np.uint8)])


@pytest.mark.parametrize("fmt", ["nf4", "fp4"])
@pytest.mark.parametrize("shape,block", [((8, 64), 64), ((5, 77), 64), ((3, 33), 32), ((2, 3000), 4096),
                                         ((16, 128), 256), ((1, 7), 64)])
def test_bnb_4bit_matches_reference(fmt, shape, block):
    rng = np.random.default_rng(hash((fmt, shape, block)) % 2**32)
    x = weights(rng, *shape)
    n = x.size
    ref = bnb4_quantize_ref(x, fmt, block)
    assert gpucore.quant_size(fmt, shape, block) == ref.size
    q = gpucore.quantize(gp(x), fmt, block_size=block).numpy()
    assert np.array_equal(q, ref), "first differing byte at %d" % int(np.argmax(q != ref))
    back = gpucore.dequantize(gpucore.from_numpy(q), fmt, shape, block_size=block).numpy().reshape(-1)
    assert np.array_equal(bits(back), bits(bnb4_dequantize_ref(ref, fmt, n, block)))


@pytest.mark.parametrize("fmt", ["nf4", "fp4", "int8", "q4_0", "q8_0"])
def test_bf16_input_quantizes_its_values(fmt):
    rng = np.random.default_rng(5)
    x = weights(rng, 4, 64)
    xb = gp(x, "bfloat16")
    exact = xb.to("float32")  # the bf16 values, exactly, as f32
    assert np.array_equal(gpucore.quantize(xb, fmt).numpy(), gpucore.quantize(exact, fmt).numpy())


@pytest.mark.parametrize("shape", [(6, 40), (1, 1), (3, 257)])
def test_int8_rows_match_reference(shape):
    rng = np.random.default_rng(shape[1])
    x = weights(rng, *shape)
    ref = int8_quantize_ref(x)
    q = gpucore.quantize(gp(x), "int8").numpy()
    assert np.array_equal(q, ref)
    n = x.size
    qs = ref[:n].view(np.int8).reshape(shape).astype(np.float32)
    scb = ref[n + (-n) % 4:].view(np.float32)
    want = (qs * scb[:, None]) * np.float32(7.874015718698502e-3)
    back = gpucore.dequantize(gpucore.from_numpy(q), "int8", shape).numpy()
    assert np.array_equal(bits(back), bits(want))


def test_sizes_and_refusals():
    assert gpucore.quant_size("q4_0", (2, 64)) == 2 * 2 * 18
    assert gpucore.quant_size("q6_k", (1, 512)) == 2 * 210
    assert gpucore.quant_size("nf4", (3, 5)) == 8 + 4  # 8 index bytes (15 values, padded), one absmax
    with pytest.raises(gpucore.InvalidArgumentError, match="whole blocks of 32"):
        gpucore.quant_size("q4_0", (2, 48))
    with pytest.raises(gpucore.InvalidArgumentError, match="power of two"):
        gpucore.quant_size("nf4", (2, 64), block_size=48)
    with pytest.raises(gpucore.InvalidArgumentError, match="fixed block"):
        gpucore.quant_size("q8_0", (2, 64), block_size=64)
    with pytest.raises(gpucore.InvalidArgumentError, match="not one of"):
        gpucore.quant_size("q3_k", (2, 256))
    x = np.ones((2, 64), np.float32)
    x[1, 5] = np.nan
    with pytest.raises(gpucore.InvalidArgumentError, match=r"x\[69\] \(row 1, column 5\) is NaN or infinite"):
        gpucore.quantize(gp(x), "q4_0")
    x[1, 5] = np.inf
    with pytest.raises(gpucore.InvalidArgumentError, match="NaN or infinite"):
        gpucore.quantize(gp(x), "nf4")
    with pytest.raises(gpucore.NotSupportedError, match="Q4_K is not implemented"):
        gpucore.quantize(gp(np.ones((1, 256), np.float32)), "q4_k")
    with pytest.raises(gpucore.DtypeMismatchError, match="must be u8"):
        gpucore.dequantize(gp(np.ones(36, np.float32)), "q4_0", (1, 64))
    with pytest.raises(gpucore.ShapeMismatchError, match="takes 36"):
        gpucore.dequantize(gpucore.from_numpy(np.zeros(35, np.uint8)), "q4_0", (1, 64))
    with pytest.raises(gpucore.DtypeMismatchError):
        gpucore.quantize(gpucore.from_numpy(np.ones((1, 32), np.int32)), "q8_0")
    # the library is still usable
    assert gpucore.quantize(gp(np.ones((1, 32), np.float32)), "q8_0").numpy().size == 34
