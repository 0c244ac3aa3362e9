"""hf_fixtures.py — tiny random Hugging Face decoder models for the language-model tests.

make_model(arch, tmpdir, dtype="float32", sharded=False, **overrides) builds a small GPT-2,
Llama (grouped-query attention, rope_theta 500000, Llama-3 rope_scaling), Mistral or Qwen2
model with transformers, fills every parameter (biases and norm weights included, so a
dropped bias or a norm weight read wrongly changes the logits) with seeded random values
large enough that logits differ clearly between tokens, saves it with save_pretrained
(safetensors; in f32, bf16 or f16; sharded with a small max_shard_size when asked) and
returns (folder, model). The model is in eval mode, in the saved dtype.

Needs torch and transformers (Debian's python3 with build-pydeps on PYTHONPATH); importing
this module without them raises ImportError, which tests turn into a skip with the reason.
"""
import math
import os

import numpy as np

import torch
import transformers

ARCHS = ("gpt2", "llama", "mistral", "qwen2")

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
           "f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def base_config(arch, **overrides):
    """The tiny config of `arch` (a transformers config object), with overrides applied."""
    if arch == "gpt2":
        kw = dict(vocab_size=101, n_positions=64, n_embd=32, n_layer=2, n_head=4,
                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=1, eos_token_id=2)
        kw.update(overrides)
        return transformers.GPT2Config(**kw)
    common = dict(vocab_size=103, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                  rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, attention_dropout=0.0)
    if arch == "llama":
        common.update(rope_theta=500000.0, tie_word_embeddings=False,
                      rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 32})
        common.update(overrides)
        return transformers.LlamaConfig(**common)
    if arch == "mistral":
        common.update(rope_theta=10000.0, sliding_window=4096, tie_word_embeddings=False)
        common.update(overrides)
        return transformers.MistralConfig(**common)
    if arch == "qwen2":
        common.update(rope_theta=1000000.0, tie_word_embeddings=True, use_sliding_window=False)
        common.update(overrides)
        return transformers.Qwen2Config(**common)
    raise ValueError("unknown arch %r (one of %s)" % (arch, ", ".join(ARCHS)))


def randomize(model, seed=0):
    """Seeded random values in every parameter: matrices N(0, 1/fan_in) (embeddings N(0, 0.25)),
    biases N(0, 0.1^2), norm weights 1 + N(0, 0.1^2)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if p.dim() == 1:
                if name.endswith("bias"):
                    val = 0.1 * r
                else:
                    val = 1.0 + 0.1 * r
            elif "wte" in name or "wpe" in name or "embed_tokens" in name:
                val = 0.5 * r  # a tied head reads these too: logits of a few units, not a one-hot softmax
            else:
                # GPT-2's Conv1D stores [in, out]; nn.Linear [out, in]
                fan_in = p.shape[0] if ".c_" in name else p.shape[1]
                val = r / math.sqrt(fan_in)
            p.copy_(val.to(p.dtype))
    return model


def make_model(arch, tmpdir, dtype="float32", sharded=False, seed=0, **overrides):
    """Build, randomize and save a tiny `arch` model under tmpdir; return (folder, model).

    dtype: "float32" | "bfloat16" | "float16" (the weights' dtype in the file and in model).
    sharded: save with max_shard_size small enough to give several shards and an index.
    overrides: config fields (e.g. num_key_value_heads=4, tie_word_embeddings=True)."""
    cfg = base_config(arch, **overrides)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    model.eval()
    randomize(model, seed)
    tdt = _DTYPES[dtype]
    model = model.to(tdt)
    name = "%s-%s%s%s" % (arch, dtype, "-sharded" if sharded else "",
                          "" if not overrides else "-" + "-".join(sorted(overrides)))
    folder = os.path.join(str(tmpdir), name)
    kw = dict(safe_serialization=True)
    if sharded:
        kw["max_shard_size"] = "40KB"
    model.save_pretrained(folder, **kw)
    return folder, model


def rel(out, ref):
    """||out - ref|| / ||ref|| in float64; NaN in out fails."""
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    assert not np.isnan(out).any(), "NaN in the output"
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def to_np(t):
    """A gpucore tensor as float64 numpy (bf16 through its f32 value)."""
    return np.asarray(t.numpy(copy=True, convert=True), np.float64)


def logits(model, ids):
    """The model's logits for a list/array of token ids [B, T], as a float64 numpy array."""
    with torch.no_grad():
        t = torch.as_tensor(ids, dtype=torch.long)
        return model(t).logits.double().numpy()


def peft_save(peft_model, folder):
    """PeftModel.save_pretrained(folder) without Jinja2: PEFT writes a model card from a
    template (which needs Jinja2, absent from build-pydeps) unless README.md exists."""
    os.makedirs(folder, exist_ok=True)
    readme = os.path.join(folder, "README.md")
    if not os.path.exists(readme):
        with open(readme, "w") as f:
            f.write("---\n---\n")
    peft_model.save_pretrained(folder)
    return folder
