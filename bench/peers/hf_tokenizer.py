#!/usr/bin/env python3
"""Peer of bench_tokenizer: Hugging Face's `tokenizers` (Tokenizer.encode, one call, one thread) on the
SAME vocabulary and corpus: SmolLM2-135M-Instruct's tokenizer.json as its GGUF file's metadata makes it
(python/tests/tokenizer_files.py, style "smollm", the pre-tokenizer of SmolLM2's own file), README.md, a
newline and docs/DESIGN.md repeated whole to 1 MiB (--quick, default), 4 MiB (--mid) or 16 MiB (--full).
Rows: throughput (MB/s, 10^6 bytes, best of 5 after one warm-up) and the id count, with the case names of
bench_tokenizer so gpucore-bench joins them.

  hf_tokenizer.py [--json] [--quick|--mid|--full]

Prints nothing and exits 0 when tokenizers, gguf or the GGUF file is absent.
"""
import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python", "tests"))


def main():
    args = sys.argv[1:]
    target = 16 << 20 if "--full" in args else 4 << 20 if "--mid" in args else 1 << 20
    try:
        import tokenizers
        from gguf_files import smollm2_path
        from tokenizer_files import build_tokenizer_json, read_vocab
        import gguf  # noqa: F401
    except ImportError:
        return 0
    path = os.environ.get("GPUCORE_BENCH_GGUF") or smollm2_path()
    if not path or not os.path.exists(path):
        return 0
    with tempfile.TemporaryDirectory() as d:
        build_tokenizer_json("smollm", read_vocab(path), os.path.join(d, "tokenizer.json"), extra_added=False)
        tok = tokenizers.Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(ROOT, "README.md"), "rb") as f:
        a = f.read()
    with open(os.path.join(ROOT, "docs", "DESIGN.md"), "rb") as f:
        b = f.read()
    unit = a + b"\n" + b
    data = unit * ((target + len(unit) - 1) // len(unit))
    text = data.decode("utf-8")
    best, count = 1e30, 0
    for run in range(6):
        t0 = time.perf_counter()
        count = len(tok.encode(text, add_special_tokens=False).ids)
        if run:
            best = min(best, time.perf_counter() - t0)
    name = "encode SmolLM2 README+DESIGN %.1f MB" % (len(data) / 1e6)
    peer = "tokenizers %s" % tokenizers.__version__
    rows = [("throughput", len(data) / 1e6 / best, "MB/s"), ("ids", count, "count")]
    for metric, value, unit_name in rows:
        if "--json" in args:
            print(json.dumps({"bench": "tokenizer", "case": name, "device": "cpu", "metric": metric,
                              "value": value, "unit": unit_name, "peer": peer}))
        else:
            print("%-44s %-10s %12.2f %s (%s)" % (name, metric, value, unit_name, peer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
