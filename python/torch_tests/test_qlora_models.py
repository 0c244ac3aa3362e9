"""Quantized base models (from_pretrained(..., quantize=...)) and QLoRA against a dense reference.

Tiny random GPT-2, Llama and Qwen2 models made by transformers (hf_fixtures.py). The reference
for a model loaded with quantize="nf4" / "fp4" / "int8" is the same transformers model whose
linear layers hold gpucore.quant.dequantize(gpucore.quant.quantize(w)) (the formats themselves
are checked bit for bit against bitsandbytes' and gguf's references in python/tests/test_quant.py):
logits (f32 compute: normalised error 1e-5), the loss and every LoRA gradient against autograd
through that dense model (QLoRA: only the adapters train), an adapter we train on the quantized
base that PEFT loads onto the dense reference with equal logits, merge_adapter into a
dequantized base, the weight bytes the model reports against the bytes of its tensors, and the
refusals (full fine-tuning of a quantized base, save_pretrained of an int8 one, quantize of a GGUF
file, an unknown format).

Runs under Debian's python3 with torch 1.13 and transformers + peft from build-pydeps; skips
with the reason when they are not importable."""
from __future__ import annotations

import copy
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
hf_fixtures = pytest.importorskip("hf_fixtures")

import gpucore  # noqa: E402
from gpucore import models, quant  # noqa: E402

DEVICE = os.environ.get("GPUCORE_TEST_DEVICE", "cpu")
transformers.logging.set_verbosity_error()
rel, to_np = hf_fixtures.rel, hf_fixtures.to_np
LINEARS = {"gpt2": ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"),
           "llama": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
           "qwen2": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")}
TARGETS = {"gpt2": ["c_attn", "c_proj", "c_fc"], "llama": list(LINEARS["llama"]), "qwen2": list(LINEARS["qwen2"])}

_made = {}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return tmp_path_factory.mktemp("qlora_models")


def round_trip(w, fmt, block_size=0):
    """w [out, in] (numpy f32) through the library's quantize and dequantize."""
    ctx = gpucore.get_context("cpu")
    t = ctx.tensor(np.ascontiguousarray(w, np.float32))
    q = quant.quantize(t, fmt, block_size=block_size)
    return quant.dequantize(q, fmt, w.shape, block_size=block_size).numpy(copy=True)


def reference(store, arch, fmt, block_size=0):
    """(folder, dense transformers model in f32 whose decoder linears hold the round-tripped weights)."""
    key = (arch, fmt, block_size)
    if key not in _made:
        folder, hf = hf_fixtures.make_model(arch, store)
        ref = copy.deepcopy(hf).float().eval()
        with torch.no_grad():
            for name, mod in ref.named_modules():
                if not name.endswith(LINEARS[arch]) or not hasattr(mod, "weight"):
                    continue
                w = mod.weight.detach().numpy()
                conv1d = arch == "gpt2"  # Conv1D holds [in, out]
                dq = round_trip(w.T if conv1d else w, fmt, block_size)
                mod.weight.copy_(torch.from_numpy(dq.T.copy() if conv1d else dq))
        _made[key] = (folder, ref)
    return _made[key]


def ids_for(vocab, B=2, T=10, seed=0):
    return np.random.default_rng(seed).integers(0, vocab, size=(B, T)).astype(np.int64)


def logits(model, ids):
    with torch.no_grad():
        return model(torch.as_tensor(ids)).logits.double().numpy()


@pytest.mark.parametrize("arch,fmt,block", [("llama", "nf4", 0), ("qwen2", "fp4", 128), ("gpt2", "nf4", 0),
                                            ("llama", "int8", 0), ("gpt2", "int8", 0)])
def test_quantized_logits_equal_dequantized_dense(store, arch, fmt, block):
    folder, ref = reference(store, arch, fmt, block)
    m = models.from_pretrained(folder, device=DEVICE, dtype="float32", quantize=fmt, block_size=block)
    dense = models.from_pretrained(folder, device=DEVICE, dtype="float32")
    assert m.quantization == fmt and dense.quantization is None
    ids = ids_for(m.vocab_size)
    err = rel(to_np(m(ids)), logits(ref, ids))
    moved = rel(to_np(dense(ids)), logits(ref, ids))
    print("%s %s: logits rel err %.3g against the dequantized reference (quantization moves them %.3g)"
          % (arch, fmt, err, moved))
    assert err < 1e-5 and moved > 1e-4
    # weight bytes: the quantized linears as stored, the rest dense f32, counted from the tensors
    params = m.named_parameters()
    counted = sum(t.nbytes for t in params.values())
    assert m.memory_footprint() == counted < dense.memory_footprint()
    q_names = [k for k, t in params.items() if t.dtype == gpucore.uint8]
    assert q_names and all(k.endswith(".weight") for k in q_names)
    assert len(q_names) == len(LINEARS[arch]) * m.config_int("num_hidden_layers")


@pytest.mark.parametrize("arch,fmt,targets", [("llama", "nf4", None), ("gpt2", "int8", None), ("qwen2", "nf4", None),
                                              ("llama", "fp4", ["q_proj", "v_proj"])])
def test_qlora_loss_and_gradients_match_dense_lora(store, arch, fmt, targets):
    """Adapters on every linear, or on some (the others' input gradients then come from the
    quantized weight alone)."""
    targets = targets or TARGETS[arch]
    folder, ref = reference(store, arch, fmt)
    m = models.from_pretrained(folder, device=DEVICE, dtype="float32", quantize=fmt)
    m.add_lora(r=4, lora_alpha=8, target_modules=targets, seed=3)
    params = m.trainable_parameters()
    pm = peft.get_peft_model(copy.deepcopy(ref), peft.LoraConfig(r=4, lora_alpha=8, target_modules=targets,
                                                                 lora_dropout=0.0, fan_in_fan_out=arch == "gpt2"))
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():  # the same adapter values on both sides, B nonzero so dA matters
        for n, p in pm.named_parameters():
            if p.requires_grad:
                k = n.replace(".default", "")
                v = (0.3 * torch.randn(p.shape, generator=g)).numpy().astype(np.float32)
                p.copy_(torch.from_numpy(v))
                params[k].copy_(params[k]._ctx.tensor(v))
    ids = ids_for(m.vocab_size, T=12, seed=7)
    out = pm(torch.as_tensor(ids), labels=torch.as_tensor(ids))
    out.loss.backward()
    loss = m.forward_backward(ids)
    assert abs(loss - out.loss.item()) <= 1e-5 * abs(out.loss.item())
    grads = m.gradients()
    want = {n.replace(".default", ""): p.grad.double().numpy() for n, p in pm.named_parameters() if p.requires_grad}
    assert set(grads) == set(want)
    worst = max(rel(to_np(grads[k]), want[k]) for k in want)
    print("%s QLoRA (%s): loss %.6f vs %.6f, worst LoRA grad rel err %.3g" % (arch, fmt, loss, out.loss.item(), worst))
    assert worst < 1e-4


def test_qlora_trains_saves_a_peft_adapter_and_merges(store, tmp_path):
    folder, ref = reference(store, "llama", "nf4")
    m = models.from_pretrained(folder, device=DEVICE, dtype="float32", quantize="nf4")
    m.add_lora(r=4, lora_alpha=8, target_modules=TARGETS["llama"], seed=1)
    opt = gpucore.AdamW(m.trainable_parameters(), lr=3e-2, weight_decay=0.0)
    ids = ids_for(m.vocab_size, B=4, T=12, seed=8)
    losses = []
    for _ in range(6):
        losses.append(m.forward_backward(ids))
        opt.step(m.gradients())
    assert losses[-1] < losses[0] - 0.05, losses
    m.save_adapter(str(tmp_path / "ad"))
    pm = peft.PeftModel.from_pretrained(copy.deepcopy(ref), str(tmp_path / "ad")).eval()
    ids2 = ids_for(m.vocab_size, T=9, seed=9)
    ours = to_np(m(ids2))
    err, moved = rel(ours, logits(pm, ids2)), rel(logits(ref, ids2), logits(pm, ids2))
    print("QLoRA adapter in PEFT on the dequantized base: logits rel err %.3g (the adapter moves them %.3g)"
          % (err, moved))
    assert moved > 1e-3 and err < 1e-5
    m.merge_adapter()  # into the dequantized base
    assert m.lora_count == 0 and m.quantization is None
    assert rel(to_np(m(ids2)), ours) < 1e-5


def test_bf16_compute_on_an_nf4_base(store):
    folder, ref = reference(store, "llama", "nf4")
    m = models.from_pretrained(folder, device=DEVICE, quantize="nf4")
    assert m.dtype == gpucore.bfloat16 and m.quantization == "nf4"
    ids = ids_for(m.vocab_size, seed=4)
    err = rel(to_np(m(ids)), logits(ref, ids))
    print("nf4 base, bf16 compute: logits rel err %.3g against the f32 dequantized reference" % err)
    assert err < 3e-2


def test_refusals(store, tmp_path):
    folder, _ = reference(store, "llama", "nf4")
    with pytest.raises(gpucore.InvalidArgumentError, match="quantize"):
        models.from_pretrained(folder, device=DEVICE, quantize="nf5")
    with pytest.raises(gpucore.InvalidArgumentError, match="block size"):
        models.from_pretrained(folder, device=DEVICE, quantize="nf4", block_size=48)
    m = models.from_pretrained(folder, device=DEVICE, quantize="nf4")
    with pytest.raises(gpucore.NotSupportedError, match="quantized"):
        m.set_full_finetune(True)
    # saving nf4/fp4/int8: test_bnb_folder.py; a merge leaves q_proj dense beside int8 layers
    m8 = models.from_pretrained(folder, device=DEVICE, quantize="int8")
    m8.add_lora(r=2, lora_alpha=4, target_modules=["q_proj"], seed=1)
    m8.merge_adapter()
    with pytest.raises(gpucore.NotSupportedError, match="q_proj' is dense"):
        m8.save_pretrained(str(tmp_path / "out"))
    assert m.quantization == "nf4" and np.isfinite(to_np(m(ids_for(m.vocab_size)))).all()  # still usable
