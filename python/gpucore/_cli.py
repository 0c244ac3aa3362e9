"""The console scripts of the installed package (pyproject.toml: gpucore-info, gpucore-lm).

Each runs the program of the same name that the package carries in its bin/ folder, beside
libgpucore.so, with the same arguments, standard streams and exit status.
"""
from __future__ import annotations

import os
import sys
from typing import List, NoReturn, Optional

_BIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin")


def tool_path(name: str) -> str:
    """The path of the packaged program `name` (e.g. "gpucore-info")."""
    return os.path.join(_BIN, name)


def _run(name: str, argv: Optional[List[str]]) -> NoReturn:
    path = tool_path(name)
    args = sys.argv[1:] if argv is None else list(argv)
    if not os.access(path, os.X_OK):
        sys.stderr.write("%s: %s is missing or not executable; this gpucore package was installed "
                         "without its programs (reinstall it with `pip install <libgpucore source>`)\n"
                         % (name, path))
        sys.exit(127)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(path, [name] + args)


def info(argv: Optional[List[str]] = None) -> NoReturn:
    """gpucore-info: devices, backends, versions and features of the packaged library."""
    _run("gpucore-info", argv)


def lm(argv: Optional[List[str]] = None) -> NoReturn:
    """gpucore-lm: generate with, fine-tune and evaluate Hugging Face language models."""
    _run("gpucore-lm", argv)
