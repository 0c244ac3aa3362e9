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
- what is not implemented (double quantization, 8-bit folders, another code book) and broken
  folders (a missing or misshapen tensor, a quant_state that disagrees) are refused by name;
- where bitsandbytes is importable (PyTorch >= 2.2), transformers loads our saved folder with
  logits equal to ours (skipped otherwise: Debian's torch 1.13 has no bitsandbytes).
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
                            else torch.from_numpy(np.ascontiguousarray(v))) for k, v in tensors.items()},
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


def _variant(store, name, edit_config=None, edit_tensors=None):
    """A copy of the saved llama nf4 folder with config.json and/or the tensors edited."""
    _, _, _, out = saved(store, "llama", "nf4")
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


def _state(t, **fields):
    """Q's quant_state JSON with fields replaced."""
    key = Q + ".quant_state.bitsandbytes__nf4"
    state = json.loads(t[key].tobytes())
    state.update(fields)
    t[key] = np.frombuffer(json.dumps(state).encode(), np.uint8).copy()


@pytest.mark.parametrize("name,cfg_edit,ts_edit,err,match", [
    ("double", lambda c: _set(c["quantization_config"], "bnb_4bit_use_double_quant", True), None,
     gpucore.NotSupportedError, "bnb_4bit_use_double_quant"),
    ("nested", None, lambda t: _set(t, Q + ".nested_absmax", np.ones(4, np.float32)),
     gpucore.NotSupportedError, "bnb_4bit_use_double_quant"),
    ("int8", lambda c: c["quantization_config"].update(load_in_8bit=True, load_in_4bit=False), None,
     gpucore.NotSupportedError, "load_in_8bit"),
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


def test_refusals_at_save(store, tmp_path):
    _, _, _, out = saved(store, "llama", "nf4")
    with pytest.raises(gpucore.InvalidArgumentError, match="without quantize"):
        models.from_pretrained(out, device=DEVICE, quantize="nf4")
    folder, _, _, _ = saved(store, "llama", "nf4")
    m = models.from_pretrained(folder, device=DEVICE, quantize="int8")
    with pytest.raises(gpucore.NotSupportedError, match="int8"):
        m.save_pretrained(str(tmp_path / "int8"))


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
