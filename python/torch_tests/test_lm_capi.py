"""The language-model C API (gpucore_lm_*, called through ctypes directly, below any Python
binding) against transformers 4.44 and PEFT 0.12 on tiny random GPT-2, Llama (GQA,
rope_theta 500000, llama3 rope_scaling), Mistral and Qwen2 models from hf_fixtures:
logits (f32 rel 1e-4, bf16 rel 3e-2, also sharded and converted on load), greedy generation
token for token (with and without an eos that stops early), the causal-LM loss with -100
labels and every full-fine-tuning gradient against autograd (under two recompute policies),
PEFT adapters both ways with their gradients, merge and save_pretrained read back by
transformers, and sampling frequencies against the float64 distribution after temperature,
top-k and top-p. Needs torch, transformers and peft (Debian's python3 with build-pydeps on
PYTHONPATH); skips with the reason otherwise."""
from __future__ import annotations

import ctypes as C
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="transformers is not importable (build-pydeps)")
peft = pytest.importorskip("peft", reason="peft is not importable (build-pydeps)")
import hf_fixtures as F  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VP = C.c_void_p


@pytest.fixture(scope="module")
def lib():
    path = os.environ.get("GPUCORE_LIBRARY", os.path.join(ROOT, "build", "src", "libgpucore.so"))
    if not os.path.exists(path):
        pytest.skip("libgpucore is not built (%s)" % path)
    L = C.CDLL(path)
    L.gpucore_last_error.restype = C.c_char_p
    for f in ("gpucore_lm_trainable_count", "gpucore_lm_parameter_count", "gpucore_lm_lora_count"):
        getattr(L, f).restype = C.c_int64
        getattr(L, f).argtypes = [VP]
    return L


class Api:
    def __init__(self, L, device="cpu"):
        self.L = L
        self.ctx = VP()
        self.ck(L.gpucore_context_create(device.encode(), C.byref(self.ctx)))

    def ck(self, st):
        if st:
            raise RuntimeError("status %d: %s" % (st, self.L.gpucore_last_error().decode()))

    def load(self, folder, dtype=-1):
        m = VP()
        self.ck(self.L.gpucore_lm_create(self.ctx, folder.encode(), dtype, C.byref(m)))
        return m

    def to_np(self, t):
        L = self.L
        nd = L.gpucore_tensor_ndim(t)
        sh = (C.c_int64 * nd)()
        self.ck(L.gpucore_tensor_shape(t, sh))
        src = t
        if L.gpucore_tensor_dtype(t) != 0:
            src = VP()
            self.ck(L.gpucore_tensor_create(self.ctx, 0, nd, sh, C.byref(src)))
            self.ck(L.gpucore_cast(src, t, None))
        a = np.empty(tuple(sh), np.float32)
        self.ck(L.gpucore_copy_to_host(a.ctypes.data_as(VP), C.c_int64(a.nbytes), src))
        if src is not t:
            L.gpucore_tensor_destroy(src)
        return a.astype(np.float64)

    def forward(self, m, ids):
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        out = VP()
        self.ck(self.L.gpucore_lm_forward_host(m, ids.ctypes.data_as(VP), C.c_int64(ids.shape[0]),
                                               C.c_int64(ids.shape[1]), C.byref(out)))
        a = self.to_np(out)
        self.L.gpucore_tensor_destroy(out)
        return a

    def generate(self, m, ids, n, do_sample=0, temperature=1.0, top_k=0, top_p=1.0, seed=0, eos=-1, pad=-1):
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        B, T = ids.shape
        out = np.zeros(B * (T + n), np.int64)
        ol = C.c_int64()
        self.ck(self.L.gpucore_lm_generate(m, ids.ctypes.data_as(VP), C.c_int64(B), C.c_int64(T), C.c_int64(n),
                                           do_sample, C.c_double(temperature), C.c_int64(top_k), C.c_double(top_p),
                                           C.c_uint64(seed), C.c_int64(eos), C.c_int64(pad),
                                           out.ctypes.data_as(VP), C.byref(ol)))
        return out[:B * ol.value].reshape(B, ol.value)

    def forward_backward(self, m, ids, labels=None):
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        lab = None if labels is None else np.ascontiguousarray(labels, dtype=np.int64)
        loss = C.c_double()
        self.ck(self.L.gpucore_lm_forward_backward_host(m, ids.ctypes.data_as(VP),
                                                        None if lab is None else lab.ctypes.data_as(VP),
                                                        C.c_int64(ids.shape[0]), C.c_int64(ids.shape[1]),
                                                        C.byref(loss)))
        return loss.value

    def trainables(self, m):
        out = {}
        for i in range(self.L.gpucore_lm_trainable_count(m)):
            nm, p, g = C.c_char_p(), VP(), VP()
            self.ck(self.L.gpucore_lm_trainable(m, C.c_int64(i), C.byref(nm), C.byref(p), C.byref(g)))
            out[nm.value.decode()] = (p, g)
        return out

    def add_lora(self, m, r, alpha, dropout, targets, seed=0):
        arr = (C.c_char_p * len(targets))(*[t.encode() for t in targets])
        self.ck(self.L.gpucore_lm_add_lora(m, C.c_int64(r), C.c_double(alpha), C.c_double(dropout), arr,
                                           C.c_int64(len(targets)), C.c_uint64(seed)))


@pytest.fixture(scope="module")
def api(lib):
    a = Api(lib)
    yield a
    lib.gpucore_context_destroy(a.ctx)


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


TARGETS = {"gpt2": ["c_attn", "c_proj", "c_fc"],
           "llama": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
           "mistral": ["q_proj", "v_proj"], "qwen2": ["k_proj", "o_proj", "down_proj"]}


@pytest.mark.parametrize("arch", F.ARCHS)
@pytest.mark.parametrize("dtype,sharded", [("float32", False), ("float32", True), ("bfloat16", False)])
def test_logits_match_transformers(api, tmp_path, arch, dtype, sharded):
    folder, hf = F.make_model(arch, tmp_path, dtype=dtype, sharded=sharded)
    if sharded:
        assert os.path.exists(os.path.join(folder, "model.safetensors.index.json"))
    m = api.load(folder)
    ids = np.random.default_rng(0).integers(0, hf.config.vocab_size, (2, 11))
    err = rel(api.forward(m, ids), F.logits(hf, ids))
    api.L.gpucore_lm_destroy(m)
    assert err < (1e-4 if dtype == "float32" else 3e-2), err


@pytest.mark.parametrize("arch", F.ARCHS)
def test_f32_checkpoint_loaded_as_bf16(api, tmp_path, arch):
    folder, hf = F.make_model(arch, tmp_path)
    m = api.load(folder, 3)  # GPUCORE_BF16
    ids = np.random.default_rng(1).integers(0, hf.config.vocab_size, (1, 8))
    err = rel(api.forward(m, ids), F.logits(hf.to(torch.bfloat16), ids))
    api.L.gpucore_lm_destroy(m)
    assert err < 3e-2, err


def _same_or_near_tie(hf, ours, ref, prompt_len, dtype):
    """f32: equal token for token. bf16: equal up to the first step where transformers' own bf16
    logits put our token within bf16 rounding of its choice (a near-tie that 8-bit mantissas
    decide either way: its RMSNorm, RoPE and SwiGLU round intermediate products that we keep in
    f32); every step before it must agree."""
    if dtype == "float32" or ours.shape == ref.shape and (ours == ref).all():
        np.testing.assert_array_equal(ours, ref)
        return
    n = min(ours.shape[1], ref.shape[1])
    rows, cols = np.nonzero(ours[:, :n] != ref[:, :n])
    b, t = rows[np.argmin(cols)], cols.min()
    assert t >= prompt_len
    with torch.no_grad():
        lg = hf(torch.tensor(ref[b:b + 1, :t])).logits[0, -1].float().numpy()
    gap = lg[ref[b, t]] - lg[ours[b, t]]
    assert 0 <= gap <= 2 ** -7 * 2 * np.abs(lg).max(), (t, gap, np.abs(lg).max())


@pytest.mark.parametrize("arch", F.ARCHS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_greedy_generation_token_for_token(api, tmp_path, arch, dtype):
    folder, hf = F.make_model(arch, tmp_path, dtype=dtype)
    m = api.load(folder)
    ids = np.random.default_rng(2).integers(0, hf.config.vocab_size, (2, 5))
    # an explicit all-ones mask: without one, generate() masks every prompt token equal to pad_token_id
    with torch.no_grad():
        ref = hf.generate(torch.tensor(ids), attention_mask=torch.ones(ids.shape, dtype=torch.long),
                          max_new_tokens=24, do_sample=False, eos_token_id=None, pad_token_id=0).numpy()
    got = api.generate(m, ids, 24)
    _same_or_near_tie(hf, got, ref, 5, dtype)
    eos = int(got[0, 9])  # a token the first row produces: it stops there, the other row runs on
    with torch.no_grad():
        ref = hf.generate(torch.tensor(ids), attention_mask=torch.ones(ids.shape, dtype=torch.long),
                          max_new_tokens=24, do_sample=False, eos_token_id=eos, pad_token_id=0).numpy()
    got = api.generate(m, ids, 24, eos=eos, pad=0)
    api.L.gpucore_lm_destroy(m)
    _same_or_near_tie(hf, got, ref, 5, dtype)


# (2, 9): the token-embedding gradient over the whole table; (1, 8) with an id repeated: few
# enough ids that only their rows are summed and added (train.c's embedding_rows)
@pytest.mark.parametrize("arch", F.ARCHS)
@pytest.mark.parametrize("shape", [(2, 9), (1, 8)])
def test_loss_and_full_finetuning_gradients_match_autograd(api, tmp_path, arch, shape):
    folder, hf = F.make_model(arch, tmp_path)
    m = api.load(folder)
    ids = np.random.default_rng(3).integers(0, hf.config.vocab_size, shape)
    ids[-1, 5] = ids[0, 2]
    labels = ids.copy()
    labels[0, :3] = -100
    labels[-1, 5] = -100
    out = hf(torch.tensor(ids), labels=torch.tensor(labels))
    out.loss.backward()
    ref = {n: p.grad.double().numpy() for n, p in hf.named_parameters()}
    api.ck(api.L.gpucore_lm_set_full_finetune(m, 1))
    for policy in (0, 2):  # KEEP_ALL, EVERY_K with k = 2
        api.ck(api.L.gpucore_lm_set_checkpoint_policy(m, policy, C.c_int64(2)))
        loss = api.forward_backward(m, ids, labels)
        assert abs(loss - float(out.loss)) <= 1e-5 * abs(float(out.loss))
        tr = api.trainables(m)
        assert sorted(tr) == sorted(ref)
        for name, (_, g) in tr.items():
            want = ref[name].T if (arch == "gpt2" and ".c_" in name and ref[name].ndim == 2) else ref[name]
            err = rel(api.to_np(g), want)
            assert err < 1e-4, (name, err)
    api.L.gpucore_lm_destroy(m)


@pytest.mark.parametrize("arch", F.ARCHS)
def test_peft_adapter_both_ways(api, tmp_path, arch):
    folder, hf = F.make_model(arch, tmp_path)
    ids = np.random.default_rng(4).integers(0, hf.config.vocab_size, (2, 8))
    t = torch.tensor(ids)
    # PEFT -> here: logits and LoRA gradients
    pm = peft.get_peft_model(hf, peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=TARGETS[arch],
                                                 task_type="CAUSAL_LM"))
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_" in n:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    ad = F.peft_save(pm, str(tmp_path / "peft_adapter"))
    m = api.load(folder)
    api.ck(api.L.gpucore_lm_load_adapter(m, ad.encode()))
    assert rel(api.forward(m, ids), pm(t).logits.detach().double().numpy()) < 1e-4
    out = pm(t, labels=t)
    out.loss.backward()
    loss = api.forward_backward(m, ids)
    assert abs(loss - float(out.loss)) <= 1e-5 * abs(float(out.loss))
    ref = {n.replace(".default", ""): p.grad.double().numpy() for n, p in pm.named_parameters() if p.requires_grad}
    tr = api.trainables(m)
    assert sorted(tr) == sorted(ref)
    for name, (_, g) in tr.items():
        assert rel(api.to_np(g), ref[name]) < 1e-4, name
    api.L.gpucore_lm_destroy(m)
    # here -> PEFT, then merge and save_pretrained -> transformers
    folder2, hf2 = F.make_model(arch, tmp_path / "second")
    m = api.load(folder2)
    api.add_lora(m, 3, 6.0, 0.1, TARGETS[arch], seed=1)
    for i, (name, (p, _)) in enumerate(api.trainables(m).items()):
        if "lora_B" in name:
            api.ck(api.L.gpucore_random(p, 1, C.c_double(0), C.c_double(0.3), C.c_uint64(i), C.c_uint64(0), None))
    ours = str(tmp_path / "our_adapter")
    api.ck(api.L.gpucore_lm_save_adapter(m, ours.encode()))
    pm2 = peft.PeftModel.from_pretrained(hf2, ours)
    pm2.eval()
    mine = api.forward(m, ids)
    assert rel(mine, pm2(t).logits.detach().double().numpy()) < 1e-4
    api.ck(api.L.gpucore_lm_merge_adapter(m))
    assert rel(api.forward(m, ids), mine) < 1e-5
    saved = str(tmp_path / "merged")
    api.ck(api.L.gpucore_lm_save_pretrained(m, saved.encode()))
    back = transformers.AutoModelForCausalLM.from_pretrained(saved)
    back.eval()
    assert rel(F.logits(back, ids), mine) < 1e-4
    api.L.gpucore_lm_destroy(m)


def _warp(logits, temperature, top_k, top_p):
    """transformers' temperature, top-k and top-p warpers in float64: the sampling distribution."""
    s = logits / temperature
    if top_k:
        kth = np.sort(s)[-top_k]
        s = np.where(s < kth, -np.inf, s)
    p = np.exp(s - s.max())
    p /= p.sum()
    order = np.argsort(s, kind="stable")
    cum = np.cumsum(p[order])
    remove = cum <= 1 - top_p
    remove[-1] = False
    s2 = s.copy()
    s2[order[remove]] = -np.inf
    p = np.exp(s2 - s2.max())
    return p / p.sum()


@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, 0, 1.0), (0.7, 10, 1.0), (1.3, 0, 0.8), (1.0, 20, 0.6)])
def test_sampling_frequencies(api, tmp_path, temperature, top_k, top_p):
    folder, hf = F.make_model("llama", tmp_path)
    m = api.load(folder)
    prompt = np.array([[5, 17, 33]])
    n = 4000
    ids = np.repeat(prompt, n, axis=0)
    got = api.generate(m, ids, 1, do_sample=1, temperature=temperature, top_k=top_k, top_p=top_p, seed=11)[:, -1]
    p = _warp(F.logits(hf, prompt)[0, -1], temperature, top_k, top_p)
    freq = np.bincount(got, minlength=p.size) / n
    assert np.all(freq[p == 0] == 0), "a token outside top-k/top-p was drawn"
    tol = 4 * np.sqrt(p * (1 - p) / n) + 2e-3
    assert np.all(np.abs(freq - p) <= tol), np.max(np.abs(freq - p) - tol)
    again = api.generate(m, ids[:64], 3, do_sample=1, temperature=temperature, top_k=top_k, top_p=top_p, seed=11)
    np.testing.assert_array_equal(again, api.generate(m, ids[:64], 3, do_sample=1, temperature=temperature,
                                                      top_k=top_k, top_p=top_p, seed=11))
    api.L.gpucore_lm_destroy(m)


def _other_backends(L):
    """cuda and cuda-emulated when usable here (the emulated module needs GPUCORE_EMULATED_PLUGIN)."""
    found = []
    for kind, spec in ((1, "cuda"), (2, "cuda-emulated")):
        why = C.create_string_buffer(768)
        if L.gpucore_backend_available(kind, why, C.c_size_t(768)) == 0:
            found.append(spec)
    return found


@pytest.mark.parametrize("arch", F.ARCHS)
def test_other_backends_match_transformers(lib, tmp_path, arch):
    devices = _other_backends(lib)
    if not devices:
        pytest.skip("no cuda or cuda-emulated backend is usable here (set GPUCORE_EMULATED_PLUGIN for the emulated one)")
    folder, hf = F.make_model(arch, tmp_path)
    ids = np.random.default_rng(5).integers(1, hf.config.vocab_size, (2, 6))
    ref_logits = F.logits(hf, ids)
    with torch.no_grad():
        ref_gen = hf.generate(torch.tensor(ids[:, :4]), attention_mask=torch.ones((2, 4), dtype=torch.long),
                              max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0).numpy()
    out = hf(torch.tensor(ids), labels=torch.tensor(ids))
    out.loss.backward()
    ref = {n: p.grad.double().numpy() for n, p in hf.named_parameters()}
    for dev in devices:
        a = Api(lib, dev)
        m = a.load(folder)
        assert rel(a.forward(m, ids), ref_logits) < 1e-4, dev
        np.testing.assert_array_equal(a.generate(m, ids[:, :4], 8), ref_gen)
        a.ck(lib.gpucore_lm_set_full_finetune(m, 1))
        loss = a.forward_backward(m, ids)
        assert abs(loss - float(out.loss)) <= 1e-5 * abs(float(out.loss)), dev
        for name, (_, g) in a.trainables(m).items():
            want = ref[name].T if (arch == "gpt2" and ".c_" in name and ref[name].ndim == 2) else ref[name]
            assert rel(a.to_np(g), want) < 1e-4, (dev, name)
        lib.gpucore_lm_destroy(m)
        lib.gpucore_context_destroy(a.ctx)
