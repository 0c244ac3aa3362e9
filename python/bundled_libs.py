"""The shared library files a bundled Python package carries beside libgpucore.so.

Used by python/meson.build (wheel_libs=bundle): `bundled_libs.py NAMES CC [CC args...]`, NAMES the
comma-separated link names libgpucore.so is linked with (gomp,cjson,sleef,dnnl), prints one line
"SONAME PATH RUNPATH" per file to copy: the file the C compiler links for -l<name>, then, found by
soname the same way, every library those files need that is neither glibc nor the C++ runtime
(libstdc++, libgcc_s: on every machine that runs C++, the manylinux policy's list), e.g. Debian's
oneDNN needs the OpenCL loader. RUNPATH is "origin" for a file that needs another file of the list
(its copy gets the run path $ORIGIN: a library's own needs are not looked up through the run path
of the library that loaded it), "-" otherwise. Exits non-zero with a message when the compiler
finds no such library or a file has no soname.
"""
import os
import subprocess
import sys

# What a package may need from the machine (tests/test_install.sh checks the packaged files likewise).
SYSTEM = {"libc.so.6", "libm.so.6", "libmvec.so.1", "libdl.so.2", "libpthread.so.0", "librt.so.1",
          "ld-linux-x86-64.so.2", "libstdc++.so.6", "libgcc_s.so.1"}


class Missing(Exception):
    pass


def locate(cc, file_name):
    """The real path of file_name (libX.so or a soname) in the compiler's library search path."""
    out = subprocess.run(cc + ["-print-file-name=" + file_name], check=True,
                         stdout=subprocess.PIPE, universal_newlines=True).stdout.strip()
    if not os.path.isabs(out) or not os.path.exists(out):
        raise Missing("the compiler %s finds no %s" % (" ".join(cc), file_name))
    return os.path.realpath(out)


def dynamic(path):
    """(soname, [needed sonames]) from the ELF file's dynamic section."""
    text = subprocess.run(["readelf", "-d", path], check=True, stdout=subprocess.PIPE,
                          universal_newlines=True).stdout
    soname, needed = None, []
    for line in text.splitlines():
        if "[" not in line:
            continue
        value = line.split("[", 1)[1].rstrip("]").strip()
        if "(SONAME)" in line:
            soname = value
        elif "(NEEDED)" in line:
            needed.append(value)
    if soname is None:
        raise Missing("%s has no SONAME; is it a linker script?" % path)
    return soname, needed


def closure(names, cc):
    """[(soname, path, needed)] for the link names and what they need beyond SYSTEM, in order."""
    found, queue = [], ["lib%s.so" % n for n in names]
    while queue:
        path = locate(cc, queue.pop(0))
        soname, needed = dynamic(path)
        if any(soname == s for s, _, _ in found):
            continue
        found.append((soname, path, needed))
        queue += [n for n in needed if n not in SYSTEM and all(n != s for s, _, _ in found)]
    return found


def main() -> int:
    if len(sys.argv) < 3:
        sys.stderr.write("usage: bundled_libs.py NAME[,NAME...] CC [CC args...]\n")
        return 2
    names = [n for n in sys.argv[1].split(",") if n]
    try:
        found = closure(names, sys.argv[2:])
    except Missing as e:
        sys.stderr.write("bundled_libs.py: %s\n" % e)
        return 1
    sonames = {s for s, _, _ in found}
    for soname, path, needed in found:
        print(soname, path, "origin" if sonames.intersection(needed) else "-")
    return 0


if __name__ == "__main__":
    sys.exit(main())
