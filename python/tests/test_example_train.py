"""The Python training example (mixed precision + checkpoint executor) runs and learns."""
import importlib.util
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "python", "train_mlp.py")


def test_train_mlp_loss_falls(capsys):
    if not os.path.exists(EXAMPLE):
        pytest.skip("examples/python/train_mlp.py is not in this tree")
    spec = importlib.util.spec_from_file_location("train_mlp_example", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    r = mod.main(["--device", "cpu", "--steps", "40", "--batch", "64", "--hidden", "64", "--log-every", "10",
                  "--policy", "recompute_all"])
    out = capsys.readouterr().out
    assert "samples/s" in out and "peak memory" in out and "checkpointing plan" in out
    assert r["last_loss"] < 0.7 * r["first_loss"], r
    assert r["peak_bytes"] > 0 and r["samples_per_s"] > 0
