#!/usr/bin/env python3
"""Peer of bench_qlora: transformers' LlamaForCausalLM loaded with bitsandbytes' 4-bit NF4
(BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=bfloat16);
block 64, no double quantization, as ours), the other weights in bf16, PEFT LoRA r 16 / alpha 32 on
every linear layer, gradient checkpointing (non-reentrant), torch.optim.AdamW on the adapters; on the
SAME folders and token ids as bench_qlora (qlora_fixture.py, --dir as bench_qlora; it writes the
folder when it is missing), the same cases, warm-up and timed steps.

Rows (bench contract, "peer": "torch <version>"): tokens_per_s, step_s_median / _min / _max,
peak_rss_bytes (VmHWM, reset per case), load_s, loss_step_<k>; "impl" names the transformers, PEFT
and bitsandbytes versions.

  torch_qlora.py [--json] [--quick|--full] [--dir DIR] [--cases NAME,...] [--warmup W] [--steps N]

Prints nothing and exits 0 (saying why on stderr) when torch, transformers, peft or bitsandbytes is
absent.
"""
import os
import json
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
import qlora_fixture as fx  # noqa: E402


def main():
    a = fx.parse(__doc__)
    try:
        import torch
        import transformers
        import peft
        import bitsandbytes
    except Exception as e:  # noqa: BLE001 - any import failure means no peer here
        print("torch_qlora: %s: %s; skipped" % (type(e).__name__, e), file=sys.stderr)
        return 0
    transformers.logging.set_verbosity_error()
    peer = "torch %s" % torch.__version__
    impl = "transformers %s + peft %s + bitsandbytes %s nf4 (bf16 compute)" % (
        transformers.__version__, peft.__version__, bitsandbytes.__version__)

    def row(case, metric, value, unit):
        print(json.dumps({"bench": "qlora", "case": case, "device": "cpu", "metric": metric, "value": value,
                          "unit": unit, "peer": peer, "impl": impl}), flush=True)

    def load(folder):
        bnb = transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                              bnb_4bit_compute_dtype=torch.bfloat16)
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, quantization_config=bnb,
                                                                  torch_dtype=torch.bfloat16, device_map="cpu")
        model.config.use_cache = False
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
        cfg = peft.LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=fx.lora_targets(),
                              task_type="CAUSAL_LM")
        model = peft.get_peft_model(model, cfg)
        model.train()
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4, weight_decay=0.0)
        return model, opt

    def step(model, opt, ids):
        ids = torch.from_numpy(ids)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach().item()

    fx.run_cases(a, "torch", load, step, row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
