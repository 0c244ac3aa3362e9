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
                [--out FILE.jsonl] [--report DIR] [--repeats N]

Each program and its peer scripts run --repeats times (default 3 with --report, whose tables state
the noise; 1 otherwise), alternating, so a slow spell of a
shared machine reaches both sides; every figure is the median over the repeats, with its min, max
and relative spread ((max - min) / median), and each ratio the median of the repeats' ratios.
The peer scripts run under the Python whose PyTorch is newest (this Python or Debian's
/usr/bin/python3, each with the run's PYTHONPATH, so a newer torch on PYTHONPATH is the one used).
--quick (the default) stays under about 5 minutes on a 2-core CPU with 3 repeats. --report writes
report.md — opening with the verdict against PyTorch (cases ahead and behind, geometric mean of the
ratios), then the build type, CPU model, PyTorch version of each peer, machine load and the runs —
and one SVG bar chart of ratios per benchmark on a log scale (drawn directly as SVG: no plotting
package needed). Progress goes to stderr; the table (or JSON lines) to stdout.
"""
import argparse
import html
import json
import math
import os
import platform
import re
import shutil
import statistics
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
EXTRA_PROGRAMS = ["bench_attention", "bench_lm", "bench_generate", "bench_tokenizer", "bench_quant_linear", "bench_qlora"]
TIME_UNITS = {"ns", "us", "ms", "s"}
MEMORY_UNITS = {"bytes", "B", "KiB", "MiB", "GiB"}


def progress(msg):
    print(f"[gpucore-bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_lines(argv, env, timeout):
    """Run a program: the JSON objects it printed (non-JSON lines are ignored) and what went wrong, or None
    (a run that printed no figure included, with the last line it said on stderr)."""
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
    if err is None and not rows:  # a peer that cannot run here says why on stderr (e.g. its package missing)
        err = "no figures: " + ((proc.stderr.strip().splitlines() or ["nothing said on stderr"])[-1][-300:])
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


def machine_facts():
    """The CPU model (from /proc/cpuinfo where there is one) and the core count."""
    model = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu_model": model or platform.processor() or platform.machine() or "an unknown CPU",
            "cpu_count": os.cpu_count()}


def loadavg():
    """The 1, 5 and 15-minute load averages, or None where the system has none."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def build_facts():
    """The build type of the build these programs came from (meson-info beside them)."""
    path = os.path.join(BUILD_ROOT, "meson-info", "intro-buildoptions.json")
    try:
        with open(path) as f:
            opts = {o["name"]: o["value"] for o in json.load(f)}
    except (OSError, ValueError, KeyError, TypeError):
        return {"dir": BUILD_ROOT, "buildtype": None}
    return {"dir": BUILD_ROOT, "buildtype": opts.get("buildtype"), "optimization": opts.get("optimization"),
            "debug": opts.get("debug"), "b_ndebug": opts.get("b_ndebug")}


TORCH_PROBE = "import os, torch; print(torch.__version__); print(os.path.dirname(os.path.abspath(torch.__file__)))"


def version_key(version):
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version or "")
    return tuple(int(g or 0) for g in m.groups()) if m else (-1,)


def pick_torch(env):
    """(python, facts): the Python that runs the peer scripts — of this Python and Debian's
    /usr/bin/python3, each importing with the run's PYTHONPATH, the one whose torch is newest
    (this Python on a tie, or when no candidate imports torch) — and what each candidate found."""
    tried, seen = [], set()
    for py in (sys.executable, "/usr/bin/python3"):
        if not py or not os.path.exists(py) or os.path.realpath(py) in seen:
            continue
        seen.add(os.path.realpath(py))
        found = {"python": py}
        try:
            out = subprocess.run([py, "-c", TORCH_PROBE], env=env, capture_output=True, text=True, timeout=300)
            lines = out.stdout.strip().splitlines()
            if out.returncode == 0 and len(lines) >= 2:
                found["version"], found["path"] = lines[-2].strip(), lines[-1].strip()
                roots = [os.path.realpath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
                found["from_pythonpath"] = any(os.path.realpath(found["path"]).startswith(r + os.sep) for r in roots)
            else:
                found["error"] = (out.stderr.strip().splitlines() or ["no torch"])[-1][:200]
        except (OSError, subprocess.TimeoutExpired) as e:
            found["error"] = str(e)[:200]
        tried.append(found)
    with_torch = [t for t in tried if t.get("version")]
    best = max(with_torch, key=lambda t: version_key(t["version"]), default=None) if with_torch else None
    if best is not None and any(version_key(t["version"]) == version_key(best["version"]) and t["python"] == sys.executable
                                for t in with_torch):
        best = next(t for t in with_torch if t["python"] == sys.executable)
    return (best["python"] if best else sys.executable), {"chosen": best, "candidates": tried}


def ratio(ours, peer, unit):
    """ours against peer, > 1 = libgpucore ahead: peer/ours for times and sizes, ours/peer for rates."""
    if not ours or not peer:
        return None
    return peer / ours if unit in TIME_UNITS or unit in MEMORY_UNITS else ours / peer


def aggregate(repeats):
    """One row per (bench, case, metric, peer, device) over the repeats' joined rows: value and
    peer_value are the medians, with <field>_min and <field>_max; speedup is the median of the
    repeats' ratios, with its min and max; repeats counts the repeats that gave the row."""
    groups, order = {}, []
    for rows in repeats:
        for r in rows:
            key = (r.get("bench"), r.get("case"), r.get("metric"), r.get("peer"), r.get("device"))
            if key not in groups:
                groups[key] = []
                order.append(key)
            groups[key].append(r)
    out = []
    for key in order:
        rs = groups[key]
        row = dict(rs[-1])
        for field in ("value", "peer_value", "speedup"):
            vals = sorted(r[field] for r in rs if isinstance(r.get(field), (int, float)) and not isinstance(r.get(field), bool))
            if vals:
                row[field] = statistics.median(vals)
                row[field + "_min"], row[field + "_max"] = vals[0], vals[-1]
        row["repeats"] = len(rs)
        out.append(row)
    return out


def spread(row, field="value"):
    """(max - min) / median of a field over the repeats, or None."""
    lo, hi, mid = row.get(field + "_min"), row.get(field + "_max"), row.get(field)
    if not isinstance(mid, (int, float)) or lo is None or hi is None or mid == 0:
        return None
    return (hi - lo) / abs(mid)


def is_torch_row(r):
    return str(r.get("peer", "")).lower().startswith("torch") and isinstance(r.get("speedup"), (int, float))


def counted(rows):
    """The rows a verdict counts: those with a positive ratio, less a peer's own row (case "x/keep_all"
    against keep_all) and a rate derived from a time of the same run (conv's fwd_TFLOP/s beside
    fwd_ms: only the time counts, so no run counts twice)."""
    rows = [r for r in rows if isinstance(r.get("speedup"), (int, float)) and r["speedup"] > 0
            and not str(r.get("case", "")).endswith("/" + str(r.get("peer")))]
    op = lambda r: (r.get("bench"), r.get("case"), r.get("peer"), str(r.get("metric", "")).rsplit("_", 1)[0])
    timed = {op(r) for r in rows if r.get("unit") in TIME_UNITS}
    return [r for r in rows if not (str(r.get("unit", "")).endswith("/s") and op(r) in timed)]


def tally(rows):
    """(ahead, behind, level, geometric mean, within noise, total) of the counted rows' ratios."""
    rows = counted(rows)
    if not rows:
        return None
    ahead = sum(1 for r in rows if r["speedup"] > 1)
    behind = sum(1 for r in rows if r["speedup"] < 1)
    gm = math.exp(sum(math.log(r["speedup"]) for r in rows) / len(rows))
    noisy = sum(1 for r in rows if r.get("repeats", 1) > 1 and r.get("speedup_min", 2) <= 1 <= r.get("speedup_max", 0))
    return ahead, behind, len(rows) - ahead - behind, gm, noisy, len(rows)


def verdict_text(label, t, faster="we are faster"):
    ahead, behind, level, gm, noisy, n = t
    text = (f"against {label}: {ahead} case{'s' if ahead != 1 else ''} ahead, {behind} behind"
            + (f", {level} level" if level else "") + f", geometric mean {gm:.2f}× (ours/peer, >1 = {faster})")
    return text + f"; {noisy} of the {n} within run-to-run noise (the ratio's min–max over the repeats spans 1)"


def torch_label(torch_facts, rows, machine):
    versions = sorted({str(r["peer_version"]) for r in rows if r.get("peer_version")})
    chosen = (torch_facts or {}).get("chosen") or {}
    version = ", ".join(versions) or chosen.get("version") or "?"
    return f"PyTorch {version} on {machine.get('cpu_model')} ({machine.get('cpu_count')} cores)"


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
            mine["_peer_source"] = p["_peer_script"]
            if p.get("peer_version"):
                mine["peer_version"] = p["peer_version"]
        else:
            extra.append(dict(p, _peer_source=p["_peer_script"]))
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
    head = ["bench", "case", "device", "metric", "ours", "unit", "spread", "peer", "peer value", "ratio (>1: ours ahead)"]
    pct = lambda v: "-" if v is None else f"{100 * v:.0f}%"
    body = [[r.get("bench", ""), r.get("case", ""), r.get("device", ""), r.get("metric", ""), fmt(r.get("value")),
             r.get("unit", ""), pct(spread(r)) if r.get("repeats", 1) > 1 else "-", r.get("peer", "-"),
             fmt(r.get("peer_value")), fmt(r.get("speedup"))] for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)] if body else [len(h) for h in head]
    line = "  ".join(h.ljust(w) for h, w in zip(head, widths))
    print(line, file=out)
    print("-" * len(line), file=out)
    for b in body:
        print("  ".join(str(x).ljust(w) for x, w in zip(b, widths)), file=out)


def svg_chart(title, rows):
    """A horizontal bar chart of ratios on a log scale (bars from 1.0; whiskers: the ratio's min–max
    over the repeats), as an SVG string: a 44x ratio and a 0.9x one stay readable side by side."""
    rows = [r for r in rows if isinstance(r.get("speedup"), (int, float)) and r["speedup"] > 0]
    if not rows:
        return None
    vals = [v for r in rows for v in (r["speedup"], r.get("speedup_min"), r.get("speedup_max")) if v and v > 0]
    lo, hi = min(min(vals), 0.5) / 1.15, max(max(vals), 2.0) * 1.15
    bar_h, left, width = 18, 330, 460
    height = 40 + bar_h * len(rows) + 34
    x_of = lambda v: left + width * (math.log(v) - math.log(lo)) / (math.log(hi) - math.log(lo))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 70}" height="{height}" '
             f'font-family="sans-serif" font-size="11">',
             f'<text x="10" y="20" font-size="14">{html.escape(title)}: ratio ours/peer, log scale '
             f'(&gt; 1 = libgpucore ahead; whiskers: min–max over repeats)</text>']
    ticks = [m * 10 ** e for e in range(-3, 5) for m in (1, 2, 5) if lo <= m * 10 ** e <= hi]
    for t in ticks:
        parts.append(f'<line x1="{x_of(t):.1f}" y1="30" x2="{x_of(t):.1f}" y2="{height - 24}" stroke="#ddd"/>')
        parts.append(f'<text x="{x_of(t):.1f}" y="{height - 10}" text-anchor="middle">{t:g}</text>')
    x1 = x_of(1.0)
    for i, r in enumerate(rows):
        y = 35 + i * bar_h
        v = r["speedup"]
        label = html.escape(f'{r.get("case", "")} [{r.get("metric", "")}]'[:60])
        color = "#3a7" if v >= 1 else "#c54"
        x0, xv = min(x1, x_of(v)), max(x1, x_of(v))
        parts.append(f'<text x="{left - 6}" y="{y + 12}" text-anchor="end">{label}</text>')
        parts.append(f'<rect x="{x0:.1f}" y="{y + 2}" width="{max(1.0, xv - x0):.1f}" height="{bar_h - 5}" fill="{color}"/>')
        if r.get("speedup_min") and r.get("speedup_max") and r["speedup_min"] > 0:
            a, b = x_of(r["speedup_min"]), x_of(r["speedup_max"])
            parts.append(f'<line x1="{a:.1f}" y1="{y + 8}" x2="{b:.1f}" y2="{y + 8}" stroke="#222"/>')
        parts.append(f'<text x="{max(xv, x_of(r.get("speedup_max") or v)) + 4:.1f}" y="{y + 12}">{v:.2f}</text>')
    parts.append(f'<line x1="{x1:.1f}" y1="30" x2="{x1:.1f}" y2="{height - 24}" stroke="#333" stroke-dasharray="4,3"/>')
    parts.append("</svg>")
    return "\n".join(parts)


def ratio_header(rows):
    """The ratio column's title, naming its direction for the units in the table."""
    units = {r.get("unit") for r in rows if isinstance(r.get("speedup"), (int, float))}
    if units and units <= TIME_UNITS:
        return "speed ratio ours/peer (peer time ÷ our time; >1 = libgpucore faster)"
    if units and units <= TIME_UNITS | {"GB/s", "TFLOP/s", "GFLOP/s", "tokens/s", "samples/s", "steps/s"}:
        return "speed ratio ours/peer (times: peer ÷ ours, rates: ours ÷ peer; >1 = libgpucore faster)"
    return "ratio ours/peer (>1 = libgpucore ahead: times and bytes peer ÷ ours, rates and batch ours ÷ peer)"


def fmt_range(row, field):
    lo, hi, sp = row.get(field + "_min"), row.get(field + "_max"), spread(row, field)
    if lo is None or hi is None:
        return "-"
    return f"{fmt(lo)}–{fmt(hi)}" + (f" ({100 * sp:.0f}%)" if sp is not None else "")


def torch_lines(torch_facts, runs, rows):
    """Report lines: which PyTorch the peers used, and each peer script's version."""
    chosen = (torch_facts or {}).get("chosen")
    lines = []
    if chosen:
        where = "from PYTHONPATH" if chosen.get("from_pythonpath") else "that Python's own packages"
        lines.append(f"- PyTorch for the peers: {chosen['version']} at {chosen['path']} ({where}), run by {chosen['python']}; "
                     "the newest of: " + "; ".join(f"{c['python']}: " + (c.get("version") or f"no torch ({c.get('error', '?')})")
                                                  for c in torch_facts.get("candidates", [])))
    else:
        lines.append("- PyTorch for the peers: none importable (" + "; ".join(
            f"{c['python']}: {c.get('error', '?')}" for c in (torch_facts or {}).get("candidates", [])) + "): no PyTorch comparison")
    for run in runs:
        for script in run.get("peers", []):
            got = [r for r in rows if r.get("_peer_source") == script]
            versions = sorted({str(r["peer_version"]) for r in got if r.get("peer_version")})
            n = run["peer_rows"].get(script, 0)
            if n == 0:
                what = "printed no figures (it runs only where its peer can: a GPU, or PyTorch)"
            elif versions:
                what = f"torch {', '.join(versions)}, {n} figures"
            elif script.startswith("torch_") and chosen:
                what = f"torch {chosen['version']} (the peers' Python), {n} figures"
            else:
                what = f"{n} figures"
            lines.append(f"  - {script} (peer of {run['name']}): {what}")
    return lines


def write_report(directory, rows, facts, errors, runs=(), torch_facts=None, repeats=1, load=(None, None)):
    os.makedirs(directory, exist_ok=True)
    info = facts.get("info", {})
    machine = facts.get("machine") or machine_facts()
    build = facts.get("build") or {}
    torch_rows = [r for r in rows if is_torch_row(r)]
    t = tally(torch_rows)
    if t:
        head = "**Verdict: " + verdict_text(torch_label(torch_facts, torch_rows, machine), t) + ".**"
    else:
        head = (f"**Verdict: no case was compared with PyTorch on {machine.get('cpu_model')}** "
                "(no PyTorch peer printed a figure; see the PyTorch line below).")
    bt = build.get("buildtype")
    build_line = (f"- build: {bt} (optimization {build.get('optimization')}, debug {build.get('debug')}, "
                  f"b_ndebug {build.get('b_ndebug')}) in {build.get('dir')}" if bt else
                  f"- build: unknown (no meson-info in {build.get('dir')})")
    if bt and bt != "release":
        build_line += " — **not a release build: the figures understate the library** (the main job builds build-release)"
    lb, la = load
    lines = ["# libgpucore benchmark report", "", head, "",
             "Counted: every case (and timed op) that a PyTorch peer ran too — times only where a case reports "
             "a time and a rate of the same run. Each ratio is the median over the repeats of that repeat's ratio.", "",
             f"- date: {facts.get('date')}", f"- commit: {facts.get('commit')}", build_line,
             f"- CPU: {machine.get('cpu_model')}, {machine.get('cpu_count')} cores",
             *torch_lines(torch_facts, runs, rows),
             f"- machine load (1/5/15-minute load average): {lb} before the run, {la} after (per program below)",
             f"- repeats: each program and its peer scripts ran {repeats} time{'s' if repeats != 1 else ''}, alternating; "
             "figures are medians; spread = (max − min) / median over the repeats",
             f"- library: {info.get('library', {}).get('build', '?')}",
             f"- selected device: {info.get('selected', {}).get('device', '?')}",
             f"- CUDA: {info.get('cuda', {}).get('status', '?')}",
             f"- devices: {json.dumps(info.get('devices', {}))}", ""]
    if runs:
        lines += ["## Runs", "", "| program | repeats | seconds | load before | load after | peer scripts |", "|---|---|---|---|---|---|"]
        for run in runs:
            lines.append(f"| {run['name']} | {run['repeats']} | {run['seconds']:.1f} | {run['load_before']} | "
                         f"{run['load_after']} | {', '.join(run.get('peers', [])) or '-'} |")
        lines.append("")
    if errors:
        lines += ["## Programs that did not complete", ""] + [f"- {k}: {v}" for k, v in errors.items()] + [""]
    for bench in sorted({r.get("bench", "?") for r in rows}):
        sub = [r for r in rows if r.get("bench") == bench]
        lines += [f"## {bench}", ""]
        st = [r for r in sub if is_torch_row(r)]
        if tally(st):
            lines.append("Verdict: " + verdict_text(torch_label(torch_facts, st, machine), tally(st)) + ".")
        for peer in sorted({str(r.get("peer")) for r in sub if not is_torch_row(r) and r.get("peer")}):
            pt = tally([r for r in sub if str(r.get("peer")) == peer and not is_torch_row(r)])
            if pt:
                text = verdict_text(peer, pt, "libgpucore ahead")
                lines.append(("Also " + text if st else text[0].upper() + text[1:]) + ".")
        if not any(isinstance(r.get("speedup"), (int, float)) for r in sub):
            lines.append("No peer: figures only.")
        lines += ["", f"| case | device | metric | unit | ours (median) | ours min–max (spread) | peer | peer (median) | "
                      f"peer min–max (spread) | {ratio_header(sub)} | ratio min–max |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in sub:
            lines.append(f"| {r.get('case', '')} | {r.get('device', '')} | {r.get('metric', '')} | {r.get('unit', '')} | "
                         f"{fmt(r.get('value'))} | {fmt_range(r, 'value')} | {r.get('peer', '-')} | {fmt(r.get('peer_value'))} | "
                         f"{fmt_range(r, 'peer_value')} | {fmt(r.get('speedup'))} | {fmt_range(r, 'speedup')} |")
        svg = svg_chart(bench, sub)
        if svg:
            name = f"{bench}.svg"
            with open(os.path.join(directory, name), "w") as f:
                f.write(svg)
            lines += ["", f"![{bench} ratios, log scale]({name})"]
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
    ap.add_argument("--only", help="comma-separated benchmark names (alloc, ops, matmul, conv, optim, checkpoint, comm; also attention, lm, generate, quant_linear, qlora)")
    ap.add_argument("--device", default=os.environ.get("GPUCORE_DEVICE", "auto"))
    ap.add_argument("--json", action="store_true", help="print JSON lines instead of the table")
    ap.add_argument("--out", help="also write all JSON lines to this file")
    ap.add_argument("--report", help="write report.md and SVG charts into this folder")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per program")
    ap.add_argument("--repeats", type=int, help="runs of each program and its peers (figures: medians; "
                                                 "default 3 with --report, 1 otherwise)")
    args = ap.parse_args()
    if args.repeats is None:
        args.repeats = 3 if args.report else 1
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
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
    facts["machine"], facts["build"] = machine_facts(), build_facts()
    sel = facts.get("info", {}).get("selected", {}).get("device", args.device)
    peer_python, torch_facts = pick_torch(env)
    chosen = torch_facts.get("chosen")
    progress(f"commit {facts['commit']}, device {sel}, {facts['build'].get('buildtype') or 'unknown'} build, "
             f"{facts['machine']['cpu_model']}; peers: {peer_python}"
             + (f" with torch {chosen['version']}" if chosen else " (no torch importable)"))
    rows, errors, runs = [], {}, []
    load_start = loadavg()
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
        # Peer scripts for this area (bench/peers/<peer>_<area>.py), same JSON contract.
        area = name[len("bench_"):]
        peer_dir = os.path.join(SOURCE_DIR, "bench", "peers")
        scripts = [s for s in sorted(os.listdir(peer_dir)) if s.endswith(f"_{area}.py")] if os.path.isdir(peer_dir) else []
        run = {"name": name, "repeats": args.repeats, "load_before": loadavg(), "peers": scripts,
               "peer_rows": dict.fromkeys(scripts, 0)}
        t0 = time.time()
        per_repeat = []
        for rep in range(1, args.repeats + 1):
            progress(f"({i}/{len(programs)}) {name} {size}, repeat {rep}/{args.repeats}")
            t1 = time.time()
            got, err = run_lines(argv, env, args.timeout)
            if err:
                errors[name] = err
            progress(f"  {len(got)} figures in {time.time() - t1:.1f} s" + (f" ({err})" if err else ""))
            for script in scripts:
                progress(f"  peer {script}")
                prows, perr = run_lines([peer_python, os.path.join(peer_dir, script), "--json", size], env, args.timeout)
                if perr:
                    errors[script] = perr
                    progress(f"  {script}: {perr}")
                for r in prows:
                    r["_peer_script"] = script
                run["peer_rows"][script] = max(run["peer_rows"][script], len(prows))
                got += prows
            per_repeat.append(join_peers(got))
        rows += aggregate(per_repeat)
        run["seconds"], run["load_after"] = time.time() - t0, loadavg()
        runs.append(run)
    load_end = loadavg()
    if args.json:
        for r in rows:
            print(json.dumps({k: v for k, v in r.items() if not k.startswith("_")}))
    else:
        print(f"libgpucore bench — commit {facts['commit']} — device {sel} — {facts['date']}")
        print_table(rows)
        for k, v in errors.items():
            print(f"not completed: {k}: {v}")
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            for r in rows:
                f.write(json.dumps({k: v for k, v in r.items() if not k.startswith("_")}) + "\n")
    if args.report:
        path = write_report(args.report, rows, facts, errors, runs, torch_facts, args.repeats, (load_start, load_end))
        progress(f"report: {path}")
        if not args.json:
            print(f"report: {path}")
    return 1 if not rows else 0


if __name__ == "__main__":
    sys.exit(main())
