"""Gradient accumulation and the peak statistics of a training step, through the binding, against
transformers' autograd on tiny random models (hf_fixtures.py):

- ``forward_backward(ids, labels, accumulate=k > 0, total_tokens=N)`` over micro-batches of different
  sizes and label-token counts (-100 labels) gives the loss and the gradients of one forward_backward
  over all their rows (f32: 1e-6) and of autograd accumulating ``sum of token losses / N`` per
  micro-batch; full fine-tuning of GPT-2 (tied head, position embeddings), Llama (untied) and Qwen2
  (tied), and LoRA; the per-micro-batch mean that the common implementations use differs;
- ``gpucore.max_memory_allocated()`` rises over a step by at least its logits when the head runs in one
  chunk (nothing inside the library resets the peak), and by less in chunks of 16 rows, whose loss and
  gradients equal one chunk's (f32: 1e-6);
- ``gpucore-lm finetune --grad-accum 2 --batch 1`` follows ``--batch 2``'s losses.

Runs where torch, transformers and peft import (Debian's python3 with build-pydeps)."""
from __future__ import annotations

import copy
import os
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
hf_fixtures = pytest.importorskip("hf_fixtures")
pytest.importorskip("peft")  # test_gpucore_lm imports it

import gpucore  # noqa: E402
from gpucore import models  # noqa: E402
from test_gpucore_lm import exe_path, run  # noqa: E402  (gpucore-lm beside the library, its JSON lines)

DEVICE = os.environ.get("GPUCORE_TEST_DEVICE", "cpu")
transformers.logging.set_verbosity_error()


def rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    assert not np.isnan(out).any(), "NaN in the output"
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def grads_np(m):
    return {k: np.asarray(g.numpy(copy=True, convert=True), np.float64) for k, g in m.gradients().items()}


def rel_all(out, ref):
    """The normalised error over every gradient at once (a tensor whose exact gradient is zero, as a key
    projection's bias under softmax's shift invariance, holds rounding noise only: no per-tensor figure)."""
    keys = sorted(ref)
    return rel(np.concatenate([out[k].ravel() for k in keys]), np.concatenate([ref[k].ravel() for k in keys]))


def batch(vocab, B=5, T=11, seed=3):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, size=(B, T))
    lab = ids.copy()
    lab[rng.random(lab.shape) < 0.3] = -100
    lab[3, 2:] = -100  # one row with almost no label tokens: the micro-batches' counts differ a lot
    return ids, lab


SPLITS = ([0, 1, 5], [0, 3, 4, 5])


@pytest.mark.parametrize("arch", ["gpt2", "llama", "qwen2"])
def test_accumulated_micro_batches_equal_the_whole_batch_and_autograd(arch, tmp_path):
    folder, ref = hf_fixtures.make_model(arch, tmp_path)
    m = models.from_pretrained(folder, device=DEVICE)
    m.set_full_finetune(True)
    ids, lab = batch(m.vocab_size)
    whole = m.forward_backward(ids, lab)
    want = grads_np(m)
    n = m.count_label_tokens(ids, lab)
    assert n == int((lab[:, 1:] != -100).sum())
    # autograd, accumulating sum(token losses) / n per micro-batch
    hf = copy.deepcopy(ref).train()
    for split in SPLITS:
        hf.zero_grad()
        hf_loss = 0.0
        counts = []
        loss = 0.0
        for k in range(len(split) - 1):
            i, l = ids[split[k]:split[k + 1]], lab[split[k]:split[k + 1]]
            counts.append(m.count_label_tokens(i, l))
            loss += m.forward_backward(i, l, accumulate=k > 0, total_tokens=n)
            logits = hf(torch.as_tensor(i)).logits[:, :-1].float()
            t = torch.as_tensor(l)[:, 1:]
            part = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), t.reshape(-1),
                                                     ignore_index=-100, reduction="sum") / n
            part.backward()
            hf_loss += part.item()
        got = grads_np(m)
        assert sum(counts) == n and len(set(counts)) > 1
        worst = rel_all(got, want)
        hf_grads = {k: p.grad.double().numpy() for k, p in hf.named_parameters()}
        if arch == "gpt2":  # Conv1D: held [out, in] here, [in, out] in transformers
            hf_grads = {k: (g.T if k.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")) else g)
                        for k, g in hf_grads.items()}
        worst_hf = rel_all(got, {k: hf_grads[k] for k in want})
        print("%s split %s: tokens %s of %d, loss %.7f vs whole %.7f vs autograd %.7f; grads rel %.2g (whole), "
              "%.2g (autograd)" % (arch, split, counts, n, loss, whole, hf_loss, worst, worst_hf))
        assert abs(loss - whole) <= 1e-6 * abs(whole)
        assert worst <= 1e-6
        assert abs(loss - hf_loss) <= 1e-5 * abs(hf_loss) and worst_hf <= 1e-5
    # the mean per micro-batch (what total_tokens avoids) is another loss
    wrong = sum(m.forward_backward(ids[a:b], lab[a:b], accumulate=a > 0) for a, b in ((0, 1), (1, 5)))
    assert abs(wrong - 2 * whole) > 1e-3 * abs(whole)


def test_lora_accumulates_and_the_first_micro_batch_overwrites(tmp_path):
    folder, _ = hf_fixtures.make_model("llama", tmp_path)
    m = models.from_pretrained(folder, device=DEVICE)
    m.add_lora(r=4, lora_alpha=8, target_modules=("q_proj", "v_proj", "down_proj"), seed=2)
    params = m.trainable_parameters()
    for k, p in params.items():  # B away from zero, so A's gradients are not zero
        if "lora_B" in k:
            p.copy_(gpucore.tensor(np.random.default_rng(1).normal(0, 0.3, p.shape).astype(np.float32),
                                   device=DEVICE))
    ids, lab = batch(m.vocab_size, seed=4)
    m.forward_backward(ids, lab)
    want = grads_np(m)
    n = m.count_label_tokens(ids, lab)
    for _ in range(2):  # the second round starts from the first's gradients: accumulate=False clears them
        for k, (a, b) in enumerate(((0, 2), (2, 5))):
            m.forward_backward(ids[a:b], lab[a:b], accumulate=k > 0, total_tokens=n)
        got = grads_np(m)
        assert rel_all(got, want) <= 1e-6
    with pytest.raises(gpucore.InvalidArgumentError, match="total_label_tokens"):
        m.forward_backward(ids, lab, accumulate=True, total_tokens=-1)


def test_peak_of_a_step_holds_its_logits_unless_chunked(tmp_path):
    folder, _ = hf_fixtures.make_model("qwen2", tmp_path, vocab_size=8192)
    m = models.from_pretrained(folder, device=DEVICE)
    m.set_full_finetune(True)
    ids = np.random.default_rng(5).integers(0, m.vocab_size, size=(4, 32))
    ctx = m.context
    logits = ids.size * m.vocab_size * 4
    out = {}
    for rows in (ids.size, 16):
        m.set_head_chunk_rows(rows)
        m.forward_backward(ids)
        gpucore.reset_peak_memory_stats(ctx)
        before = gpucore.memory_allocated(ctx)
        loss = m.forward_backward(ids)
        out[rows] = (gpucore.max_memory_allocated(ctx) - before, loss, grads_np(m))
    whole, chunked = out[ids.size], out[16]
    print("peak rise over a step: %d bytes in one chunk, %d in chunks of 16 rows; logits %d" % (
        whole[0], chunked[0], logits))
    assert whole[0] >= logits > chunked[0]
    assert abs(chunked[1] - whole[1]) <= 1e-6 * abs(whole[1]) and rel_all(chunked[2], whole[2]) <= 1e-6


def test_gpucore_lm_grad_accum_follows_the_whole_batch(tmp_path):
    folder, ref = hf_fixtures.make_model("llama", tmp_path)
    tokens = np.random.default_rng(7).integers(0, ref.config.vocab_size, size=2000)
    data = str(tmp_path / "train.bin")
    header = np.zeros(256, dtype="<i4")
    header[:3] = (20240520, 1, len(tokens))
    with open(data, "wb") as f:
        f.write(header.tobytes() + tokens.astype("<u2").tobytes())

    def losses(*extra):
        rows = run("finetune", folder, "--data", data, "--steps", 4, "--seq", 16, "--lora", 4, "--lr", 1e-2,
                   "--seed", 3, *extra)
        return [r["loss"] for r in rows if "step" in r], rows[-1]

    whole, _ = losses("--batch", "2")
    accum, last = losses("--batch", "1", "--grad-accum", "2")
    print("--batch 2: %s\n--batch 1 --grad-accum 2: %s" % (whole, accum))
    assert len(whole) == len(accum) == 4 and last["final_loss"] == accum[-1]
    assert abs(accum[0] - whole[0]) <= 1e-6 * abs(whole[0])
    assert max(abs(a - w) / abs(w) for a, w in zip(accum, whole)) <= 1e-4
    p = subprocess.run([exe_path(), "finetune", folder, "--data", data, "--grad-accum", "0"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and "--grad-accum" in p.stderr
