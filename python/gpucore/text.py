"""Text in, text out: the C library's byte-level BPE tokenizer and chat prompts (gpucore.h, "text").

    tok = gpucore.Tokenizer.from_file("SmolLM2-135M-Instruct/tokenizer.json")
    ids = tok.encode("Hello world")                  # [19556, 905], as Hugging Face's tokenizers gives
    tok.decode(ids)                                  # "Hello world"
    prompt = tok.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    gpucore.chat_template(template, messages, add_generation_prompt=True, bos_token="<s>", eos_token="</s>")

No Python tokenizer package is needed; what a file asks for and the C code does not do is refused
with NotSupportedError naming it.
"""
from __future__ import annotations

import ctypes
import os
from ctypes import byref, c_char_p, c_int64, c_void_p
from typing import Any, Dict, List, Optional, Sequence

from ._lib import C, ChatMessage, TokenizerArrays

__all__ = ["Tokenizer", "chat_template"]


def _bytes(s: Any) -> bytes:
    return os.fsencode(s) if isinstance(s, os.PathLike) else (s if isinstance(s, bytes) else str(s).encode("utf-8"))


class Tokenizer:
    """A tokenizer made by the C library: ``from_file`` (tokenizer.json, with tokenizer_config.json
    beside it when present), ``from_gguf`` (a GGUF file) or ``from_arrays`` (the arrays a GGUF file's
    tokenizer.ggml.* metadata holds)."""

    def __init__(self, handle: c_void_p) -> None:
        self._h = handle

    @classmethod
    def from_file(cls, path: Any) -> "Tokenizer":
        h = c_void_p()
        C.gpucore_tokenizer_create_from_file(_bytes(path), byref(h))
        return cls(h)

    @classmethod
    def from_gguf(cls, path: Any) -> "Tokenizer":
        """From a GGUF file's tokenizer.ggml.* metadata (and its tokenizer.chat_template)."""
        h = c_void_p()
        C.gpucore_tokenizer_create_from_gguf(_bytes(path), byref(h))
        return cls(h)

    @classmethod
    def from_arrays(cls, tokens: Sequence[str], merges: Sequence[str], pre: str,
                    token_types: Optional[Sequence[int]] = None, bos_id: int = -1, eos_id: int = -1,
                    add_bos: bool = False, add_eos: bool = False) -> "Tokenizer":
        toks = (c_char_p * len(tokens))(*[_bytes(t) for t in tokens])
        mer = (c_char_p * max(len(merges), 1))(*[_bytes(m) for m in merges])
        types = (ctypes.c_int32 * len(tokens))(*token_types) if token_types is not None else None
        a = TokenizerArrays(len(tokens), toks, types, len(merges), mer, _bytes(pre), bos_id, eos_id,
                            int(bool(add_bos)), int(bool(add_eos)))
        h = c_void_p()
        C.gpucore_tokenizer_create_from_arrays(byref(a), byref(h))
        return cls(h)

    def close(self) -> None:
        if self._h:
            C.gpucore_tokenizer_destroy(self._h)
            self._h = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]:
        """Token ids of ``text``; add_special_tokens: the file's post-processor ids (Llama-3's BOS)."""
        b = _bytes(text)
        n = c_int64()
        cap = len(b) + 8
        buf = (ctypes.c_int32 * cap)()
        C.gpucore_tokenizer_encode(self._h, b, len(b), int(bool(add_special_tokens)), buf, cap, byref(n))
        if n.value > cap:  # (an added BOS/EOS beyond one id per byte)
            cap = n.value
            buf = (ctypes.c_int32 * cap)()
            C.gpucore_tokenizer_encode(self._h, b, len(b), int(bool(add_special_tokens)), buf, cap, byref(n))
        return list(buf[:n.value])

    def decode_bytes(self, ids: Sequence[int], skip_special_tokens: bool = False) -> bytes:
        """The tokens' bytes as they are (a UTF-8 sequence may be cut at either end)."""
        arr = (ctypes.c_int32 * max(len(ids), 1))(*ids)
        n = c_int64()
        C.gpucore_tokenizer_decode(self._h, arr, len(ids), int(bool(skip_special_tokens)), None, 0, byref(n))
        buf = ctypes.create_string_buffer(n.value + 1)
        C.gpucore_tokenizer_decode(self._h, arr, len(ids), int(bool(skip_special_tokens)), buf, n.value + 1, byref(n))
        return buf.raw[:n.value]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """The text of ``ids`` (an incomplete UTF-8 sequence becomes U+FFFD, as Hugging Face does)."""
        return self.decode_bytes(ids, skip_special_tokens).decode("utf-8", "replace")

    def token_to_id(self, token: str) -> Optional[int]:
        i = C.gpucore_tokenizer_token_to_id(self._h, _bytes(token))
        return None if i < 0 else i

    def id_to_token(self, i: int) -> Optional[str]:
        t = C.gpucore_tokenizer_id_to_token(self._h, i)
        return None if t is None else t.decode("utf-8")

    @property
    def vocab_size(self) -> int:
        return C.gpucore_tokenizer_vocab_size(self._h)

    @property
    def bos_token_id(self) -> Optional[int]:
        i = C.gpucore_tokenizer_bos_id(self._h)
        return None if i < 0 else i

    @property
    def eos_token_id(self) -> Optional[int]:
        i = C.gpucore_tokenizer_eos_id(self._h)
        return None if i < 0 else i

    @property
    def chat_template(self) -> Optional[str]:
        t = C.gpucore_tokenizer_chat_template(self._h)
        return None if t is None else t.decode("utf-8")

    def apply_chat_template(self, messages: Sequence[Dict[str, str]], add_generation_prompt: bool = False) -> str:
        """The prompt the file's chat template makes of ``messages`` (rendered by the C library)."""
        if self.chat_template is None:
            raise ValueError("this tokenizer has no chat_template (no tokenizer_config.json beside tokenizer.json)")
        tok = lambda i: None if i is None else self.id_to_token(i)
        return chat_template(self.chat_template, messages, add_generation_prompt,
                             bos_token=tok(self.bos_token_id), eos_token=tok(self.eos_token_id))


def chat_template(template: str, messages: Sequence[Dict[str, str]], add_generation_prompt: bool = False,
                  bos_token: Optional[str] = None, eos_token: Optional[str] = None) -> str:
    """Render ``messages`` ([{"role": ..., "content": ...}]) with a chat template of a known family
    (ChatML, Llama-3, Mistral [INST], Zephyr); another template raises NotSupportedError."""
    keep = [(_bytes(m["role"]), _bytes(m["content"])) for m in messages]
    arr = (ChatMessage * max(len(keep), 1))(*[ChatMessage(r, c) for r, c in keep])
    args = [_bytes(template), None if bos_token is None else _bytes(bos_token),
            None if eos_token is None else _bytes(eos_token), arr, len(keep), int(bool(add_generation_prompt))]
    n = c_int64()
    C.gpucore_chat_render(*args, None, 0, byref(n))
    buf = ctypes.create_string_buffer(n.value + 1)
    C.gpucore_chat_render(*args, buf, n.value + 1, byref(n))
    return buf.raw[:n.value].decode("utf-8")
