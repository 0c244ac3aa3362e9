#!/usr/bin/env python3
"""gpucore-bench — run every libgpucore benchmark program and its peers, in one report.

Each benchmark program (bench_alloc, bench_ops, bench_matmul, ...) prints JSON lines with
--json (DESIGN.md's output contract):
  {"bench", "case", "device", "metric", "value", "unit"[, "peer", "peer_value", "speedup"]}
Peer scripts (bench/peers/*.py: numpy on a CPU machine, PyTorch on a GPU machine) print the same
lines; when a peer script times the same (bench, case, metric) as a program, the driver puts the
two side by side and computes the ratio (speedup > 1: libgpucore is ahead; for time-like units the
ratio is peer/ours, for rate-like units ours/peer).

  gpucore-bench [--quick | --full] [--only NAME[,NAME]] [--device cpu|cuda|...] [--json]
                [--out FILE.jsonl] [--report DIR]

--quick (the default) stays under about 2 minutes on a 2-core CPU. --report writes report.md and
one SVG bar chart of ratios per benchmark (drawn directly as SVG: no plotting package needed).
Progress goes to stderr; the table (or JSON lines) to stdout.
"""
import argparse
import html
import json
import os
import shutil
import subprocess
import sys
import time

# Where this driver sits decides where the programs are: a build folder copied to another machine
# (a GPU run carries it) still finds its programs, gpucore-info and the sources beside it. The
# sources are where they were relative to the build, else the build folder's parent.
BENCH_DIR = os.path.dirname(os.path.realpath(__file__))
BUILD_ROOT = os.path.dirname(BENCH_DIR)
SOURCE_DIR = next((d for d in (os.path.normpath(os.path.join(BENCH_DIR, "@SOURCE_REL@")), os.path.dirname(BUILD_ROOT))
                   if os.path.isdir(os.path.join(d, "bench", "peers"))), os.path.dirname(BUILD_ROOT))

# (name, argv prefix) — programs run in this order; comm runs under mpirun with 2 ranks.
PROGRAMS = ["bench_alloc", "bench_ops", "bench_matmul", "bench_conv", "bench_optim", "bench_checkpoint", "bench_comm"]
# Also runnable by name with --only (not in the default run: they need a GPU to say much, or minutes).
EXTRA_PROGRAMS = ["bench_attention", "bench_lm"]
TIME_UNITS = {"ns", "us", "ms", "s"}


def progress(msg):
    print(f"[gpucore-bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_lines(argv, env, timeout):
    """Run a program, return the JSON objects it printed (non-JSON lines are ignored)."""
    try:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        progress(f"  {os.path.basename(argv[0])}: timed out after {timeout} s")
        return [], f"timed out after {timeout} s"
    except OSError as e:
        return [], str(e)
    rows = []
    for line in proc.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    err = None if proc.returncode == 0 else f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}"
    return rows, err


def environment_facts(device):
    """Device, driver, library versions and commit, from gpucore-info and git."""
    facts = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    info = os.path.join(BUILD_ROOT, "src", "tools", "gpucore-info")
    try:
        out = subprocess.run([info, "--json", "--device", device], capture_output=True, text=True, timeout=60).stdout
        facts["info"] = json.loads(out)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        facts["info"] = {}
    try:
        facts["commit"] = subprocess.run(["git", "-C", SOURCE_DIR, "rev-parse", "--short", "HEAD"],
                                         capture_output=True, text=True, timeout=10).stdout.strip() or "unknown"
    except OSError:
        facts["commit"] = "unknown"
    return facts


def ratio(ours, peer, unit):
    if not ours or not peer:
        return None
    return peer / ours if unit in TIME_UNITS else ours / peer


def join_peers(rows):
    """Attach peer-script figures to the matching program rows (same bench, case, metric)."""
    ours = [r for r in rows if not r.get("_peer_script")]
    peers = [r for r in rows if r.get("_peer_script")]
    index = {(r.get("bench"), r.get("case"), r.get("metric")): r for r in ours}
    extra = []
    for p in peers:
        key = (p.get("bench"), p.get("case"), p.get("metric"))
        mine = index.get(key)
        if mine is not None and "peer_value" not in mine:
            mine["peer"] = p.get("peer") or p.get("device") or "peer"
            mine["peer_value"] = p.get("value")
            mine["speedup"] = ratio(mine.get("value"), p.get("value"), mine.get("unit"))
        else:
            extra.append({k: v for k, v in p.items() if k != "_peer_script"})
    return ours + extra


def fmt(v):
    if v is None:
        return "-"
    if isinstance(v, float):
        if v == 0 or 0.01 <= abs(v) < 1e6:
            return f"{v:.3g}" if abs(v) < 100 else f"{v:.1f}"
        return f"{v:.3e}"
    return str(v)


def print_table(rows, out=sys.stdout):
    head = ["bench", "case", "device", "metric", "ours", "unit", "peer", "peer value", "ratio"]
    body = [[r.get("bench", ""), r.get("case", ""), r.get("device", ""), r.get("metric", ""), fmt(r.get("value")),
             r.get("unit", ""), r.get("peer", "-"), fmt(r.get("peer_value")), fmt(r.get("speedup"))] for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)] if body else [len(h) for h in head]
    line = "  ".join(h.ljust(w) for h, w in zip(head, widths))
    print(line, file=out)
    print("-" * len(line), file=out)
    for b in body:
        print("  ".join(str(x).ljust(w) for x, w in zip(b, widths)), file=out)


def svg_chart(title, rows):
    """A horizontal bar chart of ratios (1.0 marked), as an SVG string."""
    rows = [r for r in rows if isinstance(r.get("speedup"), (int, float))]
    if not rows:
        return None
    bar_h, left, width = 18, 330, 420
    height = 40 + bar_h * len(rows) + 30
    top = max(max(r["speedup"] for r in rows), 1.0) * 1.1
    x_of = lambda v: left + width * v / top
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 60}" height="{height}" '
             f'font-family="sans-serif" font-size="11">',
             f'<text x="10" y="20" font-size="14">{html.escape(title)} (ratio vs peer; &gt; 1 means libgpucore ahead)</text>']
    for i, r in enumerate(rows):
        y = 35 + i * bar_h
        label = html.escape(f'{r.get("case", "")} [{r.get("metric", "")}]')[:60]
        color = "#3a7" if r["speedup"] >= 1 else "#c54"
        parts.append(f'<text x="{left - 6}" y="{y + 12}" text-anchor="end">{label}</text>')
        parts.append(f'<rect x="{left}" y="{y + 2}" width="{max(1, x_of(r["speedup"]) - left):.1f}" height="{bar_h - 5}" fill="{color}"/>')
        parts.append(f'<text x="{x_of(r["speedup"]) + 4:.1f}" y="{y + 12}">{r["speedup"]:.2f}</text>')
    x1 = x_of(1.0)
    parts.append(f'<line x1="{x1:.1f}" y1="30" x2="{x1:.1f}" y2="{height - 20}" stroke="#333" stroke-dasharray="4,3"/>')
    parts.append(f'<text x="{x1:.1f}" y="{height - 6}" text-anchor="middle">1.0</text></svg>')
    return "\n".join(parts)


def write_report(directory, rows, facts, errors):
    os.makedirs(directory, exist_ok=True)
    info = facts.get("info", {})
    lines = ["# libgpucore benchmark report", "",
             f"- date: {facts.get('date')}", f"- commit: {facts.get('commit')}",
             f"- library: {info.get('library', {}).get('build', '?')}",
             f"- selected device: {info.get('selected', {}).get('device', '?')}",
             f"- CUDA: {info.get('cuda', {}).get('status', '?')}",
             f"- devices: {json.dumps(info.get('devices', {}))}", ""]
    if errors:
        lines += ["## Programs that did not complete", ""] + [f"- {k}: {v}" for k, v in errors.items()] + [""]
    for bench in sorted({r.get("bench", "?") for r in rows}):
        sub = [r for r in rows if r.get("bench") == bench]
        lines += [f"## {bench}", "", "| case | device | metric | ours | unit | peer | peer value | ratio |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in sub:
            lines.append(f"| {r.get('case', '')} | {r.get('device', '')} | {r.get('metric', '')} | {fmt(r.get('value'))} | "
                         f"{r.get('unit', '')} | {r.get('peer', '-')} | {fmt(r.get('peer_value'))} | {fmt(r.get('speedup'))} |")
        svg = svg_chart(bench, sub)
        if svg:
            name = f"{bench}.svg"
            with open(os.path.join(directory, name), "w") as f:
                f.write(svg)
            lines += ["", f"![{bench} ratios]({name})"]
        lines.append("")
    path = os.path.join(directory, "report.md")
    with open(path, "w") as f:
        f.write("\n".join(lines))
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="small sizes, under ~2 minutes on a 2-core CPU (default)")
    mode.add_argument("--full", action="store_true", help="all sizes (sizes that fill a GPU)")
    ap.add_argument("--only", help="comma-separated benchmark names (alloc, ops, matmul, conv, optim, checkpoint, comm; also attention, lm)")
    ap.add_argument("--device", default=os.environ.get("GPUCORE_DEVICE", "auto"))
    ap.add_argument("--json", action="store_true", help="print JSON lines instead of the table")
    ap.add_argument("--out", help="also write all JSON lines to this file")
    ap.add_argument("--report", help="write report.md and SVG charts into this folder")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per program")
    args = ap.parse_args()
    size = "--full" if args.full else "--quick"
    wanted = None
    if args.only:
        wanted = {w if w.startswith("bench_") else "bench_" + w for w in args.only.split(",")}
        unknown = wanted - set(PROGRAMS + EXTRA_PROGRAMS)
        if unknown:
            ap.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}; choose from {', '.join(PROGRAMS + EXTRA_PROGRAMS)}")

    env = dict(os.environ, GPUCORE_DEVICE=args.device)
    # Peer scripts that drive libgpucore through its Python binding use this build's library.
    built_lib = os.path.join(BUILD_ROOT, "src", "libgpucore.so")
    if "GPUCORE_LIBRARY" not in env and os.path.exists(built_lib):
        env["GPUCORE_LIBRARY"] = built_lib
    env["PYTHONPATH"] = os.pathsep.join(p for p in [os.path.join(SOURCE_DIR, "python"), env.get("PYTHONPATH")] if p)
    facts = environment_facts(args.device)
    sel = facts.get("info", {}).get("selected", {}).get("device", args.device)
    progress(f"commit {facts['commit']}, device {sel}")
    rows, errors = [], {}
    programs = [p for p in PROGRAMS + EXTRA_PROGRAMS if (wanted is None and p in PROGRAMS) or (wanted and p in wanted)]
    for i, name in enumerate(programs, 1):
        exe = os.path.join(BENCH_DIR, name)
        if not os.path.exists(exe):
            progress(f"({i}/{len(programs)}) {name}: not built in this build, skipped")
            continue
        argv = [exe, "--json", size]
        if name == "bench_comm":
            mpirun = shutil.which("mpirun")
            if not mpirun:
                errors[name] = "mpirun not found"
                continue
            argv = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2"] + argv
        progress(f"({i}/{len(programs)}) {name} {size}")
        t0 = time.time()
        got, err = run_lines(argv, env, args.timeout)
        if err:
            errors[name] = err
        rows += got
        progress(f"  {len(got)} figures in {time.time() - t0:.1f} s" + (f" ({err})" if err else ""))
        # Peer scripts for this area (bench/peers/<peer>_<area>.py), same JSON contract.
        area = name[len("bench_"):]
        peer_dir = os.path.join(SOURCE_DIR, "bench", "peers")
        for script in sorted(os.listdir(peer_dir)) if os.path.isdir(peer_dir) else []:
            if not script.endswith(f"_{area}.py"):
                continue
            progress(f"  peer {script}")
            prows, perr = run_lines([sys.executable, os.path.join(peer_dir, script), "--json", size], env, args.timeout)
            if perr:
                errors[script] = perr
            for r in prows:
                r["_peer_script"] = True
            rows += prows
    rows = join_peers(rows)
    if args.json:
        for r in rows:
            print(json.dumps(r))
    else:
        print(f"libgpucore bench — commit {facts['commit']} — device {sel} — {facts['date']}")
        print_table(rows)
        for k, v in errors.items():
            print(f"not completed: {k}: {v}")
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    if args.report:
        path = write_report(args.report, rows, facts, errors)
        progress(f"report: {path}")
        if not args.json:
            print(f"report: {path}")
    return 1 if not rows else 0


if __name__ == "__main__":
    sys.exit(main())
