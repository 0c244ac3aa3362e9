"""gpucore.models — published decoder language models (GPT-2, Llama, Mistral, Qwen2) from
Hugging Face folders, and token-file datasets for training them.

    m = gpucore.models.from_pretrained("path/to/folder", device="cpu")   # dtype: the file's
    logits = m(np.array([[1, 2, 3]]))                 # gpucore.Tensor [B, T, vocab]
    out = m.generate(ids, max_new_tokens=20)          # numpy int64 [B, T + new]; greedy = transformers'
    m.add_lora(r=8, lora_alpha=16, target_modules=("q_proj", "v_proj"))
    opt = gpucore.AdamW(m.trainable_parameters(), lr=1e-3)
    loss = m.forward_backward(ids, labels)            # Hugging Face's causal-LM loss (shifted inside, -100 ignored)
    opt.step(m.gradients())
    n = sum(m.count_label_tokens(i, l) for i, l in micro)   # gradient accumulation: the batch's token count,
    for k, (i, l) in enumerate(micro):                      # then its micro-batches, each normalised by it
        m.forward_backward(i, l, accumulate=k > 0, total_tokens=n)
    m.save_adapter("adapter")                         # PEFT's layout: PeftModel.from_pretrained reads it

``trainable_parameters()`` and ``gradients()`` are dicts with the same keys in the same order:
PEFT's adapter keys without ``.default`` for LoRA, the state-dict names for full fine-tuning
(``set_full_finetune(True)``); the optimizers take them directly. The math, the file checks and
the refusals are the C library's (the "language models" section of gpucore.h); this module only
converts arguments. :class:`TokenDataset` reads llm.c ``.bin`` and ``.npy`` token files ("token
data" section).
"""
from __future__ import annotations

import ctypes
import json
import os
from ctypes import byref, c_char_p, c_double, c_int64, c_void_p
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import dtypes as _dt
from ._lib import C, LmBackwardOptions, LmLoadOptions, TokenDataOptions
from ._validate import to_bool, to_float, to_int
from .checkpoint import POLICIES
from .context import Context, Stream, get_context
from .errors import InvalidArgumentError, InvalidArgumentTypeError, NotSupportedError
from .optim import _Owned
from .tensor import Tensor
from .models_plan import MemoryPlan, plan  # noqa: F401  (gpucore.models.plan)

__all__ = ["LanguageModel", "KVCache", "TokenDataset", "from_pretrained", "default_lora_targets"]

P_I64 = ctypes.POINTER(c_int64)


def default_lora_targets(model_type: str) -> Tuple[str, ...]:
    """PEFT's default target modules of an architecture (its entry in the C library's table); () for
    a model_type that is not implemented."""
    t = C.gpucore_lm_default_lora_targets(_enc(model_type, "model_type"))
    return tuple(t.decode().split(",")) if t else ()


def _host_ids(x: Any, what: str) -> np.ndarray:
    """A C-contiguous int64 [B, T] array from a numpy array, list or 1-d sequence ([T] -> [1, T])."""
    try:
        a = np.asarray(x)
    except Exception:
        raise InvalidArgumentTypeError("%s must be an integer numpy array, a list or a gpucore.Tensor" % what) from None
    if a.dtype.kind not in "iu":
        raise InvalidArgumentTypeError("%s must hold integers, not %s" % (what, a.dtype))
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2:
        raise InvalidArgumentError("%s must be [batch, seq], not of shape %s" % (what, a.shape))
    return np.ascontiguousarray(a, dtype=np.int64)


def _i64p(a: Optional[np.ndarray]) -> Any:
    return None if a is None else a.ctypes.data_as(P_I64)


def _enc(s: Any, what: str) -> bytes:
    if not isinstance(s, (str, os.PathLike)):
        raise InvalidArgumentTypeError("%s must be a path (str), not %s" % (what, type(s).__name__))
    return os.fsencode(s)


class KVCache(_Owned):
    """A key/value cache of a model for ``batch`` sequences of up to ``max_len`` positions
    (:meth:`LanguageModel.cache`). ``len(cache)`` is the number of positions held."""

    _destroy_fn = "gpucore_lm_cache_destroy"
    _what = "KV cache"
    _close_order = 4

    def __init__(self, model: "LanguageModel", batch: int, max_len: int) -> None:
        self._h: Optional[int] = None
        self._model = model
        self._init_owned(model.context)
        h = c_void_p()
        C.gpucore_lm_cache_create(model.handle, to_int(batch, "batch", 1), to_int(max_len, "max_len", 1), byref(h))
        self._h = h.value

    def __len__(self) -> int:
        return int(C.gpucore_lm_cache_length(self.handle))

    def reset(self) -> None:
        """Forget the held positions (the memory is kept)."""
        C.gpucore_lm_cache_reset(self.handle)

    def forward(self, input_ids: Any, last_only: bool = False) -> Tensor:
        """Logits of input_ids at the next positions, appending their keys and values."""
        ids = self._model._ids_tensor(input_ids, "input_ids")
        out = c_void_p()
        C.gpucore_lm_forward_cached(self._model.handle, self.handle, ids.handle, 1 if last_only else 0, byref(out))
        return Tensor._adopt(self._model.context, out.value)


class LanguageModel(_Owned):
    """A decoder language model loaded from a Hugging Face folder (see :func:`from_pretrained`)."""

    _destroy_fn = "gpucore_lm_destroy"
    _what = "language model"
    _close_order = 5

    def __init__(self, path: Any, device: Any = None, dtype: Any = None, quantize: Optional[str] = None,
                 block_size: int = 0) -> None:
        self._h: Optional[int] = None
        ctx = get_context(device)
        o = LmLoadOptions()
        C.gpucore_lm_load_options_init(byref(o))
        o.dtype = -1 if dtype is None else _dt.as_dtype(dtype).value
        if quantize is not None and quantize not in _QUANTIZE:
            raise InvalidArgumentError("quantize must be None, 'nf4', 'fp4' or 'int8', not %r" % (quantize,))
        o.quantize = -1 if quantize is None else _QUANTIZE[quantize]
        o.block_size = to_int(block_size, "block_size")
        self._init_owned(ctx)
        self.path = os.fspath(path) if isinstance(path, (str, os.PathLike)) else path
        h = c_void_p()
        C.gpucore_lm_create_ex(ctx.handle, _enc(path, "path"), byref(o), byref(h))
        self._h = h.value
        self._trainable: Optional[Tuple[Dict[str, Tensor], Dict[str, Tensor]]] = None
        text = c_char_p()
        C.gpucore_lm_config_json(self.handle, byref(text))
        self.config: Dict[str, Any] = json.loads(text.value.decode())  # as the library read it

    # ---- description ----
    @property
    def context(self) -> Context:
        return self._ctx

    @property
    def arch(self) -> str:
        """"gpt2", "llama", "mistral" or "qwen2"."""
        return C.gpucore_lm_arch_name(self.handle).decode()

    def config_int(self, key: str) -> int:
        """An integer config value by its Hugging Face name ("vocab_size", "eos_token_id"; -1: none)."""
        v = c_int64()
        C.gpucore_lm_config_int(self.handle, key.encode(), byref(v))
        return int(v.value)

    def config_float(self, key: str) -> float:
        v = c_double()
        C.gpucore_lm_config_double(self.handle, key.encode(), byref(v))
        return float(v.value)

    @property
    def vocab_size(self) -> int:
        return self.config_int("vocab_size")

    @property
    def dtype(self) -> _dt.DType:
        """The compute dtype (of activations and every dense weight)."""
        return _dt.from_value(self.config_int("dtype"))

    @property
    def quantization(self) -> Optional[str]:
        """The linear weights' quantized format ("nf4", "fp4", "int8", a GGUF file's "Q4_1+Q8_0"
        with the format of most bytes first), or None for dense weights."""
        q = C.gpucore_lm_quantization(self.handle).decode()
        return q or None

    def memory_footprint(self) -> int:
        """Bytes the base weights take on the device (quantized ones as stored; adapters not counted; a
        GGUF file's quantized head, kept beside its dense copy for decode steps, counts too)."""
        v = c_int64()
        C.gpucore_lm_weight_bytes(self.handle, byref(v))
        return int(v.value)

    def decode_bytes(self) -> int:
        """Bytes of base weights one decode step (up to 4 rows) reads: every layer's, the head once (a
        GGUF file's quantized head where it has one), not the embedding tables it reads a row of."""
        v = c_int64()
        C.gpucore_lm_decode_bytes(self.handle, byref(v))
        return int(v.value)

    def __repr__(self) -> str:
        if self._h is None:
            return "<gpucore.models.LanguageModel (closed)>"
        return "<gpucore.models.LanguageModel %s %s on %s from %r>" % (self.arch, self.dtype.name,
                                                                       self._ctx.device, self.path)

    def named_parameters(self) -> Dict[str, Tensor]:
        """Every base weight by its state-dict name (views of the model's memory; GPT-2's Conv1D
        weights are [out, in] here, the transpose of the file's; a tied head is listed once)."""
        out: Dict[str, Tensor] = {}
        name, t = c_char_p(), c_void_p()
        for i in range(int(C.gpucore_lm_parameter_count(self.handle))):
            C.gpucore_lm_parameter(self.handle, i, byref(name), byref(t))
            out[name.value.decode()] = Tensor._borrow(self._ctx, t.value)
        return out

    # ---- inference ----
    def _ids_tensor(self, x: Any, what: str) -> Tensor:
        if isinstance(x, Tensor):
            return x
        return self._ctx.tensor(_host_ids(x, what))

    def __call__(self, input_ids: Any) -> Tensor:
        """Logits [B, T, vocab] (a new gpucore.Tensor in the model's dtype) for ids [B, T]
        (an integer numpy array or list, or an i32/i64 gpucore.Tensor on the model's context)."""
        out = c_void_p()
        if isinstance(input_ids, Tensor):
            C.gpucore_lm_forward(self.handle, input_ids.handle, byref(out))
        else:
            a = _host_ids(input_ids, "input_ids")
            C.gpucore_lm_forward_host(self.handle, _i64p(a), a.shape[0], a.shape[1], byref(out))
        return Tensor._adopt(self._ctx, out.value)

    forward = __call__

    def cache(self, batch: int, max_len: int) -> KVCache:
        """A new KV cache (:class:`KVCache`) for incremental decoding."""
        return KVCache(self, batch, max_len)

    def generate(self, input_ids: Any, max_new_tokens: int = 20, do_sample: bool = False, temperature: float = 1.0,
                 top_k: int = 0, top_p: float = 1.0, seed: int = 0, eos_token_id: Optional[int] = None,
                 pad_token_id: Optional[int] = None) -> np.ndarray:
        """Prompt [B, T] then up to max_new_tokens tokens per row with a KV cache: numpy int64
        [B, T + new]. Greedy (argmax) or sampling (temperature, top_k, top_p; Philox under seed,
        the same draws on every backend). eos_token_id None uses the config's, as transformers'
        generate does (a finished row gets pad_token_id, by default the config's or eos; all rows
        finished stops early); -1 never stops."""
        a = _host_ids(input_ids.numpy() if isinstance(input_ids, Tensor) else input_ids, "input_ids")
        n = to_int(max_new_tokens, "max_new_tokens", 0)
        eos = self.config_int("eos_token_id") if eos_token_id is None else to_int(eos_token_id, "eos_token_id")
        pad = self.config_int("pad_token_id") if pad_token_id is None else to_int(pad_token_id, "pad_token_id")
        B, T = a.shape
        out = np.empty((B, T + n), dtype=np.int64)
        out_len = c_int64()
        C.gpucore_lm_generate(self.handle, _i64p(a), B, T, n, 1 if do_sample else 0, to_float(temperature, "temperature"),
                              to_int(top_k, "top_k", 0), to_float(top_p, "top_p"), to_int(seed, "seed", 0, 2**64 - 1),
                              eos, pad, _i64p(out), byref(out_len))
        L = int(out_len.value)
        return out.reshape(-1)[:B * L].reshape(B, L).copy() if L != T + n else out

    # ---- training ----
    def _invalidate(self) -> None:
        self._trainable = None

    def _trainable_dicts(self) -> Tuple[Dict[str, Tensor], Dict[str, Tensor]]:
        if self._trainable is None:
            params: Dict[str, Tensor] = {}
            grads: Dict[str, Tensor] = {}
            name, p, g = c_char_p(), c_void_p(), c_void_p()
            for i in range(int(C.gpucore_lm_trainable_count(self.handle))):
                C.gpucore_lm_trainable(self.handle, i, byref(name), byref(p), byref(g))
                key = name.value.decode()
                params[key] = Tensor._borrow(self._ctx, p.value)
                grads[key] = Tensor._borrow(self._ctx, g.value)
            self._trainable = (params, grads)
        return self._trainable

    def trainable_parameters(self) -> Dict[str, Tensor]:
        """name -> parameter tensor (a view of the model's own): the LoRA adapters (PEFT's keys
        without ".default") or, after set_full_finetune(True), every base weight (state-dict names)."""
        return dict(self._trainable_dicts()[0])

    def gradients(self) -> Dict[str, Tensor]:
        """name -> gradient tensor, the keys of trainable_parameters(); filled by forward_backward."""
        return dict(self._trainable_dicts()[1])

    def set_full_finetune(self, enable: bool = True) -> None:
        """Make every base weight trainable (refused while adapters exist) or frozen again."""
        self._invalidate()
        C.gpucore_lm_set_full_finetune(self.handle, 1 if enable else 0)

    def _ids_pair(self, input_ids: Any, labels: Any) -> Tuple[Tensor, Optional[Tensor]]:
        return (self._ids_tensor(input_ids, "input_ids"),
                None if labels is None else self._ids_tensor(labels, "labels"))

    def _loss_call(self, fn: str, input_ids: Any, labels: Any) -> float:
        loss = c_double()
        if isinstance(input_ids, Tensor) or isinstance(labels, Tensor):
            ids, lab = self._ids_pair(input_ids, labels)
            getattr(C, "gpucore_lm_" + fn)(self.handle, ids.handle, None if lab is None else lab.handle, byref(loss))
        else:
            a = _host_ids(input_ids, "input_ids")
            b = None if labels is None else _host_ids(labels, "labels")
            if b is not None and b.shape != a.shape:
                raise InvalidArgumentError("labels are %s but input_ids are %s; they must agree" % (b.shape, a.shape))
            getattr(C, "gpucore_lm_%s_host" % fn)(self.handle, _i64p(a), _i64p(b), a.shape[0], a.shape[1], byref(loss))
        return float(loss.value)

    def loss(self, input_ids: Any, labels: Any = None) -> float:
        """Hugging Face's causal-LM loss (labels shifted inside, -100 ignored; None: input_ids)."""
        return self._loss_call("loss", input_ids, labels)

    def forward_backward(self, input_ids: Any, labels: Any = None, accumulate: bool = False,
                         total_tokens: Optional[int] = None) -> float:
        """The loss, and every trainable parameter's gradient in gradients(): overwritten, or added to with
        ``accumulate=True``. ``total_tokens``: the label tokens of the whole accumulated batch
        (:meth:`count_label_tokens` summed over its micro-batches); the loss and the gradients are then this
        micro-batch's token losses summed and divided by it, so the micro-batches' losses add up to the batch's
        and their gradients to its gradients. None: the mean over this batch's own label tokens."""
        if not accumulate and total_tokens is None:
            return self._loss_call("forward_backward", input_ids, labels)
        opts = LmBackwardOptions()
        C.gpucore_lm_backward_options_init(byref(opts))
        opts.accumulate = 1 if to_bool(accumulate, "accumulate") else 0
        opts.total_label_tokens = 0 if total_tokens is None else to_int(total_tokens, "total_tokens")
        ids, lab = self._ids_pair(input_ids, labels)
        loss = c_double()
        C.gpucore_lm_forward_backward_ex(self.handle, ids.handle, None if lab is None else lab.handle, byref(opts),
                                         byref(loss))
        return float(loss.value)

    def count_label_tokens(self, input_ids: Any, labels: Any = None) -> int:
        """The label tokens the loss counts: positions 1..T-1 of labels (None: input_ids) that are not -100."""
        ids, lab = self._ids_pair(input_ids, labels)
        n = c_int64()
        C.gpucore_lm_count_label_tokens(self.handle, ids.handle, None if lab is None else lab.handle, byref(n))
        return int(n.value)

    def set_checkpoint_policy(self, policy: str, param: int = 0) -> None:
        """Recompute policy of training: "keep_all", "recompute_all", "every_k", "sqrt_n", "budget"."""
        if policy not in POLICIES:
            raise InvalidArgumentError("policy must be one of %s, not %r" % (", ".join(POLICIES), policy))
        C.gpucore_lm_set_checkpoint_policy(self.handle, POLICIES[policy], to_int(param, "param"))

    def set_head_chunk_rows(self, rows: int = 0) -> None:
        """Rows per chunk of the head and the loss in loss() and forward_backward() (the [B, T, vocab] logits
        never exist); 0: chunks of about 32 MiB of logits, at least 256 rows."""
        C.gpucore_lm_set_head_chunk_rows(self.handle, to_int(rows, "rows"))

    def set_seed(self, seed: int) -> None:
        """Philox seed of LoRA dropout."""
        C.gpucore_lm_set_seed(self.handle, to_int(seed, "seed", 0, 2**64 - 1))

    # ---- LoRA in PEFT's format ----
    def add_lora(self, r: int = 8, lora_alpha: float = 16, lora_dropout: float = 0.0,
                 target_modules: Optional[Sequence[str]] = None, seed: int = 0) -> None:
        """Adapters of rank r on the modules named (PEFT's defaults for the architecture when None:
        q_proj, v_proj; GPT-2 c_attn), scale lora_alpha / r, A kaiming-uniform from Philox(seed), B 0."""
        if target_modules is None:
            target_modules = default_lora_targets(self.arch)
        if isinstance(target_modules, str):
            target_modules = (target_modules,)
        names = [str(t).encode() for t in target_modules]
        arr = (c_char_p * max(1, len(names)))(*names)
        self._invalidate()
        C.gpucore_lm_add_lora(self.handle, to_int(r, "r", 1), to_float(lora_alpha, "lora_alpha"),
                              to_float(lora_dropout, "lora_dropout"), arr, len(names), to_int(seed, "seed", 0))

    def load_adapter(self, path: Any) -> None:
        """Load a PEFT adapter folder (adapter_config.json + adapter_model.safetensors)."""
        self._invalidate()
        C.gpucore_lm_load_adapter(self.handle, _enc(path, "path"))

    def save_adapter(self, path: Any) -> None:
        """Write the adapters as PEFT does (PeftModel.from_pretrained loads the folder)."""
        C.gpucore_lm_save_adapter(self.handle, _enc(path, "path"))

    def merge_adapter(self) -> None:
        """W += (alpha / r) B A for every adapter, then drop them (PEFT's merge_and_unload)."""
        self._invalidate()
        C.gpucore_lm_merge_adapter(self.handle)

    @property
    def lora_count(self) -> int:
        return int(C.gpucore_lm_lora_count(self.handle))

    def save_pretrained(self, path: Any) -> None:
        """Write the model as a Hugging Face folder (config.json + model.safetensors); NF4/FP4 and
        int8 linear layers in bitsandbytes' layout (4-bit / Linear8bitLt's) with transformers'
        quantization_config."""
        C.gpucore_lm_save_pretrained(self.handle, _enc(path, "path"))

    # ---- text: the C library's tokenizer (a GGUF file's metadata, a folder's tokenizer.json); a
    # tokenizer.json it does not implement through the optional `tokenizers` package ----
    @property
    def is_gguf(self) -> bool:
        """Whether the model was read from a GGUF file (else a Hugging Face folder)."""
        return isinstance(self.path, str) and os.path.isfile(self.path)

    @property
    def chat_template(self) -> Optional[str]:
        """The Jinja chat template: a GGUF file's tokenizer.chat_template, a folder's tokenizer_config.json
        chat_template; None when there is none."""
        if self.is_gguf:
            from .gguf import open_gguf
            with open_gguf(self.path) as f:
                return f.get("tokenizer.chat_template")
        try:
            with open(os.path.join(self.path, "tokenizer_config.json"), encoding="utf-8") as f:
                t = json.load(f).get("chat_template")
        except (OSError, ValueError):
            return None
        return t if isinstance(t, str) else None

    def tokenizer(self) -> Any:
        """The model's tokenizer made by the C library (gpucore.Tokenizer): from a GGUF file's metadata, or from
        the folder's tokenizer.json (with tokenizer_config.json beside it). A tokenizer.json that the C library
        refuses (WordPiece, Unigram, WordLevel, ...) is read by the `tokenizers` package where it is installed."""
        from .text import Tokenizer
        if self.is_gguf:
            return Tokenizer.from_gguf(self.path)
        p = os.path.join(self.path, "tokenizer.json")
        if not os.path.exists(p):
            raise NotSupportedError("%s has no tokenizer.json; pass token ids instead" % self.path)
        try:
            return Tokenizer.from_file(p)
        except NotSupportedError as e:
            try:
                import tokenizers
            except ImportError:
                raise e from None
            return tokenizers.Tokenizer.from_file(p)

    def generate_text(self, prompt: str, max_new_tokens: int = 20, **kw: Any) -> str:
        """generate() on the encoded prompt; returns the decoded prompt and continuation."""
        tok = self.tokenizer()
        out = self.generate(np.array([_encode(tok, prompt, True)], dtype=np.int64), max_new_tokens=max_new_tokens, **kw)
        return tok.decode(out[0].tolist())

    def chat_prompt(self, messages: Sequence[Dict[str, str]], tokenizer: Any = None) -> str:
        """``messages`` ([{"role": ..., "content": ...}]) rendered by the C library with the model's chat template
        (its BOS and EOS tokens named by the tokenizer), the assistant's turn open."""
        from .text import chat_template
        tpl = self.chat_template
        if tpl is None:
            raise NotSupportedError("%s has no chat template (a GGUF file's tokenizer.chat_template or a folder's "
                                    "tokenizer_config.json); use generate_text" % self.path)
        tok = tokenizer if tokenizer is not None else self.tokenizer()
        name = lambda key: None if self.config_int(key) < 0 else tok.id_to_token(self.config_int(key))
        return chat_template(tpl, messages, add_generation_prompt=True, bos_token=name("bos_token_id"),
                             eos_token=name("eos_token_id"))

    def chat(self, messages: Sequence[Dict[str, str]], max_new_tokens: int = 128, **kw: Any) -> str:
        """The assistant's answer to ``messages``: chat_prompt() encoded (its special tokens are in the text, so none
        is added), generate() on it (up to the model's EOS unless eos_token_id says otherwise; greedy unless
        do_sample=True), the new tokens decoded without special tokens."""
        tok = self.tokenizer()
        ids = _encode(tok, self.chat_prompt(messages, tok), False)
        out = self.generate(np.array([ids], dtype=np.int64), max_new_tokens=max_new_tokens, **kw)
        return tok.decode(out[0, len(ids):].tolist(), skip_special_tokens=True)


def _encode(tok: Any, text: str, add_special_tokens: bool) -> List[int]:
    """Token ids of text by a gpucore.Tokenizer or a `tokenizers` package Tokenizer."""
    ids = tok.encode(text, add_special_tokens=add_special_tokens)
    return list(ids.ids if hasattr(ids, "ids") else ids)


_QUANTIZE = {"nf4": 0, "fp4": 1, "int8": 2}  # gpucore_quant_format


def from_pretrained(path: Any, device: Any = None, dtype: Any = None, quantize: Optional[str] = None,
                    block_size: int = 0) -> LanguageModel:
    """Load the Hugging Face folder `path` (config.json + model.safetensors, or an index and its
    shards) onto `device` (a Context or a string; None: the default context), keeping the file's
    dtype unless `dtype` (float32, bfloat16, float16) asks for another.

    `quantize` ("nf4", "fp4" or "int8"; bitsandbytes' formats, NF4/FP4 in blocks of `block_size`,
    0 for 64) quantizes every linear layer's weight while loading, one tensor at a time; `dtype`
    is then the compute dtype (default bfloat16), the base is frozen and LoRA adapters train on
    it (QLoRA). `path` may instead be a GGUF file of llama.cpp (llama, qwen2, gpt2): config from
    its metadata, the linear layers' quantized blocks kept as they are, other weights decoded to
    `dtype` (default: the file's float type, float32 when the embedding is quantized). A folder
    transformers saved with bitsandbytes (quantization_config) keeps its NF4/FP4 weights (a
    double-quantized absmax rebuilt as bitsandbytes does) or its int8 weights and SCB, computed in
    `dtype` or its bnb_4bit_compute_dtype."""
    return LanguageModel(path, device=device, dtype=dtype, quantize=quantize, block_size=block_size)


_LAYOUTS = {"shifted": 0, "window": 1}


class TokenDataset(_Owned):
    """Batches of token windows from llm.c ``.bin`` and ``.npy`` token files (memory-mapped),
    shuffled by a seeded permutation per epoch, sharded by (rank, world_size), copied to the
    device one batch ahead. ``next()`` (or iteration, which never ends) gives (input_ids,
    labels) as gpucore.Tensor: [B, T] each with labels the next tokens (layout "shifted"), or
    both the whole [B, T + 1] windows (layout "window", for the models' loss that shifts inside).
    ``position`` / ``seek()`` resume exactly."""

    _destroy_fn = "gpucore_token_data_close"
    _what = "token dataset"
    _close_order = 4

    def __init__(self, paths: Union[str, Sequence[str]], batch_size: int, seq_len: int, seed: int = 0,
                 shuffle: bool = True, dtype: Any = "int64", rank: int = 0, world_size: int = 1,
                 vocab_size: int = 0, layout: str = "shifted", device: Any = None) -> None:
        self._h: Optional[int] = None
        ctx = get_context(device)
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        enc = [_enc(p, "paths[%d]" % i) for i, p in enumerate(paths)]
        if layout not in _LAYOUTS:
            raise InvalidArgumentError("layout must be 'shifted' or 'window', not %r" % (layout,))
        o = TokenDataOptions()
        o.struct_size = ctypes.sizeof(TokenDataOptions)
        C.gpucore_token_data_options_default(byref(o))
        o.batch_size = to_int(batch_size, "batch_size")
        o.seq_len = to_int(seq_len, "seq_len")
        o.seed = to_int(seed, "seed", 0, 2**64 - 1)
        o.shuffle = 1 if shuffle else 0
        o.dtype = _dt.as_dtype(dtype).value
        o.rank = to_int(rank, "rank", -2**31, 2**31 - 1)
        o.world_size = to_int(world_size, "world_size", -2**31, 2**31 - 1)
        o.vocab_size = to_int(vocab_size, "vocab_size")
        o.layout = _LAYOUTS[layout]
        self._init_owned(ctx)
        arr = (c_char_p * max(1, len(enc)))(*enc)
        h = c_void_p()
        C.gpucore_token_data_open(ctx.handle, arr, len(enc), byref(o), byref(h))
        self._h = h.value
        self.batch_size, self.seq_len = int(o.batch_size), int(o.seq_len)
        self.epoch = self.step = -1
        t, w, b = c_int64(), c_int64(), c_int64()
        C.gpucore_token_data_sizes(self._h, byref(t), byref(w), byref(b))
        self.tokens, self.windows, self.batches_per_epoch = int(t.value), int(w.value), int(b.value)

    def next(self, stream: Optional[Stream] = None) -> Tuple[Tensor, Tensor]:
        """The next (input_ids, labels); sets .epoch and .step to the batch's."""
        ids, lab, e, s = c_void_p(), c_void_p(), c_int64(), c_int64()
        C.gpucore_token_data_next(self.handle, self._ctx._stream_arg(stream), byref(ids), byref(lab), byref(e),
                                  byref(s))
        self.epoch, self.step = int(e.value), int(s.value)
        return Tensor._adopt(self._ctx, ids.value), Tensor._adopt(self._ctx, lab.value)

    def __iter__(self) -> Iterator[Tuple[Tensor, Tensor]]:
        return self

    def __next__(self) -> Tuple[Tensor, Tensor]:
        return self.next()

    def __len__(self) -> int:
        return self.batches_per_epoch

    @property
    def position(self) -> int:
        """Index (over all epochs) of the batch next() returns."""
        v = c_int64()
        C.gpucore_token_data_position(self.handle, byref(v))
        return int(v.value)

    def seek(self, batch_index: int) -> None:
        C.gpucore_token_data_seek(self.handle, to_int(batch_index, "batch_index", 0))

    def batch_windows(self, batch_index: int) -> np.ndarray:
        """The window numbers (rows) of this rank's batch batch_index."""
        out = np.empty(self.batch_size, dtype=np.int64)
        C.gpucore_token_data_batch_windows(self.handle, to_int(batch_index, "batch_index", 0), _i64p(out))
        return out
