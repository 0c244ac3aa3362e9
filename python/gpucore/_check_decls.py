"""Which C functions of include/gpucore.h the binding does not declare yet.

    python3 -m gpucore._check_decls [path/to/gpucore.h]

Prints, per header section (the ``/* ---- name */`` banners), the ``GPUCORE_API``
functions missing from ``gpucore._lib.DECLARATIONS``, and exits 1 when a section the
binding covers (``COVERED_SECTIONS``) has one. Sections added later (memory, ops,
matmul, ...) are listed but do not fail until they are added to COVERED_SECTIONS —
do that in the change that binds them.
"""
from __future__ import annotations

import os
import re
import sys
from typing import Dict, List, Optional, Tuple

COVERED_SECTIONS = ("version", "status codes", "logging", "devices", "context", "streams", "tensors",
                    "copies", "fill and random", "elementwise ops", "reductions",
                    "row ops: softmax, norms, cross-entropy, embedding", "memory: the caching allocator",
                    "profiling", "streams: priorities and pool", "matmul", "linear", "convolution",
                    "training primitives", "safetensors", "GGUF", "collective communication",
                    "data-parallel gradient reducer", "gradient checkpointing", "hooks ----",
                    "attention and transformer ops", "token data", "language models (src/models)",
                    "inference ----", "training ----", "LoRA in PEFT's format ----",
                    "text: tokenizer and chat prompts (src/text)", "chat prompts ----")

_BANNER = re.compile(r"^/\*\s*-{4,}\s*(.*?)\s*(?:\*/)?\s*$")
_API_FN = re.compile(r"GPUCORE_API\s+[^;(]*?\b(gpucore_\w+)\s*\(", re.S)


def find_header() -> Optional[str]:
    """include/gpucore.h of the source tree this package sits in, or $GPUCORE_HEADER."""
    env = os.environ.get("GPUCORE_HEADER")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    cand = os.path.normpath(os.path.join(here, "..", "..", "include", "gpucore.h"))
    return cand if os.path.exists(cand) else None


def header_functions(path: str) -> List[Tuple[str, str]]:
    """(section, function name) for every GPUCORE_API function, in header order."""
    section = "preamble"
    out: List[Tuple[str, str]] = []
    buf = ""
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = _BANNER.match(line.strip())
            if m:
                section = m.group(1).strip() or section
                continue
            buf += line
            if ";" in line or "{" in line:
                for fm in _API_FN.finditer(buf):
                    out.append((section, fm.group(1)))
                buf = ""
    return out


def undeclared(path: str) -> Dict[str, List[str]]:
    """Section -> functions in the header that DECLARATIONS lacks."""
    from ._lib import DECLARATIONS
    missing: Dict[str, List[str]] = {}
    for section, name in header_functions(path):
        if name not in DECLARATIONS:
            missing.setdefault(section, []).append(name)
    return missing


def main(argv: List[str]) -> int:
    path = argv[1] if len(argv) > 1 else find_header()
    if not path:
        print("gpucore.h not found; pass its path or set GPUCORE_HEADER", file=sys.stderr)
        return 2
    missing = undeclared(path)
    bad = 0
    for section, names in missing.items():
        covered = section in COVERED_SECTIONS
        bad += len(names) if covered else 0
        print("%s section '%s': %s" % ("MISSING in covered" if covered else "not yet bound:", section,
                                       ", ".join(names)))
    if not missing:
        print("every GPUCORE_API function of %s is declared" % path)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
