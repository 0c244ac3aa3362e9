"""gpucore.models against Hugging Face's own code: tiny GPT-2, Llama (GQA, rope_theta 500000,
Llama-3 rope_scaling), Mistral and Qwen2 models made by transformers with random weights
(hf_fixtures.py) and saved with save_pretrained in f32, bf16, f16 and sharded, compared on
logits (normalised error ||ours - ref|| / ||ref||: f32 1e-4, bf16 3e-2 against the checkpoint's
weights run by transformers in f32), greedy generation token for token against
transformers' generate, KV-cache steps against the full forward, PEFT adapters both ways (one
PEFT wrote loads with equal logits; one we train and save loads in PeftModel.from_pretrained
with equal logits), the causal-LM loss with -100 labels and the LoRA and full fine-tuning
gradients against autograd, full fine-tuning losses over AdamW steps against
torch.optim.AdamW's, save_pretrained folders that transformers loads with equal
logits, and bad folders and adapters refused with a message.

Runs under Debian's python3 with torch 1.13 and transformers + peft from build-pydeps;
skips with the reason when they are not importable. GPUCORE_TEST_DEVICE picks the device
(default cpu)."""
from __future__ import annotations

import copy
import json
import os
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
hf_fixtures = pytest.importorskip("hf_fixtures")

import gpucore  # noqa: E402
from gpucore import models  # noqa: E402

DEVICE = os.environ.get("GPUCORE_TEST_DEVICE", "cpu")
ARCHS = hf_fixtures.ARCHS
TOL = {"float32": 1e-4, "bfloat16": 3e-2, "float16": 1e-2}
LORA_TARGETS = {"gpt2": ["c_attn", "c_proj", "c_fc"],
                "llama": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
                "mistral": ["q_proj", "v_proj", "down_proj"], "qwen2": ["q_proj", "k_proj", "v_proj", "up_proj"]}
transformers.logging.set_verbosity_error()


rel, to_np = hf_fixtures.rel, hf_fixtures.to_np

_models = {}
_native = {}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return tmp_path_factory.mktemp("hf_models")


def hf_model(store, arch, dtype="float32", sharded=False, **overrides):
    """(folder, transformers model in f32 holding the file's weights) — made once per module."""
    key = (arch, dtype, sharded, tuple(sorted(overrides.items())))
    if key not in _models:
        folder, m = hf_fixtures.make_model(arch, store, dtype=dtype, sharded=sharded, **overrides)
        _native[key] = m.eval()
        _models[key] = (folder, copy.deepcopy(m).float().eval())
    return _models[key]


def hf_native(store, arch, dtype="float32"):
    """The transformers model in the file's own dtype (bf16 math for a bf16 file)."""
    hf_model(store, arch, dtype)
    return _native[(arch, dtype, False, ())]


def ids_for(vocab, B=2, T=11, seed=0):
    return np.random.default_rng(seed).integers(0, vocab, size=(B, T)).astype(np.int64)


def hf_logits(m, ids, **kw):
    with torch.no_grad():
        return m(torch.as_tensor(ids), **kw).logits.double().numpy()


def ours(folder, dtype=None):
    return models.from_pretrained(folder, device=DEVICE, dtype=dtype)


def peft_save(pm, path):
    pm.create_or_update_model_card = lambda *a, **k: None  # the model card needs Jinja2, not the adapter
    pm.save_pretrained(path)


def peft_key(name):
    return name.replace(".default", "")


# ---------------------------------------------------------------- logits

CASES = [(a, d, s) for a in ARCHS for d, s in (("float32", False), ("bfloat16", False), ("float32", True))]
CASES += [("llama", "float16", False), ("qwen2", "bfloat16", True)]


@pytest.mark.parametrize("arch,dtype,sharded", CASES)
def test_logits_match_transformers(store, arch, dtype, sharded):
    folder, ref = hf_model(store, arch, dtype, sharded)
    if sharded:
        assert os.path.exists(os.path.join(folder, "model.safetensors.index.json"))
    m = ours(folder)
    assert m.arch == arch and m.dtype.name == {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}[dtype]
    ids = ids_for(m.vocab_size)
    err = rel(to_np(m(ids)), hf_logits(ref, ids))
    print("%s %s%s logits rel err %.3g" % (arch, dtype, " sharded" if sharded else "", err))
    assert err < TOL[dtype]


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_logits_converted_on_load(store, arch):
    """A bf16 checkpoint loaded as f32 computes what the file's weights compute in f32."""
    folder, ref = hf_model(store, arch, "bfloat16")
    m = ours(folder, dtype="float32")
    assert m.dtype.name == "f32"
    ids = ids_for(m.vocab_size, seed=1)
    assert rel(to_np(m(ids)), hf_logits(ref, ids)) < 1e-4


@pytest.mark.parametrize("arch,overrides", [
    ("llama", dict(num_key_value_heads=4, rope_scaling=None)),            # MHA, plain theta 500000
    ("llama", dict(num_key_value_heads=1, tie_word_embeddings=True)),      # MQA, tied head
    ("qwen2", dict(tie_word_embeddings=False, rope_theta=10000.0)),
    ("gpt2", dict(n_layer=3, n_head=2)),
])
def test_logits_config_variants(store, arch, overrides):
    folder, ref = hf_model(store, arch, **overrides)
    m = ours(folder)
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        assert m.config == json.load(f)  # the text the library read
    ids = ids_for(m.vocab_size, B=3, T=9, seed=2)
    assert rel(to_np(m(ids)), hf_logits(ref, ids)) < 1e-4


def test_tensor_input_ids_and_kv_cache(store):
    folder, ref = hf_model(store, "llama")
    m = ours(folder)
    ids = ids_for(m.vocab_size, T=10, seed=3)
    full = to_np(m(ids))
    t = gpucore.tensor(ids.astype(np.int32), device=m.context)
    assert rel(to_np(m(t)), full) < 1e-6
    cache = m.cache(2, 16)
    parts = [to_np(cache.forward(ids[:, :6]))]
    for j in range(6, 10):
        parts.append(to_np(cache.forward(ids[:, j:j + 1])))
    assert len(cache) == 10
    assert rel(np.concatenate(parts, axis=1), full) < 1e-5


# ---------------------------------------------------------------- generation

@pytest.mark.parametrize("arch,dtype", [(a, "float32") for a in ARCHS] + [("llama", "bfloat16")])
def test_greedy_generation_equals_transformers(store, arch, dtype):
    folder, _ = hf_model(store, arch, dtype)
    ref = hf_native(store, arch, dtype)
    m = ours(folder)
    prompt = ids_for(m.vocab_size, B=2, T=5, seed=4)
    with torch.no_grad():
        want = ref.generate(torch.as_tensor(prompt), max_new_tokens=12, do_sample=False,
                            pad_token_id=ref.config.eos_token_id).numpy()
    got = m.generate(prompt, max_new_tokens=12)
    assert got.dtype == np.int64
    agree = float(np.mean(got == want)) if got.shape == want.shape else 0.0
    print("%s %s greedy: %s tokens, agreement %.3f" % (arch, dtype, want.shape, agree))
    np.testing.assert_array_equal(got, want)


def test_generation_without_eos_has_full_length_and_sampling_is_seeded(store):
    folder, _ = hf_model(store, "qwen2")
    m = ours(folder)
    prompt = ids_for(m.vocab_size, B=3, T=4, seed=5)
    out = m.generate(prompt, max_new_tokens=7, eos_token_id=-1)
    assert out.shape == (3, 11) and (out[:, :4] == prompt).all()
    a = m.generate(prompt, max_new_tokens=7, do_sample=True, temperature=0.8, top_k=20, top_p=0.9, seed=7,
                   eos_token_id=-1)
    b = m.generate(prompt, max_new_tokens=7, do_sample=True, temperature=0.8, top_k=20, top_p=0.9, seed=7,
                   eos_token_id=-1)
    np.testing.assert_array_equal(a, b)
    # the fixtures' logits are sharp: a high temperature makes the seeds' draws differ
    c = [m.generate(prompt, max_new_tokens=7, do_sample=True, temperature=3.0, seed=s, eos_token_id=-1)
         for s in (8, 9, 10)]
    assert len({x.tobytes() for x in c}) > 1
    # top_k = 1 is greedy
    np.testing.assert_array_equal(m.generate(prompt, max_new_tokens=7, do_sample=True, top_k=1, seed=3,
                                             eos_token_id=-1), out)


# ---------------------------------------------------------------- loss and gradients

def labels_for(ids, seed=6):
    lab = ids.copy()
    lab[np.random.default_rng(seed).random(lab.shape) < 0.25] = -100
    lab[:, 1] = -100
    return lab


def peft_model(ref, arch, r=4, seed=0, dropout=0.0):
    cfg = peft.LoraConfig(r=r, lora_alpha=2 * r + 1, lora_dropout=dropout, target_modules=LORA_TARGETS[arch],
                          fan_in_fan_out=arch == "gpt2")
    pm = peft.get_peft_model(copy.deepcopy(ref), cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_B" in n:  # PEFT starts B at zero: give it values so the adapter matters
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
    return pm.eval()


@pytest.mark.parametrize("arch", ARCHS)
def test_peft_adapter_loads_with_equal_logits_loss_and_lora_grads(store, arch, tmp_path):
    folder, ref = hf_model(store, arch)
    pm = peft_model(ref, arch)
    peft_save(pm, str(tmp_path / "ad"))
    m = ours(folder)
    m.load_adapter(str(tmp_path / "ad"))
    assert m.lora_count > 0
    ids = ids_for(m.vocab_size, T=10, seed=7)
    lab = labels_for(ids)
    assert rel(to_np(m(ids)), hf_logits(pm, ids)) < 1e-4
    # loss and LoRA gradients against autograd
    pm.zero_grad()
    out = pm(torch.as_tensor(ids), labels=torch.as_tensor(lab))
    out.loss.backward()
    loss = m.forward_backward(ids, lab)
    assert abs(loss - out.loss.item()) <= 1e-5 * abs(out.loss.item())
    grads = m.gradients()
    want = {peft_key(n): p.grad.double().numpy() for n, p in pm.named_parameters() if p.requires_grad}
    assert set(grads) == set(want) and list(grads) == list(m.trainable_parameters())
    worst = max(rel(to_np(grads[k]), want[k]) for k in want)
    print("%s LoRA: loss %.6f vs %.6f, worst grad rel err %.3g over %d tensors" % (
        arch, loss, out.loss.item(), worst, len(want)))
    assert worst < 1e-4
    # merging keeps the logits and drops the adapters
    m.merge_adapter()
    assert m.lora_count == 0
    assert rel(to_np(m(ids)), hf_logits(pm, ids)) < 1e-4


@pytest.mark.parametrize("arch", ARCHS)
def test_adapter_we_train_loads_in_peft(store, arch, tmp_path):
    folder, ref = hf_model(store, arch)
    m = ours(folder)
    m.add_lora(r=4, lora_alpha=8, target_modules=LORA_TARGETS[arch], seed=1)
    params = m.trainable_parameters()
    assert all(".default" not in k and k.startswith("base_model.model.") for k in params)
    opt = gpucore.AdamW(params, lr=3e-2, weight_decay=0.0)
    ids = ids_for(m.vocab_size, B=4, T=12, seed=8)
    losses = []
    for _ in range(6):
        losses.append(m.forward_backward(ids))
        opt.step(m.gradients())
    assert losses[-1] < losses[0]
    m.save_adapter(str(tmp_path / "ours"))
    cfg = json.load(open(tmp_path / "ours" / "adapter_config.json"))
    assert cfg["peft_type"] == "LORA" and cfg["r"] == 4 and sorted(cfg["target_modules"]) == sorted(LORA_TARGETS[arch])
    pm = peft.PeftModel.from_pretrained(copy.deepcopy(ref), str(tmp_path / "ours")).eval()
    ids2 = ids_for(m.vocab_size, T=9, seed=9)
    err = rel(to_np(m(ids2)), hf_logits(pm, ids2))
    base = rel(hf_logits(ref, ids2), hf_logits(pm, ids2))
    print("%s our adapter in PEFT: logits rel err %.3g (adapter moves them by %.3g)" % (arch, err, base))
    assert base > 1e-3 and err < 1e-4
    # and back into a fresh model of ours
    m2 = ours(folder)
    m2.load_adapter(str(tmp_path / "ours"))
    assert rel(to_np(m2(ids2)), to_np(m(ids2))) < 1e-6


@pytest.mark.parametrize("arch", ARCHS)
def test_full_finetune_grads_and_save_pretrained(store, arch, tmp_path):
    folder, ref = hf_model(store, arch)
    m = ours(folder)
    m.set_full_finetune(True)
    ids = ids_for(m.vocab_size, T=10, seed=10)
    lab = labels_for(ids, seed=11)
    hf = copy.deepcopy(ref).train()
    for mod in hf.modules():  # the fixtures have no dropout; keep it that way in train mode
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
    out = hf(torch.as_tensor(ids), labels=torch.as_tensor(lab))
    out.loss.backward()
    loss = m.forward_backward(ids, lab)
    assert abs(loss - out.loss.item()) <= 1e-5 * abs(out.loss.item())
    grads = m.gradients()
    hf_grads = {n: p.grad.double().numpy() for n, p in hf.named_parameters()}
    assert set(grads) == set(hf_grads), set(grads) ^ set(hf_grads)
    worst = 0.0
    for k, g in grads.items():
        w = hf_grads[k]
        o = to_np(g)
        if arch == "gpt2" and k.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")):
            o = o.T  # GPT-2 Conv1D: held [out, in], the file's (and transformers') [in, out]
        worst = max(worst, rel(o, w))
    print("%s full FT: worst grad rel err %.3g over %d tensors" % (arch, worst, len(grads)))
    assert worst < 1e-4
    opt = gpucore.AdamW(m.trainable_parameters(), lr=1e-2)
    opt.step(grads)
    m.set_full_finetune(False)
    m.save_pretrained(str(tmp_path / "saved"))
    back = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "saved")).float().eval()
    ids2 = ids_for(m.vocab_size, T=8, seed=12)
    mine = to_np(m(ids2))
    assert rel(mine, hf_logits(ref, ids2)) > 1e-4  # the step changed the model
    assert rel(mine, hf_logits(back, ids2)) < 1e-5


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("shape", [(3, 12), (1, 8)])  # the embedding gradient on the whole table / on its rows
def test_full_finetune_adamw_losses_equal_torch(store, arch, shape):
    """Full fine-tuning with AdamW (weight decay on) for several steps, each on a new batch:
    every step's loss equals transformers + torch.optim.AdamW's on the same weights and
    batches at f32 tolerance (bench_lm's agreement with its peer, on a tiny model)."""
    folder, ref = hf_model(store, arch)
    m = ours(folder)
    m.set_full_finetune(True)
    opt = gpucore.AdamW(m.trainable_parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.1)
    hf = copy.deepcopy(ref).train()
    for mod in hf.modules():  # the fixtures have no dropout; keep it that way in train mode
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
    topt = torch.optim.AdamW(hf.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.1)
    got, want = [], []
    for step in range(5):
        ids = ids_for(m.vocab_size, B=shape[0], T=shape[1], seed=20 + step)
        loss = hf(torch.as_tensor(ids), labels=torch.as_tensor(ids)).loss
        topt.zero_grad(set_to_none=True)
        loss.backward()
        topt.step()
        want.append(loss.item())
        got.append(m.forward_backward(ids))
        opt.step(m.gradients())
    worst = max(abs(g - w) / abs(w) for g, w in zip(got, want))
    print("%s AdamW steps: losses %s, torch %s, max rel diff %.3g" % (arch, got, want, worst))
    # f32 rounding differences grow through AdamW's steps (a gradient element near zero can
    # take either sign): 1e-4 relative; the steps move the loss well past it
    assert abs(want[-1] - want[0]) > 10 * 1e-4 * abs(want[0])
    assert worst < 1e-4, (got, want)


def test_bf16_lora_training_loss(store):
    folder, ref = hf_model(store, "llama", "bfloat16")
    m = ours(folder)
    m.add_lora(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    ids = ids_for(m.vocab_size, T=10, seed=13)
    with torch.no_grad():
        want = ref(torch.as_tensor(ids), labels=torch.as_tensor(ids)).loss.item()
    assert abs(m.forward_backward(ids) - want) < 3e-2 * abs(want)
    assert all(np.isfinite(to_np(g)).all() for g in m.gradients().values())


# ---------------------------------------------------------------- bad folders and adapters

def broken_copy(src, dst, edit=None, config=None):
    shutil.copytree(src, dst)
    if config is not None:
        p = os.path.join(dst, "config.json")
        c = json.load(open(p))
        c.update(config)
        json.dump(c, open(p, "w"))
    if edit:
        edit(dst)
    return str(dst)


def test_bad_folders_refused_with_a_message(store, tmp_path):
    folder, _ = hf_model(store, "llama")
    sharded, _ = hf_model(store, "llama", sharded=True)
    with pytest.raises(gpucore.FileIOError):
        ours(str(tmp_path / "absent"))
    cases = [
        (dict(config={"model_type": "falcon"}), gpucore.NotSupportedError, "model_type"),
        (dict(config={"rope_scaling": {"rope_type": "yarn", "factor": 2.0}}), gpucore.NotSupportedError, "rope_scaling"),
        (dict(config={"hidden_size": 48}), (gpucore.ShapeMismatchError, gpucore.CorruptFileError), ""),
        (dict(edit=lambda d: os.remove(os.path.join(d, "config.json"))), gpucore.FileIOError, "config.json"),
        (dict(edit=lambda d: open(os.path.join(d, "config.json"), "w").write("{\"model_type\": ")),
         gpucore.CorruptFileError, "config.json"),
        (dict(edit=lambda d: os.truncate(os.path.join(d, "model.safetensors"),
                                         os.path.getsize(os.path.join(d, "model.safetensors")) - 100)),
         gpucore.CorruptFileError, ""),
    ]
    for i, (kw, exc, word) in enumerate(cases):
        bad = broken_copy(folder, tmp_path / ("bad%d" % i), **kw)
        with pytest.raises(exc) as e:
            ours(bad)
        assert word in str(e.value), str(e.value)

    def drop_shard(d):
        idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
        os.remove(os.path.join(d, sorted(set(idx["weight_map"].values()))[-1]))
    bad = broken_copy(sharded, tmp_path / "noshard", edit=drop_shard)
    with pytest.raises(gpucore.GpucoreError) as e:
        ours(bad)
    assert "safetensors" in str(e.value)


def test_bad_adapters_refused_and_model_unchanged(store, tmp_path):
    folder, ref = hf_model(store, "qwen2")
    pm = peft_model(ref, "qwen2")
    good = str(tmp_path / "good")
    peft_save(pm, good)
    m = ours(folder)
    ids = ids_for(m.vocab_size, seed=14)
    before = to_np(m(ids))

    def rename_key(d):
        from safetensors.torch import load_file, save_file
        p = os.path.join(d, "adapter_model.safetensors")
        sd = load_file(p)
        k = sorted(sd)[0]
        sd[k.replace("lora_A", "lora_a")] = sd.pop(k)
        save_file(sd, p)

    def set_cfg(**kw):
        def f(d):
            p = os.path.join(d, "adapter_config.json")
            c = json.load(open(p))
            c.update(kw)
            json.dump(c, open(p, "w"))
        return f
    for i, (edit, word) in enumerate([(rename_key, "lora_a"), (set_cfg(use_dora=True), "use_dora"),
                                      (set_cfg(r=8), ""), (set_cfg(peft_type="PREFIX_TUNING"), "peft_type")]):
        bad = broken_copy(good, tmp_path / ("bad%d" % i), edit=edit)
        with pytest.raises(gpucore.GpucoreError) as e:
            m.load_adapter(bad)
        assert word in str(e.value), str(e.value)
        assert m.lora_count == 0
    assert rel(to_np(m(ids)), before) == 0.0
    with pytest.raises(gpucore.InvalidArgumentError):
        m.add_lora(r=4, target_modules=["c_attn"])  # not a module of qwen2


def test_text_prompt_through_tokenizer_json(store, tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    folder, _ = hf_model(store, "mistral")
    text_folder = shutil.copytree(folder, str(tmp_path / "with_tokenizer"))
    vocab = {"w%d" % i: i for i in range(103)}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="w0"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.save(os.path.join(text_folder, "tokenizer.json"))
    m = ours(text_folder)
    out = m.generate_text("w5 w17 w33", max_new_tokens=5, eos_token_id=-1)
    ids = m.generate(np.array([[5, 17, 33]]), max_new_tokens=5, eos_token_id=-1)[0]
    assert out == " ".join("w%d" % i for i in ids)
    with pytest.raises(gpucore.NotSupportedError, match="tokenizer.json"):
        ours(folder).generate_text("w1")


@pytest.mark.parametrize("arch", ARCHS)
def test_default_lora_targets_are_peft_defaults(arch):
    """The library's table of architectures gives PEFT's own default target modules."""
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as peft_defaults
    assert models.default_lora_targets(arch) == tuple(peft_defaults[arch])
    assert models.default_lora_targets("no_such_arch") == ()
