#!/usr/bin/env python3
"""bench_qlora — one QLoRA training step through gpucore.models: a frozen NF4 base (block 64, bf16
compute), LoRA r 16 / alpha 32 on every linear layer (q, k, v, o, gate, up, down), checkpointing
(recompute_all), AdamW on the adapters; on a SmolLM2-135M-shaped and a Llama-3.2-1B-shaped model
(random bf16 weights written once as Hugging Face folders by qlora_fixture.py into DIR/<shape>:
--dir, else $GPUCORE_BENCH_QLORA_DIR, else $TMPDIR/gpucore-bench-qlora). Step s of a (B, T) case
trains on the B*T ids at offset s*B*T of the folder's tokens.i64, as its peer (peers/torch_qlora.py:
transformers + PEFT + bitsandbytes on the same folders and ids) does.

Cases "135M B4 T256" and "1B B1 T256" (--cases to pick). Rows (bench contract): tokens_per_s,
step_s_median / _min / _max over the timed steps, peak_rss_bytes (VmHWM of this process from before
loading the case's model to after its last step, reset per case), load_s and loss_step_<k>. --quick: 1 warm-up + 2 timed steps; --full: 1 + 5.

  bench_qlora [--json] [--quick|--full] [--dir DIR] [--cases NAME,...] [--warmup W] [--steps N]

A Python program (the model layer's Python API is what a QLoRA user drives); meson configures it
into the build's bench/ folder beside the C programs, where it finds the sources and the library.
"""
import json
import os
import sys

BENCH_SRC = os.path.dirname(os.path.realpath(__file__))
for _d in (os.path.normpath(os.path.join(BENCH_SRC, "@SOURCE_REL@", "bench")), BENCH_SRC):
    if os.path.exists(os.path.join(_d, "qlora_fixture.py")):
        BENCH_SRC = _d
        break
sys.path[:0] = [BENCH_SRC, os.path.join(BENCH_SRC, "peers"), os.path.join(os.path.dirname(BENCH_SRC), "python")]
_built = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))), "src", "libgpucore.so")
if "GPUCORE_LIBRARY" not in os.environ and os.path.exists(_built):
    os.environ["GPUCORE_LIBRARY"] = _built

import qlora_fixture as fx  # noqa: E402

def main():
    a = fx.parse(__doc__)
    import gpucore
    from gpucore import models

    def row(case, metric, value, unit):
        print(json.dumps({"bench": "qlora", "case": case, "device": "cpu", "metric": metric, "value": value,
                          "unit": unit, "impl": "gpucore.models nf4 (bf16 compute) + LoRA + gpucore.AdamW"}),
              flush=True)

    def load(folder):
        m = models.from_pretrained(folder, quantize="nf4", dtype="bfloat16")
        m.add_lora(r=16, lora_alpha=32, target_modules=fx.lora_targets())
        m.set_checkpoint_policy("recompute_all")
        return m, gpucore.AdamW(m.trainable_parameters(), lr=1e-4, weight_decay=0.0)

    def step(m, opt, ids):
        loss = m.forward_backward(ids)
        opt.step(m.gradients())
        m.context.synchronize()
        return loss

    fx.run_cases(a, "ours", load, step, row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
