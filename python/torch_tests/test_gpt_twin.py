"""examples/train_gpt against its PyTorch twin (bench/peers/torch_gpt.py): the same GPT, the
same initial weights (the safetensors file train_gpt writes with --save-init), the same batches
and optimizer, in f32 on the CPU; the two loss curves agree to 1e-4 relative for 50 steps. Also
the bf16 run with its LoRA fine-tuning phase: finite losses that fall, and the base and adapter
safetensors files that PyTorch's side can read. Runs where torch is importable (Debian's
python3-torch; scripts/test.sh runs it with that interpreter) and train_gpt is built beside the
library GPUCORE_LIBRARY points to."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TWIN = os.path.join(ROOT, "bench", "peers", "torch_gpt.py")
GPL = "/usr/share/common-licenses/GPL-3"


def train_gpt_path() -> str:
    lib = os.environ.get("GPUCORE_LIBRARY", os.path.join(ROOT, "build", "src", "libgpucore.so"))
    exe = os.path.join(os.path.dirname(os.path.dirname(lib)), "examples", "train_gpt")
    if not os.path.exists(exe):
        pytest.skip("train_gpt is not built (%s)" % exe)
    if not os.path.exists(GPL):
        pytest.skip("%s is absent (Debian's base-files installs it)" % GPL)
    return exe


def losses(out: str, phase: str = "base") -> list:
    rows = [json.loads(l) for l in out.splitlines() if l.startswith("{") and '"step"' in l]
    return [r["loss"] for r in rows if r["phase"] == phase]


def test_f32_loss_curve_matches_pytorch(tmp_path):
    exe = train_gpt_path()
    init = str(tmp_path / "init.safetensors")
    common = ["--layers", "2", "--width", "64", "--heads", "4", "--seq", "32", "--batch", "8", "--steps", "50",
              "--seed", "1234", "--lr", "3e-3", "--clip", "1.0"]
    ours = subprocess.run([exe, "--f32", "--device", "cpu", "--finetune-steps", "0", "--sample", "0", "--no-profile",
                           "--log-json", "--save-init", init] + common, capture_output=True, text=True, timeout=120)
    assert ours.returncode == 0, ours.stderr
    twin = subprocess.run([sys.executable, TWIN, "--init", init, "--data", GPL, "--threads", "2"] + common,
                          capture_output=True, text=True, timeout=120)
    assert twin.returncode == 0, twin.stderr
    a, b = losses(ours.stdout), losses(twin.stdout)
    assert len(a) == len(b) == 50
    worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
    print("train_gpt vs PyTorch twin, 50 f32 steps: worst relative loss difference %.3g" % worst)
    assert worst < 1e-4, list(zip(a, b))
    assert b[-1] < b[0] - 1.0  # it learns: from ln(256) = 5.55 towards the text's byte statistics


def test_bf16_train_then_lora_finetune(tmp_path):
    exe = train_gpt_path()
    base, adapter = str(tmp_path / "base.safetensors"), str(tmp_path / "adapter.safetensors")
    run = subprocess.run([exe, "--device", "cpu", "--steps", "12", "--finetune-steps", "6", "--sample", "20",
                          "--checkpoint-policy", "sqrt", "--save", base, "--save-adapter", adapter, "--no-profile"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    rows = [l.split() for l in run.stdout.splitlines() if " step " in l]
    bl = [float(r[-1]) for r in rows if r[0] == "base"]
    ll = [float(r[-1]) for r in rows if r[0] == "lora"]
    assert len(bl) == 12 and len(ll) == 6 and all(map(lambda v: v == v, bl + ll))
    assert bl[-1] < bl[0] - 0.5
    assert 'sample: "The ' in run.stdout
    sys.path.insert(0, os.path.dirname(TWIN))
    import torch_gpt  # the twin's safetensors reader
    w = torch_gpt.read_safetensors(base)
    assert w["layers.0.attn.w_qkv"].shape == (192, 64) and "optimizer.step" in w
    lo = torch_gpt.read_safetensors(adapter)
    assert sorted(lo) == sorted("layers.%d.attn.%s" % (l, p) for l in range(2)
                                for p in ("qkv.lora_a", "qkv.lora_b", "out.lora_a", "out.lora_b"))
    assert float(lo["layers.0.attn.qkv.lora_b"].abs().sum()) > 0  # B started at 0 and trained
