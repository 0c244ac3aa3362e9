#!/usr/bin/env python3
"""check_tree.py — the house rules that a reader of docs/DESIGN.md relies on, measured from the code.

1. Layers: every `#include "..."` in src/, kernels/ and include/ is resolved to the folder it names, and
   the edge (from folder -> to folder) must be one the table LAYERS allows. The table is the map that
   docs/DESIGN.md prints (`--table` writes it as Markdown); an edge the table does not allow fails.
   Edges the design wants cut but the code still has are listed in KNOWN_TIES with the reason, so the
   map is honest about them and a new tie of any other kind fails.
2. Paths: every path in the tree's comments and docs that starts with src/, tests/, kernels/, bench/,
   scripts/, docs/, python/, tools/, fuzz/, examples/ or include/ must exist (a file or a folder, or a
   glob that matches something), so moved files leave no stale pointers.

3. The public header's opening comment lists its sections in order (`--toc` prints the list).
4. docs/DESIGN.md holds the table of 1 exactly as `--table` prints it (the written map is the checked one).

usage: scripts/check_tree.py [--table | --toc]     exit 0 when both checks pass, 1 otherwise (one line per fault)
"""
import glob
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# folder -> (what it holds, the folders it may include). A folder may always include itself and
# include/ (the public header) and kernels/ headers that hold shared per-element math and argument
# structs (they include nothing of src/). An entry naming a file allows that one header of its folder.
LAYERS = {
    "src/tools": ("the command-line tools (gpucore-info, gpucore-lm): public API only", []),
    "src/models": ("decoder language models: config, weights, layers, KV cache, generation, LoRA/PEFT, "
                   "training step, its memory plan (on a caching allocator of its own); built on the public API and the "
                   "layers below", ["src/core", "src/io", "src/ops", "src/train", "src/alloc/caching_allocator.h"]),
    "src/text": ("the byte-level BPE tokenizer (tokenizer.json, GGUF metadata) and chat prompts", ["src/core", "src/io"]),
    "src/io": ("safetensors, GGUF and token data files: readers and writers", ["src/core", "src/ops"]),
    "src/train": ("optimizers, loss scaler, clipping, checkpoint executor, ZeRO, training-state checkpoints",
                  ["src/core", "src/ops", "src/comm"]),
    "src/comm": ("communicators, comm groups, DDP reducer: validation, sequence numbers and waits over the "
                 "vtable's collectives", ["src/core", "src/alloc", "src/backend"]),
    "src/ops": ("argument validation and dispatch per op family (no CUDA types)", ["src/core"]),
    "src/core": ("context, stream, event, tensor, copy, memory, errors, log, profiler; calls the backend vtable",
                 ["src/alloc", "src/backend"]),
    "src/alloc": ("the caching allocator over the backends' raw alloc/free", ["src/core/base.h", "src/backend"]),
    "src/backend": ("the backend vtable, the registry, the module loader (CUDA and MPI modules), kernel-op glue, "
                    "the collectives' names", ["src/core"]),
    "src/backend/cpu": ("the CPU backend (OpenMP, OpenBLAS/oneDNN, SLEEF, stream threads)",
                        ["src/core", "src/backend"]),
    "src/backend/cuda": ("the CUDA backend module (cudart, cuBLASLt, cuDNN graphs, NCCL, NVML)",
                         ["src/core", "src/backend"]),
    "src/backend/mpi": ("the MPI module (libgpucore_mpi.so): the CPU backend's collectives, the only code "
                        "compiled against mpi.h", ["src/backend"]),
    "kernels": ("hand-written CUDA kernels and the per-element math / argument headers shared with C", []),
    "include": ("gpucore.h, the one public header and its manual", []),
}
ALWAYS = {"include", "kernels"}

# Edges the code has that run upward (against a downward edge between the same two folders), kept
# visible until they are cut. core sits above the backend vtable it calls (core -> backend is the rule).
KNOWN_TIES = {
    ("src/backend", "src/core"): "backends read core's handle layouts (tensor, stream, context) in core/internal.h",
    ("src/backend/cpu", "src/core"): "as above",
    ("src/backend/cuda", "src/core"): "as above",
}


def folder_of(path):
    parts = path.split("/")
    if parts[0] == "src" and len(parts) > 2:
        if parts[1] == "backend" and len(parts) > 3:
            return "/".join(parts[:3])
        return "/".join(parts[:2])
    return parts[0]


def tracked(*pathspecs):
    """The tree's files (git's view: tracked and not ignored); outside a git checkout, a walk of the
    source folders."""
    try:
        out = subprocess.check_output(["git", "-C", ROOT, "ls-files", "--cached", "--others",
                                       "--exclude-standard", *pathspecs], text=True,
                                      stderr=subprocess.DEVNULL)
        return [p for p in out.split() if os.path.exists(os.path.join(ROOT, p))]
    except (OSError, subprocess.CalledProcessError):
        found = []
        for top in ("src", "kernels", "include", "tests", "bench", "scripts", "docs", "python", "tools",
                    "fuzz", "examples", "."):
            for dirpath, dirs, names in os.walk(os.path.join(ROOT, top)):
                rel = os.path.relpath(dirpath, ROOT)
                if top == ".":
                    dirs[:] = []
                for n in names:
                    p = os.path.normpath(os.path.join(rel, n))
                    if any(p == s or p.startswith(s + "/") or glob.fnmatch.fnmatch(os.path.basename(p), s)
                           for s in pathspecs):
                        found.append(p)
        return sorted(set(found))


def include_edges():
    """(from_folder, to_folder, file, included path, the file it resolved to) for each include that
    crosses folders."""
    edges = []
    search = ["src", "include", "kernels"]
    for f in tracked("src", "kernels", "include"):
        if not re.search(r"\.(c|h|cu|cuh|cpp|hpp)$", f):
            continue
        here = os.path.dirname(f)
        with open(os.path.join(ROOT, f), errors="replace") as fh:
            for line in fh:
                m = re.match(r'\s*#\s*include\s*"([^"]+)"', line)
                if not m:
                    continue
                inc = m.group(1)
                target = None
                for base in [here] + search:
                    cand = os.path.normpath(os.path.join(base, inc))
                    if os.path.exists(os.path.join(ROOT, cand)):
                        target = cand
                        break
                if target is None:  # generated (gpucore_config.h) or a system header
                    continue
                a, b = folder_of(f), folder_of(target)
                if a != b:
                    edges.append((a, b, f, inc, target))
    return edges


def check_layers():
    faults = []
    for a, b, f, inc, target in include_edges():
        if b in ALWAYS:
            continue
        if a not in LAYERS:
            faults.append(f"{f}: folder {a} is not in scripts/check_tree.py's LAYERS table (add it, and to docs/DESIGN.md)")
            continue
        if b not in LAYERS[a][1] and target not in LAYERS[a][1]:
            faults.append(f"{f}: includes \"{inc}\" ({b}), which {a} may not include")
    return faults


PATH_RE = re.compile(r"(?<![\w./$-])((?:src|tests|kernels|bench|scripts|docs|python|tools|fuzz|examples|include)"
                     r"/[A-Za-z0-9_.*/-]*[A-Za-z0-9_*/])")


def check_paths():
    faults = []
    files = tracked("*.c", "*.h", "*.cu", "*.cuh", "*.md", "*.py", "*.sh", "*.txt", "*meson.build")
    for f in files:
        if f.startswith(("bench/results/", "fuzz/corpus/")):
            continue  # records of past runs keep the paths of their day
        with open(os.path.join(ROOT, f), errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                for m in PATH_RE.finditer(line):
                    p = m.group(1).rstrip("/.")
                    if line[m.end():m.end() + 1] in ("<", "{", "$"):
                        continue  # a pattern: tests/test_<topic>.c
                    if any(ch in p for ch in "<>{}$") or p.endswith(".so") or p.startswith("include/cudnn_frontend"):
                        continue  # a placeholder, a build output, or cudnn-frontend's own tree
                    full = os.path.join(ROOT, p)
                    if "*" in p:
                        if glob.glob(full):
                            continue
                    elif os.path.exists(full) or os.path.exists(full + ".c"):
                        continue  # a file, a folder, or a program named after its source
                    # a path relative to the file's own folder (tests/simt/... cited inside tests/) counts too
                    if os.path.exists(os.path.join(ROOT, os.path.dirname(f), p)):
                        continue
                    faults.append(f"{f}:{n}: cites {p}, which does not exist")
    return faults


HEADER = "include/gpucore.h"
SECTION_RE = re.compile(r"^/\* -{8,} *(.+?)(?: -+)? *(?:\*/)?$")


def header_sections():
    with open(os.path.join(ROOT, HEADER)) as fh:
        return [m.group(1).strip() for m in map(SECTION_RE.match, fh) if m]


def header_toc():
    """The table of contents the header's opening comment must carry: its sections in order."""
    return [" *   " + name for name in header_sections()]


def check_header_toc():
    with open(os.path.join(ROOT, HEADER)) as fh:
        text = fh.read().splitlines()
    try:
        start = text.index(" * Contents (the sections below, in order; scripts/check_tree.py --toc prints this list)")
    except ValueError:
        return [f"{HEADER}: the opening comment has no 'Contents' list (scripts/check_tree.py --toc prints it)"]
    have = []
    for line in text[start + 1:]:
        if not line.startswith(" *   "):
            break
        have.append(line)
    want = header_toc()
    if have != want:
        return [f"{HEADER}: the Contents list differs from the sections (scripts/check_tree.py --toc prints the right one)"]
    return []


def table():
    rows = ["| folder | holds | may include (besides itself, include/ and kernels/) |", "|---|---|---|"]
    for k, (what, may) in LAYERS.items():
        rows.append(f"| `{k}` | {what} | {', '.join('`' + m + '`' for m in may) or '—'} |")
    rows += ["", "Edges that run upward today (each allowed above, to be cut; core sits above the backend vtable):", ""]
    rows += [f"- `{a}` → `{b}`: {why}" for (a, b), why in KNOWN_TIES.items()]
    return "\n".join(rows)


def check_design_table():
    path = os.path.join(ROOT, "docs", "DESIGN.md")
    with open(path, encoding="utf-8") as f:
        if table() in f.read():
            return []
    return ["docs/DESIGN.md: its layer table differs from the one check_tree.py enforces "
            "(paste scripts/check_tree.py --table in its place)"]


def main():
    if "--table" in sys.argv[1:]:
        print(table())
        return 0
    if "--toc" in sys.argv[1:]:
        print("\n".join(header_toc()))
        return 0
    for (a, b) in KNOWN_TIES:
        assert b in LAYERS[a][1], (a, b)
    faults = check_layers() + check_paths() + check_header_toc() + check_design_table()
    for line in faults:
        print(line)
    print(f"check_tree: {len(faults)} fault(s)")
    return 1 if faults else 0


if __name__ == "__main__":
    sys.exit(main())
