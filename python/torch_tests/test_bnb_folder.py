"""Hugging Face folders in bitsandbytes' 4-bit layout: read as they are, written by save_pretrained.

bitsandbytes' layout (transformers' save_pretrained of a model loaded with
BitsAndBytesConfig(load_in_4bit=True); bitsandbytes' QuantState.as_dict(packed=True)): for each
quantized linear layer <m>, <m>.weight is u8 [ceil(n/2), 1] holding the packed 4-bit indices of the
flattened [out, in] weight (the earlier value in the high nibble), <m>.weight.absmax f32 [nblocks],
<m>.weight.quant_map f32 [16] (the code book), <m>.weight.quant_state.bitsandbytes__nf4|fp4 u8 bytes
of json.dumps({"quant_type", "blocksize", "dtype", "shape"}); config.json has transformers'
quantization_config. This file checks:
- a model loaded with quantize="nf4"/"fp4" and saved gives that layout, every key, dtype, shape and
  the JSON as bitsandbytes writes them, the packed indices and absmax equal to a numpy
  definition of the format written here (bitsandbytes' code books, blocks of 64, nearest code of
  x / absmax) on the file's weights; loading the saved folder gives the same bytes and logits;
- a folder made by transformers + bitsandbytes (fixtures/bnb-nf4-llama, made by
  make_bnb_fixture.py with PyTorch 2.9 and bitsandbytes 0.50) loads with logits equal to those
  transformers computed with bitsandbytes on the CPU (saved beside it);
- the same with double quantization (fixtures/bnb-nf4-dq-llama: bnb_4bit_use_double_quant, the
  absmax stored as u8 codes of nested_quant_map in blocks of 256 with an f32 nested_absmax each
  and nested_offset in the JSON): the absmax we hold equals, bit for bit, the f32 definition
  written here (code[q] * nested_absmax[block // 256], then + offset); saved, it is a plain
  NF4 folder whose config says so;
- an 8-bit folder (fixtures/bnb-int8-llama, load_in_8bit: <m>.weight int8 [out, in], <m>.SCB f32
  [out], <m>.weight_format 0) loads as INT8_ROW holding the file's int8 bytes and SCB; its
  dequantized weights are the float64 definition int8 * SCB / 127 to within f32 rounding, and its
  logits those of transformers holding those weights dense; an int8 model saves in that layout
  (the fixture saved again gives its tensors bit for bit);
- what is not implemented (another code book, llm_int8_has_fp16_weight) and broken folders (a
  missing or misshapen tensor, a quant_state that disagrees) are refused by name;
- where bitsandbytes is importable (PyTorch >= 2.2), transformers loads our saved folder with
  logits equal to ours, and our dequantized weights of the double-quantized fixture are
  bitsandbytes' dequantize_4bit's bit for bit, those of the 8-bit fixture its
  int8_vectorwise_dequant's, and transformers loads our saved int8 folder with our int8 bytes and SCB (skipped otherwise: Debian's torch 1.13 has no
  bitsandbytes).
"""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
st_torch = pytest.importorskip("safetensors.torch")
hf_fixtures = pytest.importorskip("hf_fixtures")

import gpucore  # noqa: E402
from gpucore import models  # noqa: E402

DEVICE = os.environ.get("GPUCORE_TEST_DEVICE", "cpu")
FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "bnb-nf4-llama")
FIXTURE_DQ = os.path.join(os.path.dirname(__file__), "fixtures", "bnb-nf4-dq-llama")
FIXTURE_INT8 = os.path.join(os.path.dirname(__file__), "fixtures", "bnb-int8-llama")
transformers.logging.set_verbosity_error()
rel, to_np = hf_fixtures.rel, hf_fixtures.to_np

# bitsandbytes.functional.get_4bit_type: the lists, divided by their largest magnitude in f32
NF4 = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
       -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
       0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
       0.7229568362236023, 1.0]
FP4 = [0, 0.0625, 8.0, 12.0, 4.0, 6.0, 2.0, 3.0, -0, -0.0625, -8.0, -12.0, -4.0, -6.0, -2.0, -3.0]


def code_book(fmt):
    c = np.array(NF4 if fmt == "nf4" else FP4, np.float32)
    return c / np.abs(c).max()


# transformers' BitsAndBytesConfig(load_in_4bit=True, ...).to_dict() (4.44 .. 4.57)
def bnb_config(fmt, compute="bfloat16"):
    return {"_load_in_4bit": True, "_load_in_8bit": False, "bnb_4bit_compute_dtype": compute,
            "bnb_4bit_quant_storage": "uint8", "bnb_4bit_quant_type": fmt, "bnb_4bit_use_double_quant": False,
            "llm_int8_enable_fp32_cpu_offload": False, "llm_int8_has_fp16_weight": False,
            "llm_int8_skip_modules": None, "llm_int8_threshold": 6.0, "load_in_4bit": True, "load_in_8bit": False,
            "quant_method": "bitsandbytes"}


def quantize_4bit(w, fmt, block):
    """(packed u8 [ceil(n/2), 1], absmax f32 [nblocks]): the format's definition in numpy (f32 scale
    x * (1 / absmax), the nearest code, the lowest index on a tie), indices packed high nibble first."""
    x = np.asarray(w, np.float32).reshape(-1)
    n = x.size
    nb = -(-n // block)
    xp = np.zeros(nb * block, np.float32)
    xp[:n] = x
    blocks = xp.reshape(nb, block)
    absmax = np.abs(blocks).max(axis=1).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.clip(blocks * (np.float32(1) / absmax)[:, None], -1, 1).astype(np.float32)
    idx = np.abs(s[..., None] - code_book(fmt)).argmin(axis=-1).reshape(-1)[:n].astype(np.uint8)
    if n % 2:
        idx = np.concatenate([idx, np.zeros(1, np.uint8)])
    return ((idx[0::2] << 4) | idx[1::2]).reshape(-1, 1), absmax


def load_st(path):
    """A safetensors file as numpy arrays (bf16 as its uint16 bits; numpy has no bf16)."""
    return {k: (v.view(torch.int16).numpy().view(np.uint16) if v.dtype == torch.bfloat16 else v.numpy())
            for k, v in st_torch.load_file(path).items()}


def save_st(tensors, path):
    st_torch.save_file({k: (torch.from_numpy(v.view(np.int16)).view(torch.bfloat16) if v.dtype == np.uint16
                            else torch.from_numpy(np.ascontiguousarray(v).reshape(v.shape)))  # 0-d stays 0-d
                       for k, v in tensors.items()},
                       path, metadata={"format": "pt"})


def linears(arch):
    return {"gpt2": ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"),
            "llama": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")}[arch]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return tmp_path_factory.mktemp("bnb_folder")


_saved = {}


def saved(store, arch, fmt, block=0, dtype=None, **overrides):
    """(dense folder, transformers model, model loaded with quantize=fmt, its save_pretrained folder)."""
    key = (arch, fmt, block, dtype, tuple(sorted(overrides.items())))
    if key not in _saved:
        folder, hf = hf_fixtures.make_model(arch, store, **overrides)
        m = models.from_pretrained(folder, device=DEVICE, quantize=fmt, block_size=block, dtype=dtype)
        out = os.path.join(str(store), "%s-%s-%d-%s-%s-saved" % (arch, fmt, block, dtype, "-".join(sorted(overrides))))
        m.save_pretrained(out)
        _saved[key] = (folder, hf, m, out)
    return _saved[key]


def ids_for(vocab, B=2, T=10, seed=0):
    return np.random.default_rng(seed).integers(0, vocab, size=(B, T)).astype(np.int64)


@pytest.mark.parametrize("arch,fmt,block", [("llama", "nf4", 0), ("llama", "fp4", 128), ("gpt2", "nf4", 0)])
def test_saved_layout(store, arch, fmt, block):
    folder, hf, m, out = saved(store, arch, fmt, block)
    blocksize = block or 64
    with open(os.path.join(out, "config.json")) as f:
        cfg = json.load(f)
    with open(os.path.join(folder, "config.json")) as f:
        dense_cfg = json.load(f)
    assert cfg["quantization_config"] == bnb_config(fmt)
    assert cfg["torch_dtype"] == "bfloat16"
    assert {k: v for k, v in cfg.items() if k not in ("quantization_config", "torch_dtype")} == \
        {k: v for k, v in dense_cfg.items() if k != "torch_dtype"}
    got = load_st(os.path.join(out, "model.safetensors"))
    dense = load_st(os.path.join(folder, "model.safetensors"))
    want_keys = set()
    for name, w in dense.items():
        if name.endswith(".weight") and name[:-7].endswith(linears(arch)):
            want_keys |= {name, name + ".absmax", name + ".quant_map", name + ".quant_state.bitsandbytes__" + fmt}
            wo = w.T if arch == "gpt2" else w  # Linear4bit holds [out, in]
            packed, absmax = quantize_4bit(wo, fmt, blocksize)
            assert got[name].dtype == np.uint8 and got[name].shape == packed.shape, name
            np.testing.assert_array_equal(got[name], packed, err_msg=name)
            assert got[name + ".absmax"].dtype == np.float32
            np.testing.assert_array_equal(got[name + ".absmax"], absmax, err_msg=name)
            qm = got[name + ".quant_map"]
            assert qm.dtype == np.float32 and qm.tobytes() == code_book(fmt).tobytes()
            state = got[name + ".quant_state.bitsandbytes__" + fmt]
            assert state.dtype == np.uint8 and state.ndim == 1
            want = {"quant_type": fmt, "blocksize": blocksize, "dtype": "bfloat16", "shape": list(wo.shape)}
            assert state.tobytes() == json.dumps(want).encode()  # as pack_dict_to_tensor writes it
        elif not name.endswith((".attn.bias", ".attn.masked_bias")):
            want_keys.add(name)
            assert got[name].dtype == np.uint16 and got[name].shape == w.shape, name  # bf16
    assert set(got) == want_keys


@pytest.mark.parametrize("arch,fmt,block", [("llama", "nf4", 0), ("llama", "fp4", 128), ("gpt2", "nf4", 0)])
def test_round_trip(store, arch, fmt, block):
    _, _, m, out = saved(store, arch, fmt, block)
    m2 = models.from_pretrained(out, device=DEVICE)
    assert m2.quantization == fmt and m2.dtype == gpucore.bfloat16
    assert m2.memory_footprint() == m.memory_footprint()
    a, b = m.named_parameters(), m2.named_parameters()
    assert set(a) == set(b)
    for k in a:
        assert to_np(a[k]).tobytes() == to_np(b[k]).tobytes(), k
    ids = ids_for(m.vocab_size)
    np.testing.assert_array_equal(to_np(m2(ids)), to_np(m(ids)))
    # saved again: the same files, byte for byte
    again = out + "-again"
    m2.save_pretrained(again)
    for f in ("config.json", "model.safetensors"):
        with open(os.path.join(out, f), "rb") as x, open(os.path.join(again, f), "rb") as y:
            assert x.read() == y.read(), f
    # an f32 compute dtype when asked; config.json's bnb_4bit_compute_dtype otherwise
    assert models.from_pretrained(out, device=DEVICE, dtype=gpucore.float32).dtype == gpucore.float32


def test_fixture_made_by_bitsandbytes():
    """The folder transformers + bitsandbytes saved (make_bnb_fixture.py): logits equal to theirs."""
    m = models.from_pretrained(FIXTURE, device=DEVICE)
    with open(os.path.join(FIXTURE, "config.json")) as f:
        qc = json.load(f)["quantization_config"]
    assert m.quantization == qc["bnb_4bit_quant_type"] == "nf4"
    assert m.dtype == gpucore.float32  # bnb_4bit_compute_dtype
    ref = np.load(os.path.join(FIXTURE, "reference.npz"))
    out = to_np(m(ref["ids"])).astype(np.float64)
    err = rel(out, ref["logits"])
    print("our loader on the folder bitsandbytes wrote (%s): rel err %.3g" % (ref["versions"], err))
    assert err < 1e-5, err
    # and our bytes hold exactly the file's packed indices and absmax
    st = load_st(os.path.join(FIXTURE, "model.safetensors"))
    params = m.named_parameters()
    for name in params:
        if name + ".absmax" in st:
            raw = params[name].numpy(copy=True).reshape(-1)
            packed = st[name].reshape(-1)
            np.testing.assert_array_equal(raw[:packed.size], packed, err_msg=name)
            off = -(-packed.size // 4) * 4
            np.testing.assert_array_equal(raw[off:].view(np.float32), st[name + ".absmax"], err_msg=name)


def nested_absmax(st, name):
    """The f32 absmax of double-quantized weight `name` as bitsandbytes' dequantize_4bit rebuilds it:
    nested_quant_map[code] * nested_absmax[block // nested_blocksize] in f32, then + nested_offset
    (the JSON's number as torch.tensor(float) rounds it, to f32)."""
    state = json.loads(st[name + ".quant_state.bitsandbytes__nf4"].tobytes())
    codes = st[name + ".absmax"]
    assert codes.dtype == np.uint8 and state["nested_dtype"] == "float32"
    scale = st[name + ".nested_absmax"][np.arange(codes.size) // state["nested_blocksize"]]
    v = (st[name + ".nested_quant_map"][codes] * scale).astype(np.float32)
    return (v + np.float32(state["nested_offset"])).astype(np.float32)


def held_absmax(m, name, packed_bytes):
    """The f32 absmax part of our bytes of quantized weight `name` (after the packed indices)."""
    raw = m.named_parameters()[name].numpy(copy=True).reshape(-1)
    return raw[-(-packed_bytes // 4) * 4:].view(np.float32)


def test_fixture_double_quant_made_by_bitsandbytes(tmp_path):
    """bnb_4bit_use_double_quant: the absmax rebuilt exactly, logits equal to bitsandbytes'."""
    m = models.from_pretrained(FIXTURE_DQ, device=DEVICE)
    assert m.quantization == "nf4" and m.dtype == gpucore.float32
    ref = np.load(os.path.join(FIXTURE_DQ, "reference.npz"))
    err = rel(to_np(m(ref["ids"])), ref["logits"])
    print("our loader on the double-quantized folder bitsandbytes wrote (%s): rel err %.3g" % (ref["versions"], err))
    assert err < 1e-5, err
    st = load_st(os.path.join(FIXTURE_DQ, "model.safetensors"))
    nested = [k[:-len(".nested_absmax")] for k in st if k.endswith(".nested_absmax")]
    assert len(nested) == 14
    # several nested blocks, a partial last one: the block index and the offset both matter
    assert max(st[k + ".nested_absmax"].size for k in nested) == 3 and any(st[k + ".absmax"].size % 256 for k in nested)
    for name in nested:
        packed = st[name].reshape(-1)
        raw = m.named_parameters()[name].numpy(copy=True).reshape(-1)
        np.testing.assert_array_equal(raw[:packed.size], packed, err_msg=name)
        want = nested_absmax(st, name)
        got = held_absmax(m, name, packed.size)
        assert got.tobytes() == want.tobytes(), name
    # saved: plain NF4 with the rebuilt absmax, and a config that says so
    m.save_pretrained(str(tmp_path / "plain"))
    with open(tmp_path / "plain" / "config.json") as f:
        assert json.load(f)["quantization_config"]["bnb_4bit_use_double_quant"] is False
    out = load_st(str(tmp_path / "plain" / "model.safetensors"))
    assert not any("nested" in k for k in out)
    for name in nested:
        assert out[name + ".absmax"].tobytes() == nested_absmax(st, name).tobytes(), name
    m2 = models.from_pretrained(str(tmp_path / "plain"), device=DEVICE)
    np.testing.assert_array_equal(to_np(m2(ref["ids"])), to_np(m(ref["ids"])))


def test_double_quant_dequantized_as_bitsandbytes():
    """Our dequantized weights of the double-quantized fixture: bitsandbytes' dequantize_4bit's bits."""
    bnb_f = pytest.importorskip("bitsandbytes.functional",
                                reason="bitsandbytes is not importable (it needs PyTorch >= 2.2)")
    from gpucore import quant
    m = models.from_pretrained(FIXTURE_DQ, device=DEVICE)
    tensors = st_torch.load_file(os.path.join(FIXTURE_DQ, "model.safetensors"))
    names = [k[:-len(".nested_absmax")] for k in tensors if k.endswith(".nested_absmax")]
    for name in names:
        qs = bnb_f.QuantState.from_dict({k[len(name) + 1:]: v for k, v in tensors.items()
                                         if k.startswith(name + ".")}, device=torch.device("cpu"))
        assert qs.nested
        ref = bnb_f.dequantize_4bit(tensors[name], qs).numpy()
        got = quant.dequantize(m.named_parameters()[name], "nf4", ref.shape).numpy(copy=True)
        assert got.tobytes() == ref.astype(np.float32).tobytes(), name


def int8_weights():
    """{name: (int8 [out, in], SCB f32 [out])} of the 8-bit fixture, and its other tensors."""
    st = load_st(os.path.join(FIXTURE_INT8, "model.safetensors"))
    q = {k: (v, st[k[:-len(".weight")] + ".SCB"]) for k, v in st.items() if v.dtype == np.int8}
    assert len(q) == 14 and all(st[k + "_format"].shape == () and st[k + "_format"] == 0 for k in q)
    return q, {k: v for k, v in st.items() if k not in q and not k.endswith((".SCB", ".weight_format"))}


def test_int8_folder_made_by_bitsandbytes():
    """load_in_8bit: INT8_ROW with the file's bytes; W = int8 * SCB / 127; logits of those weights."""
    m = models.from_pretrained(FIXTURE_INT8, device=DEVICE)
    assert m.quantization == "int8" and m.dtype == gpucore.float32
    q, dense = int8_weights()
    from gpucore import quant
    params = m.named_parameters()
    for name, (w, scb) in q.items():
        raw = params[name].numpy(copy=True).reshape(-1)
        np.testing.assert_array_equal(raw[:w.size].view(np.int8), w.reshape(-1), err_msg=name)
        assert raw[-(-w.size // 4) * 4:].view(np.float32).tobytes() == scb.tobytes(), name
        want = w.astype(np.float64) * scb.astype(np.float64)[:, None] / 127  # the definition, float64
        got = quant.dequantize(params[name], "int8", w.shape).numpy(copy=True).astype(np.float64)
        np.testing.assert_allclose(got, want, rtol=2.5e-7, atol=0, err_msg=name)  # f32's rounding
        dense[name] = want.astype(np.float32)
    # transformers holding the dequantized weights dense
    cfg = transformers.AutoConfig.from_pretrained(FIXTURE_INT8)
    del cfg.quantization_config
    hf = transformers.AutoModelForCausalLM.from_config(cfg).float().eval()
    missing, unexpected = hf.load_state_dict({k: torch.from_numpy(v) for k, v in dense.items()}, strict=False)
    assert not unexpected and all("rotary" in k for k in missing), (missing, unexpected)
    ids = np.load(os.path.join(FIXTURE_INT8, "reference.npz"))["ids"]
    with torch.no_grad():
        ref = hf(torch.as_tensor(ids)).logits.double().numpy()
    err = rel(to_np(m(ids)), ref)
    print("8-bit folder against transformers on int8 * SCB / 127: rel err %.3g" % err)
    assert err < 1e-5, err
    # the public reader opens the file but has no int8 tensor type: I8 tensors are refused by name
    from gpucore import serialization
    f = serialization.safe_open(os.path.join(FIXTURE_INT8, "model.safetensors"))
    name = next(iter(q))
    assert name in f.keys() and f.info(name + "_format")[1] == ()
    with pytest.raises(gpucore.NotSupportedError, match="I8"):
        f.info(name)
    with pytest.raises(gpucore.NotSupportedError, match="I8"):
        f.get_tensor(name)


def test_int8_dequantized_as_bitsandbytes():
    """Our INT8_ROW values of the 8-bit fixture: bitsandbytes' int8_vectorwise_dequant's bits."""
    bnb_f = pytest.importorskip("bitsandbytes.functional",
                                reason="bitsandbytes is not importable (it needs PyTorch >= 2.2)")
    from gpucore import quant
    m = models.from_pretrained(FIXTURE_INT8, device=DEVICE)
    q, _ = int8_weights()
    for name, (w, scb) in q.items():
        ref = bnb_f.int8_vectorwise_dequant(torch.from_numpy(w), torch.from_numpy(scb)).numpy()
        got = quant.dequantize(m.named_parameters()[name], "int8", w.shape).numpy(copy=True)
        assert got.tobytes() == ref.astype(np.float32).tobytes(), name


def _variant(store, name, edit_config=None, edit_tensors=None, base=None):
    """A copy of the saved llama nf4 folder (or base) with config.json and/or the tensors edited."""
    out = base or saved(store, "llama", "nf4")[3]
    dst = os.path.join(str(store), "variant-" + name)
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(out, dst)
    if edit_config:
        with open(os.path.join(dst, "config.json")) as f:
            cfg = json.load(f)
        edit_config(cfg)
        with open(os.path.join(dst, "config.json"), "w") as f:
            json.dump(cfg, f)
    if edit_tensors:
        path = os.path.join(dst, "model.safetensors")
        ts = dict(load_st(path))
        edit_tensors(ts)
        save_st(ts, path)
    return dst


Q = "model.layers.0.self_attn.q_proj.weight"


def _set(d, k, v):
    d[k] = v


def _state(t, drop=(), **fields):
    """Q's quant_state JSON with fields replaced (and those in drop removed)."""
    key = Q + ".quant_state.bitsandbytes__nf4"
    state = json.loads(t[key].tobytes())
    state.update(fields)
    for k in drop:
        state.pop(k)
    t[key] = np.frombuffer(json.dumps(state).encode(), np.uint8).copy()


@pytest.mark.parametrize("name,cfg_edit,ts_edit,err,match", [
    ("nested", None, lambda t: _set(t, Q + ".nested_absmax", np.ones(4, np.float32)),
     gpucore.CorruptFileError, "nested_absmax.*nested_blocksize"),
    ("int8", lambda c: c["quantization_config"].update(load_in_8bit=True, load_in_4bit=False), None,
     gpucore.DtypeMismatchError, "int8"),
    ("gptq", lambda c: _set(c["quantization_config"], "quant_method", "gptq"), None,
     gpucore.NotSupportedError, "gptq"),
    ("storage", lambda c: _set(c["quantization_config"], "bnb_4bit_quant_storage", "bfloat16"), None,
     gpucore.NotSupportedError, "bnb_4bit_quant_storage"),
    ("type", lambda c: _set(c["quantization_config"], "bnb_4bit_quant_type", "fp4"), None,
     gpucore.CorruptFileError, "bitsandbytes__fp4' is missing"),
    ("code", None, lambda t: _set(t, Q + ".quant_map", code_book("fp4")), gpucore.NotSupportedError, "code book"),
    ("absmax", None, lambda t: t.pop(Q + ".absmax"), gpucore.CorruptFileError, "absmax"),
    ("absmax-shape", None, lambda t: _set(t, Q + ".absmax", t[Q + ".absmax"][1:].copy()),
     gpucore.ShapeMismatchError, "absmax"),
    ("weight-shape", None, lambda t: _set(t, Q, t[Q].reshape(-1).copy()), gpucore.ShapeMismatchError, Q),
    ("block", None, lambda t: _state(t, blocksize=128), gpucore.ShapeMismatchError, "absmax"),
    ("block-odd", None, lambda t: _state(t, blocksize=48), gpucore.NotSupportedError, "blocksize 48"),
    ("shape", None, lambda t: _state(t, shape=[32, 128]), gpucore.ShapeMismatchError, "shape"),
    ("dtype", None, lambda t: _state(t, dtype="int8"), gpucore.CorruptFileError, "dtype 'int8'"),
    ("state-type", None, lambda t: _state(t, quant_type="fp4"), gpucore.CorruptFileError, "quant_type 'fp4'"),
    ("extra", None, lambda t: _set(t, "model.layers.0.mlp.up_proj.SCB", np.ones(4, np.float32)),
     gpucore.CorruptFileError, "SCB"),
])
def test_refusals(store, name, cfg_edit, ts_edit, err, match):
    folder = _variant(store, name, cfg_edit, ts_edit)
    with pytest.raises(err, match=match):
        models.from_pretrained(folder, device=DEVICE)
    # the library stays usable
    _, _, _, out = saved(store, "llama", "nf4")
    assert models.from_pretrained(out, device=DEVICE).quantization == "nf4"


Q8 = "model.layers.0.mlp.up_proj"


@pytest.mark.parametrize("name,cfg_edit,ts_edit,err,match", [
    ("fp16-weight", lambda c: _set(c["quantization_config"], "llm_int8_has_fp16_weight", True), None,
     gpucore.NotSupportedError, "llm_int8_has_fp16_weight"),
    ("scb-missing", None, lambda t: t.pop(Q8 + ".SCB"), gpucore.CorruptFileError, "SCB"),
    ("scb-shape", None, lambda t: _set(t, Q8 + ".SCB", t[Q8 + ".SCB"][1:].copy()), gpucore.ShapeMismatchError, "SCB"),
    ("weight-shape", None, lambda t: _set(t, Q8 + ".weight", t[Q8 + ".weight"].T.copy()), gpucore.ShapeMismatchError,
     "I8"),
    ("weight-dtype", None, lambda t: _set(t, Q8 + ".weight", t[Q8 + ".weight"].astype(np.float32)),
     gpucore.DtypeMismatchError, "int8"),
    ("format", None, lambda t: _set(t, Q8 + ".weight_format", np.array(1, np.uint8)), gpucore.NotSupportedError,
     "weight format"),
    ("stray", None, lambda t: _set(t, "model.layers.0.mlp.up.SCB", np.ones(4, np.float32)), gpucore.CorruptFileError,
     "up.SCB"),
])
def test_int8_refusals(store, name, cfg_edit, ts_edit, err, match):
    folder = _variant(store, "int8-" + name, cfg_edit, ts_edit, base=FIXTURE_INT8)
    with pytest.raises(err, match=match):
        models.from_pretrained(folder, device=DEVICE)
    assert models.from_pretrained(FIXTURE_INT8, device=DEVICE).quantization == "int8"


@pytest.mark.parametrize("name,ts_edit,err,match", [
    ("nested-dtype", lambda t: _state(t, nested_dtype="float16"), gpucore.NotSupportedError, "nested_dtype 'float16'"),
    ("nested-fields", lambda t: _state(t, drop=("nested_offset",)), gpucore.CorruptFileError, "nested_offset"),
    ("nested-block", lambda t: _state(t, nested_blocksize=0), gpucore.CorruptFileError, "nested_blocksize 0"),
    ("nested-missing", lambda t: t.pop(Q + ".nested_absmax"), gpucore.CorruptFileError, "nested_absmax"),
    ("nested-shape", lambda t: _set(t, Q + ".nested_absmax", np.ones(2, np.float32)), gpucore.ShapeMismatchError,
     "nested_absmax"),
    ("nested-map", lambda t: _set(t, Q + ".nested_quant_map", np.ones(128, np.float32)), gpucore.ShapeMismatchError,
     "nested_quant_map"),
    ("nested-codes", lambda t: _set(t, Q + ".absmax", t[Q + ".absmax"].astype(np.float32)),
     gpucore.ShapeMismatchError, "absmax"),
])
def test_double_quant_refusals(store, name, ts_edit, err, match):
    folder = _variant(store, name, None, ts_edit, base=FIXTURE_DQ)
    with pytest.raises(err, match=match):
        models.from_pretrained(folder, device=DEVICE)
    assert models.from_pretrained(FIXTURE_DQ, device=DEVICE).quantization == "nf4"


def test_refusals_at_save(store, tmp_path):
    _, _, _, out = saved(store, "llama", "nf4")
    with pytest.raises(gpucore.InvalidArgumentError, match="without quantize"):
        models.from_pretrained(out, device=DEVICE, quantize="nf4")
    folder, _, _, _ = saved(store, "llama", "nf4")
    m = models.from_pretrained(folder, device=DEVICE, quantize="int8")
    m.add_lora(r=2, lora_alpha=4, target_modules=["q_proj"], seed=1)
    with pytest.raises(gpucore.InvalidArgumentError, match="adapters"):
        m.save_pretrained(str(tmp_path / "int8"))


def test_int8_saved_layout(store, tmp_path):
    """save_pretrained of an int8 model: Linear8bitLt's layout (I8 weight, SCB, weight_format 0) and
    transformers' load_in_8bit quantization_config; it reloads with the same bytes and logits."""
    folder, _, _, _ = saved(store, "llama", "nf4")
    m = models.from_pretrained(folder, device=DEVICE, quantize="int8")
    out = str(tmp_path / "int8")
    m.save_pretrained(out)
    with open(os.path.join(out, "config.json")) as f:
        qc = json.load(f)["quantization_config"]
    want = dict(bnb_config("fp4"), _load_in_4bit=False, _load_in_8bit=True, load_in_4bit=False, load_in_8bit=True)
    assert qc == want  # BitsAndBytesConfig(load_in_8bit=True).to_dict(), compute dtype ours (bf16)
    got = st_torch.load_file(os.path.join(out, "model.safetensors"))
    params = m.named_parameters()
    nq = 0
    for name, t in params.items():
        if name[:-len(".weight")].endswith(linears("llama")):
            nq += 1
            w, scb, fmt = got[name], got[name[:-len(".weight")] + ".SCB"], got[name + "_format"]
            assert w.dtype == torch.int8 and scb.dtype == torch.float32 and fmt.dtype == torch.uint8
            raw = t.numpy(copy=True).reshape(-1)
            assert w.numpy().tobytes() == raw[:w.numel()].tobytes(), name
            assert scb.numpy().tobytes() == raw[-(-w.numel() // 4) * 4:].tobytes(), name
            assert fmt.shape == () and int(fmt) == 0
    assert nq == 14
    m2 = models.from_pretrained(out, device=DEVICE)
    assert m2.quantization == "int8" and m2.dtype == gpucore.bfloat16
    for k, t in params.items():
        assert to_np(t).tobytes() == to_np(m2.named_parameters()[k]).tobytes(), k
    ids = ids_for(m.vocab_size)
    np.testing.assert_array_equal(to_np(m2(ids)), to_np(m(ids)))
    # the folder bitsandbytes wrote, loaded and saved: its tensors again, bit for bit
    m3 = models.from_pretrained(FIXTURE_INT8, device=DEVICE)
    m3.save_pretrained(str(tmp_path / "again"))
    a = st_torch.load_file(os.path.join(FIXTURE_INT8, "model.safetensors"))
    b = st_torch.load_file(str(tmp_path / "again" / "model.safetensors"))
    assert set(a) == set(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and torch.equal(a[k], b[k]), k


def test_transformers_loads_our_int8_folder(store, tmp_path):
    """transformers + bitsandbytes (PyTorch >= 2.2) load our saved int8 folder: Linear8bitLt holding our bytes."""
    pytest.importorskip("bitsandbytes", reason="bitsandbytes is not importable (it needs PyTorch >= 2.2)")
    folder, _, _, _ = saved(store, "llama", "nf4")
    m = models.from_pretrained(folder, device=DEVICE, quantize="int8", dtype=gpucore.float32)
    m.save_pretrained(str(tmp_path / "int8"))
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "int8"), device_map="cpu")
    params = m.named_parameters()
    n = 0
    for name, mod in hf.named_modules():
        if type(mod).__name__ == "Linear8bitLt":
            n += 1
            raw = params[name + ".weight"].numpy(copy=True).reshape(-1)
            cb, scb = mod.weight.data, mod.weight.SCB if mod.weight.SCB is not None else mod.state.SCB
            assert cb.dtype == torch.int8 and cb.numpy().tobytes() == raw[:cb.numel()].tobytes(), name
            assert scb.numpy().tobytes() == raw[-(-cb.numel() // 4) * 4:].tobytes(), name
    assert n == 14


def test_merged_into_a_dense_model_drops_quantization_config(store, tmp_path):
    """Every linear dequantized by merge_adapter: saved dense, without quantization_config."""
    _, _, _, out = saved(store, "llama", "nf4")
    m = models.from_pretrained(out, device=DEVICE)
    m.add_lora(r=4, lora_alpha=8, target_modules=list(linears("llama")), seed=1)
    m.merge_adapter()
    assert m.quantization is None
    m.save_pretrained(str(tmp_path / "dense"))
    with open(tmp_path / "dense" / "config.json") as f:
        cfg = json.load(f)
    assert "quantization_config" not in cfg and cfg["torch_dtype"] == "bfloat16"
    ids = ids_for(m.vocab_size)
    np.testing.assert_array_equal(to_np(models.from_pretrained(str(tmp_path / "dense"), device=DEVICE)(ids)),
                                  to_np(m(ids)))


def test_transformers_loads_our_folder(store):
    """transformers + bitsandbytes (PyTorch >= 2.2) load our saved folder: logits equal to ours."""
    pytest.importorskip("bitsandbytes", reason="bitsandbytes is not importable (it needs PyTorch >= 2.2)")
    # computed in f32 by both; in_features multiples of 64: bitsandbytes 0.50's CPU dequantize_4bit
    # takes blocks row by row (make_bnb_fixture.py)
    _, _, m, out = saved(store, "llama", "nf4", dtype=gpucore.float32, intermediate_size=128)
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, torch_dtype=torch.float32,
                                                           device_map="cpu").eval()
    assert type(hf.model.layers[0].self_attn.q_proj).__name__ == "Linear4bit"
    for mod in hf.modules():  # make_bnb_fixture.exact_cpu_path: no bf16 absmax repacking on the CPU
        if type(mod).__name__ == "Linear4bit":
            mod.support_avx512bf16_for_cpu = False
    ids = ids_for(m.vocab_size)
    with torch.no_grad():
        ref = hf(torch.as_tensor(ids)).logits.double().numpy()
    err = rel(to_np(m(ids)), ref)
    print("transformers + bitsandbytes on our folder: rel err %.3g" % err)
    assert err < 1e-5, err
