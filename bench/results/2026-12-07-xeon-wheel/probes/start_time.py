#!/usr/bin/env python3
"""start_time.py — how long a fresh process takes to import gpucore and run its first op, per
installed package: `start_time.py [--rounds N] LABEL=PYTHON ...` runs each PYTHON (a venv's
interpreter with the package installed) in turn, round after round (the order alternating, so a
slow spell of the machine falls on every side), with no GPUCORE_LIBRARY/PYTHONPATH/LD_LIBRARY_PATH,
each run loading the package's libgpucore.so with ctypes (timed inside the process: the loader's
work for the library and what it needs), then `import gpucore` and one ones((2, 2)) copied to numpy
(the CPU context made), and prints per label the median and minimum of both in ms, the whole run's
wall time beside a bare `python -c pass` as the floor.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

CODE = """
import ctypes, importlib.util, os, time
lib = os.path.join(os.path.dirname(importlib.util.find_spec("gpucore").origin), "libgpucore.so")
t = time.perf_counter()
ctypes.CDLL(lib)
print((time.perf_counter() - t) * 1e3)
import gpucore
gpucore.ones((2, 2)).numpy()
"""


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("sides", nargs="+", metavar="LABEL=PYTHON")
    args = p.parse_args()
    sides = [s.split("=", 1) for s in args.sides]
    env = {k: v for k, v in os.environ.items() if k not in ("GPUCORE_LIBRARY", "PYTHONPATH", "LD_LIBRARY_PATH")}
    times = {label: [] for label, _ in sides}
    load = {label: [] for label, _ in sides}
    floor = []
    for r in range(args.rounds):
        order = sides if r % 2 == 0 else sides[::-1]
        for label, py in order:
            t = time.perf_counter()
            out = subprocess.run([py, "-c", CODE], check=True, env=env, cwd="/", stdout=subprocess.PIPE).stdout
            times[label].append((time.perf_counter() - t) * 1e3)
            load[label].append(float(out))
        t = time.perf_counter()
        subprocess.run([sides[0][1], "-c", "pass"], check=True, env=env, cwd="/")
        floor.append((time.perf_counter() - t) * 1e3)
    print("%-24s %22s %22s   (%d rounds)" % ("package", "load libgpucore.so ms", "whole run ms", args.rounds))
    print("%-24s %11s %10s %11s %10s" % ("", "median", "min", "median", "min"))
    for label, _ in sides:
        print("%-24s %11.2f %10.2f %11.1f %10.1f" % (label, statistics.median(load[label]), min(load[label]),
                                                   statistics.median(times[label]), min(times[label])))
    print("%-24s %11s %10s %11.1f %10.1f" % ("python -c pass", "", "", statistics.median(floor), min(floor)))


if __name__ == "__main__":
    sys.exit(main())
