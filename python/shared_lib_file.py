"""Name the shared library file the C compiler links for -l<name> and its soname.

Used by python/meson.build when the Python package bundles a shared library (wheel_libs=bundle):
prints "SONAME PATH" for `shared_lib_file.py NAME CC [CC args...]`, e.g.
"libcjson.so.1 /usr/lib/x86_64-linux-gnu/libcjson.so.1.7.15". Exits non-zero with a message when
the compiler knows no such library or the file has no soname.
"""
import os
import subprocess
import sys


def main() -> int:
    if len(sys.argv) < 3:
        sys.stderr.write("usage: shared_lib_file.py NAME CC [CC args...]\n")
        return 2
    name, cc = sys.argv[1], sys.argv[2:]
    link_name = "lib%s.so" % name
    out = subprocess.run(cc + ["-print-file-name=" + link_name], check=True,
                         stdout=subprocess.PIPE, universal_newlines=True).stdout.strip()
    if not os.path.isabs(out) or not os.path.exists(out):
        sys.stderr.write("shared_lib_file.py: the compiler %s finds no %s\n" % (" ".join(cc), link_name))
        return 1
    path = os.path.realpath(out)
    dyn = subprocess.run(["readelf", "-d", path], check=True, stdout=subprocess.PIPE,
                         universal_newlines=True).stdout
    for line in dyn.splitlines():
        if "(SONAME)" in line and "[" in line:
            print(line.split("[", 1)[1].rstrip("]").strip(), path)
            return 0
    sys.stderr.write("shared_lib_file.py: %s (for %s) has no SONAME; is it a linker script?\n" % (path, link_name))
    return 1


if __name__ == "__main__":
    sys.exit(main())
