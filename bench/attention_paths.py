#!/usr/bin/env python3
"""attention_paths.py — bench_attention's figures per path beside PyTorch's scaled_dot_product_attention on the
same device: runs `bench_attention --json ARGS` (f16/bf16 on a GPU: each case on the library's choice, cuDNN where it
takes the problem, and on the hand-written kernel alone, each figure labelled with the path that ran it) and
`peers/torch_attention.py --json ARGS`, then prints one line per case and metric (fwd, bwd, fwd+bwd in TFLOP/s):

    b4 h16 s1024 d64 causal bf16  fwd      cudnn 310.2  kernel 61.5  torch sdpa 402.7  (ours/torch 0.77)

The ratio is the faster of our paths over PyTorch. Exits 1 when bench_attention fails; PyTorch missing (or without
the device) leaves its column empty.

    attention_paths.py BENCH_ATTENTION [--python PY] ARGS...   (ARGS: bench_attention's, e.g. --device cuda
                                                                --dtype bf16 --seqs 1024,2048)
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def json_lines(argv):
    """The JSON objects a program prints, and its exit status (127 when it cannot start)."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True)
    except OSError as e:
        print(f"attention_paths: {argv[0]}: {e}", file=sys.stderr)
        return [], 127
    sys.stderr.write(p.stderr)
    rows = []
    for line in p.stdout.splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows, p.returncode


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip().splitlines()[-3], file=sys.stderr)
        return 2
    exe, args = sys.argv[1], sys.argv[2:]
    py = sys.executable
    if args[:1] == ["--python"]:
        py, args = args[1], args[2:]
    ours, rc = json_lines([exe, "--json"] + args)
    if rc != 0 or not ours:
        print(f"FAIL bench_attention exited {rc} with {len(ours)} figures")
        return 1
    peer, _ = json_lines([py, os.path.join(HERE, "peers", "torch_attention.py"), "--json"] + args)
    torch = {(r["case"], r["metric"]): r["value"] for r in peer}
    table = {}  # (case, metric) -> [(path, value)]
    for r in ours:
        if r.get("unit") != "TFLOP/s":
            continue
        case = r["case"][: -len(" kernel")] if r["case"].endswith(" kernel") else r["case"]
        table.setdefault((case, r["metric"]), []).append((r.get("path", "?"), r["value"]))
    for (case, metric), paths in table.items():
        cells = "  ".join(f"{p} {v:.4g}" for p, v in paths)
        t = torch.get((case, metric))
        ratio = f"  (ours/torch {max(v for _, v in paths) / t:.3g})" if t else ""
        print(f"  {case:<34} {metric:<8} {cells}  torch sdpa {t:.4g}{ratio}" if t else
              f"  {case:<34} {metric:<8} {cells}  torch sdpa -")
    print(f"attention paths: {len(table)} figures, {sum(1 for k in table if k in torch)} with PyTorch beside them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
