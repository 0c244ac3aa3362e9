#!/usr/bin/env python3
"""compare_builds.py — is build B of libgpucore slower than build A, case by case?

Runs a benchmark that prints one JSON line per case (default: each tree's own
bench/peers/torch_ops.py --json, against that tree's own build) for tree A and tree B in
alternating order (A B, then B A, ...) for N rounds, under one environment, so that the load of a
shared machine falls on both sides alike. Only OUR time (the "value" field) is compared; a
peer's time is ignored. Both sides are timed the same way: --ours-only (the torch side not run)
is passed only when both trees' torch_ops.py know it (else torch's batches run between ours on
both sides), and --settle-ms 0 (batches back to back) to every script that knows it (an older
one never slept before a batch). A sleep before each batch lets the CPU and the OpenMP threads
go idle, and measured up to 1.8x slower per case on this machine than back-to-back batches, so
two builds timed one way each would differ by the procedure, not the code.

Per case it prints the median of A and of B, B/A (of the medians), the paired B/A (the median over
rounds of B's time over A's in the same round: the two ran back to back, so a slow spell of the
machine that hit both cancels out), and a flag:
  SLOWER   every round of B is slower than every round of A (B's minimum > A's maximum: the
           Mann-Whitney U statistic is 0; with 5 rounds a side the chance of that when both builds
           are equally fast is 1/252, one-sided);
  slower?  B's median is above A's maximum, but the rounds overlap;
  faster   the mirror image of SLOWER (A's minimum > B's maximum).
Cases are matched by name; those found in only one build are listed separately.

    compare_builds.py TREE_A TREE_B [--rounds N] [--build DIR] [--env KEY=VALUE ...]
                      [--raw DIR] [--json] [--cmd 'COMMAND'] [-- ARGS for the benchmark]
    compare_builds.py TREE --wheel PYTHON [--rounds N] [--build DIR] [--env ...] [--raw DIR] [-- ARGS]

--wheel compares the build with the installed Python package (`pip install .`) that PYTHON (a
venv's interpreter) imports: A is TREE/BUILD's library under TREE's binding, run by this
interpreter, B the package's own binding and libgpucore.so (GPUCORE_LIBRARY names that copy, so
torch_ops.py does not fall back to the checkout's build), both running TREE's torch_ops.py with
its torch side and default timing. Besides the table of our times it prints each side's engines
(the "build" component, as `gpucore-info` shows it), each case's torch/ours per side and the
geometric means of torch/ours side by side (over the medians, and per round).

--build names the build folder in each tree (default build-release; the library is
TREE/BUILD/src/libgpucore.so). --cmd replaces the benchmark command: it runs in the tree, through
the shell, with {tree} and {lib} substituted. --raw saves every run's output (A-round1.jsonl, ...).
--json prints one JSON object per case instead of the table. Extra PYTHONPATH entries (such as a
torch install) come from the caller's $PYTHONPATH, after the tree's own python/.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys


def parse_args(argv):
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(description="per-case comparison of two builds' times, rounds alternating")
    p.add_argument("tree_a")
    p.add_argument("tree_b", nargs="?")
    p.add_argument("--wheel", metavar="PYTHON")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--build", default="build-release")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--raw", metavar="DIR")
    p.add_argument("--json", action="store_true")
    p.add_argument("--cmd")
    args = p.parse_args(argv)
    args.extra = extra
    if (args.tree_b is None) == (args.wheel is None):
        p.error("give TREE_B, or --wheel PYTHON (not both)")
    if args.wheel and args.cmd:
        p.error("--wheel runs TREE's torch_ops.py; --cmd does not apply")
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    for kv in args.env:
        if "=" not in kv:
            p.error("--env takes KEY=VALUE, got %r" % kv)
    return args


def command_for(side, args):
    if args.cmd:
        return args.cmd.format(tree=side["tree"], lib=side["lib"]), True
    script = os.path.join(side["tree"], "bench", "peers", "torch_ops.py")
    if not os.path.exists(script):
        sys.exit("compare_builds: %s has no bench/peers/torch_ops.py (give --cmd)" % side["tree"])
    timing = [] if args.wheel else timing_options(side["tree"], args)  # --wheel: against torch, default timing
    return [side["python"], script, "--json"] + timing + args.extra, False


def script_knows(tree, option):
    with open(os.path.join(tree, "bench", "peers", "torch_ops.py")) as f:
        return option in f.read()


def timing_options(tree, args):
    """The options that time tree's script the way the other tree's is timed (module docstring)."""
    both = script_knows(args.tree_a, "--ours-only") and script_knows(args.tree_b, "--ours-only")
    return (["--ours-only"] if both else []) + (["--settle-ms", "0"] if script_knows(tree, "--settle-ms") else [])


def build_side(tree, args):
    """A side that runs tree's build: its library under tree's binding, run by this interpreter."""
    lib = os.path.join(tree, args.build, "src", "libgpucore.so")
    if not os.path.exists(lib):
        sys.exit("compare_builds: no library at %s (build the tree first, or give --build)" % lib)
    return {"tree": tree, "lib": lib, "python": sys.executable, "binding": os.path.join(tree, "python")}


def wheel_side(tree, python):
    """A side that runs the package PYTHON imports: its own binding and the libgpucore.so beside it."""
    r = subprocess.run([python, "-c", "import importlib.util, os; "
                        "print(os.path.dirname(importlib.util.find_spec('gpucore').origin))"],
                       cwd="/", env=side_env(None, []), capture_output=True, text=True)
    lib = os.path.join(r.stdout.strip(), "libgpucore.so")
    if r.returncode != 0 or not os.path.exists(lib):
        sys.exit("compare_builds: %s imports no installed gpucore package with its libgpucore.so (%s)"
                 % (python, r.stderr.strip()[-500:]))
    return {"tree": tree, "lib": lib, "python": python, "binding": None}


def side_env(side, args_env):
    """The environment of a run on side (None: finding the package): the caller's with --env's, less
    what could point at another library (and, for a package, LD_LIBRARY_PATH, which could put the
    system's copies in place of those it carries)."""
    package = side is None or side["binding"] is None
    drop = ("GPUCORE_LIBRARY", "LD_LIBRARY_PATH") if package else ("GPUCORE_LIBRARY",)
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(kv.split("=", 1) for kv in args_env)
    if side is not None:
        env["GPUCORE_LIBRARY"] = side["lib"]
        env["PYTHONPATH"] = os.pathsep.join(x for x in (side["binding"], os.environ.get("PYTHONPATH")) if x)
    return env


def engines(side, args):
    """The side's "build" component (the library's engines, as gpucore-info shows them)."""
    r = subprocess.run([side["python"], "-c", "import gpucore; print(gpucore.component_version('build'))"],
                       cwd="/", env=side_env(side, args.env), capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else "(unknown: %s)" % r.stderr.strip()[-300:]


def run_once(side, args, label, rnd):
    """{case: its JSON row} from one run of the benchmark on side (and its raw output saved)."""
    env = side_env(side, args.env)
    cmd, shell = command_for(side, args)
    r = subprocess.run(cmd, shell=shell, cwd=side["tree"], env=env, capture_output=True, text=True)
    if args.raw:
        os.makedirs(args.raw, exist_ok=True)
        with open(os.path.join(args.raw, "%s-round%d.jsonl" % (label, rnd)), "w") as f:
            f.write(r.stdout)
        with open(os.path.join(args.raw, "%s-round%d.stderr" % (label, rnd)), "w") as f:
            f.write(r.stderr)
    if r.returncode != 0:
        sys.exit("compare_builds: %s round %d failed (%d): %s" % (label, rnd, r.returncode, r.stderr[-2000:]))
    rows = {}
    for line in r.stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        row = json.loads(line)
        if "case" in row and isinstance(row.get("value"), (int, float)):
            rows[row["case"]] = row
    if not rows:
        sys.exit("compare_builds: %s round %d printed no JSON case lines" % (label, rnd))
    return rows


def ours(rows):
    """{case: our ms} of one run's rows."""
    return {c: float(r["value"]) for c, r in rows.items()}


def speedups(rows):
    """{case: torch/ours} of one run's rows, where the torch side ran."""
    return {c: float(r["speedup"]) for c, r in rows.items() if isinstance(r.get("speedup"), (int, float)) and r["speedup"] > 0}


def geomean(values):
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def print_against_torch(sides, raw):
    """Each case's median torch/ours per side and the geometric means side by side (module docstring)."""
    per = {label: [speedups(rows) for rows in raw[label]] for label in sides}
    cases = [c for c in per["A"][0] if all(c in run for label in sides for run in per[label])]
    if not cases:
        print("against torch: no case has torch's time in every run (is torch importable by both interpreters?)")
        return
    med = {label: {c: statistics.median(run[c] for run in per[label]) for c in cases} for label in sides}
    print("\nagainst torch (torch/ours, > 1: we are faster; median over rounds of each run's ratio)")
    print("%-40s %10s %10s" % ("case", "A", "B"))
    for c in cases:
        print("%-40s %10.3f %10.3f" % (c, med["A"][c], med["B"][c]))
    ga, gb = geomean(med["A"].values()), geomean(med["B"].values())
    print("%-40s %10.3f %10.3f   B/A %.3f   (%d cases)" % ("geometric mean", ga, gb, gb / ga, len(cases)))
    for label in sides:
        print("  per round %s: %s" % (label, " ".join("%.3f" % geomean(run[c] for c in cases) for run in per[label])))


def verdict(a, b):
    """The flag of the module docstring for our times a (build A) and b (build B)."""
    if min(b) > max(a):
        return "SLOWER"
    if min(a) > max(b):
        return "faster"
    if statistics.median(b) > max(a):
        return "slower?"
    return ""


def paired(runs_a, runs_b, case):
    """Median over the rounds that have the case in both builds of B's time / A's time."""
    r = [b[case] / a[case] for a, b in zip(runs_a, runs_b) if case in a and case in b and a[case] > 0]
    return statistics.median(r) if r else float("nan")


def compare(runs_a, runs_b):
    """Rows (case, times A, times B) for cases in both, in A's first-seen order; the names only in one."""
    order = []
    for run in runs_a + runs_b:
        order += [c for c in run if c not in order]
    both, only_a, only_b = [], [], []
    for c in order:
        ta = [r[c] for r in runs_a if c in r]
        tb = [r[c] for r in runs_b if c in r]
        if ta and tb:
            both.append((c, ta, tb))
        elif ta:
            only_a.append(c)
        else:
            only_b.append(c)
    return both, only_a, only_b


def main(argv):
    args = parse_args(argv)
    tree_a = os.path.abspath(args.tree_a)
    sides = {"A": build_side(tree_a, args),
             "B": wheel_side(tree_a, args.wheel) if args.wheel else build_side(os.path.abspath(args.tree_b), args)}
    raw = {"A": [], "B": []}
    for rnd in range(1, args.rounds + 1):
        for label in (("A", "B") if rnd % 2 else ("B", "A")):
            raw[label].append(run_once(sides[label], args, label, rnd))
            print("compare_builds: round %d %s done" % (rnd, label), file=sys.stderr, flush=True)
    runs = {label: [ours(rows) for rows in raw[label]] for label in raw}
    both, only_a, only_b = compare(runs["A"], runs["B"])
    if args.json:
        for c, ta, tb in both:
            print(json.dumps({"case": c, "a_ms": ta, "b_ms": tb, "a_median": statistics.median(ta),
                              "b_median": statistics.median(tb),
                              "b_over_a": statistics.median(tb) / statistics.median(ta),
                              "paired_b_over_a": paired(runs["A"], runs["B"], c), "flag": verdict(ta, tb)}))
        for c in only_a:
            print(json.dumps({"case": c, "only_in": "A"}))
        for c in only_b:
            print(json.dumps({"case": c, "only_in": "B"}))
        return 0
    for label in ("A", "B"):
        side = sides[label]
        if args.wheel:
            print("%s = %s %s (%s; %s)" % (label, "build" if side["binding"] else "installed package", side["lib"],
                                          engines(side, args), side["python"]))
        else:
            print("%s = %s" % (label, side["tree"]))
    print("rounds %d, env %s; times: median ms of our side (range min-max)" % (args.rounds, " ".join(args.env) or "(inherited)"))
    print("%-40s %24s %24s %6s %6s  %s" % ("case", "A", "B", "B/A", "paired", "flag"))
    for c, ta, tb in both:
        ma, mb = statistics.median(ta), statistics.median(tb)
        print("%-40s %8.4g (%6.4g-%6.4g) %8.4g (%6.4g-%6.4g) %6.3f %6.3f  %s"
              % (c, ma, min(ta), max(ta), mb, min(tb), max(tb), mb / ma, paired(runs["A"], runs["B"], c),
                 verdict(ta, tb)))
    for label, names in (("A", only_a), ("B", only_b)):
        if names:
            print("only in %s: %s" % (label, "; ".join(names)))
    flagged = [c for c, ta, tb in both if verdict(ta, tb) == "SLOWER"]
    print("SLOWER in B: %d of %d cases%s" % (len(flagged), len(both), (": " + "; ".join(flagged)) if flagged else ""))
    if args.wheel:
        print_against_torch(sides, raw)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
