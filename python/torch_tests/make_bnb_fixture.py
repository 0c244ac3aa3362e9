"""Make the bitsandbytes fixtures: tiny random Llamas that transformers loads with bitsandbytes' NF4
(BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=float32))
and saves with save_pretrained, in bitsandbytes' 4-bit layout, plus reference.npz: token ids and
the logits transformers computes with bitsandbytes on the CPU (float64), and the versions used.
- fixtures/bnb-nf4-llama: the absmax stored as f32;
- fixtures/bnb-nf4-dq-llama: bnb_4bit_use_double_quant=True (the absmax quantized again, 8-bit in
  blocks of 256 after subtracting their mean), wider (hidden 128, intermediate 320) so that layers
  hold several nested blocks and a partial last one.
- fixtures/bnb-int8-llama: BitsAndBytesConfig(load_in_8bit=True): int8 weights and per-row SCB
  (reference.npz holds only the ids: bitsandbytes computes int8 x int8 products with an outlier
  split, so its logits are not the dequantized weights'; the test builds that reference).
test_bnb_folder.py loads the folders with our loader and compares.

Needs PyTorch >= 2.2, transformers, accelerate and bitsandbytes >= 0.46 (its CPU 4-bit path);
Debian's torch 1.13 has none, so the folder is committed. Run from the repository root:
    PYTHONPATH=/path/to/torch2:python/torch_tests python3 python/torch_tests/make_bnb_fixture.py [FIXTURES_DIR]
"""
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
import transformers
import bitsandbytes

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_fixtures  # noqa: E402


def exact_cpu_path(model):
    """bitsandbytes' CPU inference on a CPU with AVX512-BF16 repacks each weight on its first forward
    with the absmax rounded to bf16; turned off, Linear4bit computes dequantize_4bit's values."""
    for mod in model.modules():
        if type(mod).__name__ == "Linear4bit":
            mod.support_avx512bf16_for_cpu = False


def make(out, double_quant, int8=False, **overrides):
    with tempfile.TemporaryDirectory() as tmp:
        # intermediate_size a multiple of 64: every in_features a multiple of the block (64).
        # bitsandbytes 0.50's native CPU dequantize_4bit takes the blocks row by row, so for
        # down_proj [64, 96] it disagrees with the flattened blocks its quantize_4bit wrote (and
        # that CUDA and this library read): 0.17 apart in the weight, 0.22 in the logits, a
        # reference we cannot match
        folder, _ = hf_fixtures.make_model("llama", tmp, **overrides)
        cfg = transformers.BitsAndBytesConfig(load_in_8bit=True) if int8 else \
            transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                            bnb_4bit_compute_dtype=torch.float32,
                                            bnb_4bit_use_double_quant=double_quant)
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, quantization_config=cfg,
                                                                  torch_dtype=torch.float32, device_map="cpu")
        model.eval()
        assert type(model.model.layers[0].self_attn.q_proj).__name__ == ("Linear8bitLt" if int8 else "Linear4bit")
        assert int8 or model.model.layers[0].self_attn.q_proj.weight.quant_state.nested == double_quant
        exact_cpu_path(model)
        shutil.rmtree(out, ignore_errors=True)
        model.save_pretrained(out, safe_serialization=True)
        ids = np.random.default_rng(7).integers(0, model.config.vocab_size, size=(2, 12)).astype(np.int64)
        with torch.no_grad():
            logits = model(torch.as_tensor(ids)).logits.double().numpy()
    for extra in ("generation_config.json",):
        if os.path.exists(os.path.join(out, extra)):
            os.remove(os.path.join(out, extra))
    versions = "torch %s, transformers %s, bitsandbytes %s" % (torch.__version__, transformers.__version__,
                                                               bitsandbytes.__version__)
    ref = dict(ids=ids, versions=np.array(versions)) if int8 else dict(ids=ids, logits=logits, versions=np.array(versions))
    np.savez(os.path.join(out, "reference.npz"), **ref)
    print("wrote %s (%s)" % (out, versions))


def main():
    dst = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
    make(os.path.join(dst, "bnb-nf4-llama"), False, intermediate_size=128)
    make(os.path.join(dst, "bnb-nf4-dq-llama"), True, hidden_size=128, intermediate_size=320)
    make(os.path.join(dst, "bnb-int8-llama"), False, int8=True, intermediate_size=96)


if __name__ == "__main__":
    main()
