#!/usr/bin/env python3
"""compile_flags.py — do two build folders compile libgpucore.so's sources with the same flags?
`compile_flags.py BUILD_A BUILD_B` reads each folder's compile_commands.json, keeps per source of
the library the code-generation flags (-O, -m, -f, -D, -g, -W, -s; not dependency-file ones), and
prints the flags of the first source and every difference (none: "same flags for N sources").
"""
import json
import shlex
import sys


def flags(build):
    out = {}
    for e in json.load(open(build + "/compile_commands.json")):
        if "libgpucore.so" not in e["command"]:
            continue
        src = e["file"].split("/src/", 1)[-1]
        out[src] = [a for a in shlex.split(e["command"]) if a.startswith(("-O", "-m", "-f", "-D", "-g", "-W", "-s"))
                    and not a.startswith("-MD")]
    return out


a, b = flags(sys.argv[1]), flags(sys.argv[2])
print("flags:", " ".join(sorted(set(next(iter(a.values()))))))
diffs = [(s, sorted(set(a[s]) - set(b.get(s, []))), sorted(set(b.get(s, [])) - set(a[s]))) for s in a if a[s] != b.get(s)]
for s, only_a, only_b in diffs:
    print("%s: only in A %s, only in B %s" % (s, only_a, only_b))
print("sources only in one: %s" % sorted(set(a) ^ set(b)))
print("same flags for %d sources" % len(a) if not diffs else "%d of %d sources differ" % (len(diffs), len(a)))
