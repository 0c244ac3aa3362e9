"""Loading, the declaration table, versions, devices, logging."""
import ctypes
import os
import subprocess
import sys

import pytest

import gpucore
from gpucore import _check_decls, _lib

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.dirname(HERE)


def test_library_loaded_from_env():
    assert os.path.exists(gpucore.library_path)
    if os.environ.get("GPUCORE_LIBRARY"):
        assert os.path.samefile(gpucore.library_path, os.environ["GPUCORE_LIBRARY"])


def test_load_failure_names_every_path_tried(tmp_path):
    env = dict(os.environ, PYTHONPATH=PYDIR, GPUCORE_LIBRARY=str(tmp_path / "nope" / "libgpucore.so"))
    r = subprocess.run([sys.executable, "-c", "import gpucore"], env=env, capture_output=True, text=True)
    assert r.returncode != 0
    assert "cannot load libgpucore" in r.stderr
    assert str(tmp_path / "nope" / "libgpucore.so") in r.stderr
    env.pop("GPUCORE_LIBRARY")
    env["LD_LIBRARY_PATH"] = str(tmp_path)
    r = subprocess.run([sys.executable, "-c", "import gpucore"], env=env, capture_output=True, text=True,
                       cwd=str(tmp_path))
    # Either a system-installed library is found, or the message lists the package dir and the system path.
    if r.returncode != 0:
        assert "next to the package" in r.stderr and "system library path" in r.stderr


def test_every_declaration_has_restype_and_argtypes():
    assert not gpucore.C.missing, "declared but not exported: %s" % gpucore.C.missing
    for name, (restype, argtypes) in _lib.DECLARATIONS.items():
        fn = getattr(_lib.lib, name)
        assert fn.argtypes is not None, name
        want = ctypes.c_int if isinstance(restype, _lib._StatusKind) else restype
        assert fn.restype is want, name
        assert callable(getattr(gpucore.C, name))


def _undeclared():
    path = _check_decls.find_header()
    if not path:
        pytest.skip("include/gpucore.h not found next to the package (installed copy?)")
    return _check_decls.undeclared(path)


def test_covered_header_sections_fully_declared():
    missing = _undeclared()
    covered = {s: n for s, n in missing.items() if s in _check_decls.COVERED_SECTIONS}
    assert not covered, "C functions without a Python declaration: %s" % covered


def test_functions_of_other_areas_not_yet_bound():
    missing = _undeclared()
    other = {s: n for s, n in missing.items() if s not in _check_decls.COVERED_SECTIONS}
    if other:
        pytest.skip("not yet bound in Python (%d functions): %s" % (
            sum(map(len, other.values())), "; ".join("%s: %s" % (s, ", ".join(n)) for s, n in other.items())))


def test_check_decls_cli_runs():
    path = _check_decls.find_header()
    if not path:
        pytest.skip("include/gpucore.h not found")
    assert _check_decls.main(["x", path]) == 0


def test_versions():
    assert gpucore.version() >= 100
    assert gpucore.version_string() == gpucore.__version__
    assert gpucore.version() == sum(int(p) * m for p, m in zip(gpucore.version_string().split("."),
                                                             (10000, 100, 1)))
    v = gpucore.versions()
    assert v["gpucore"] == gpucore.version_string()
    assert v["build"] and "libgpucore" in v["build"]
    assert gpucore.component_version("no-such-component") is None
    with pytest.raises(TypeError):
        gpucore.component_version(None)


def test_status_strings_and_last_error():
    assert gpucore.status_string(0) == "GPUCORE_OK"
    assert gpucore.status_string(4) == "GPUCORE_ERR_SHAPE_MISMATCH"
    with pytest.raises(gpucore.InvalidArgumentError):
        gpucore.Context("bogus-device")
    assert "bogus-device" in gpucore.last_error()
    gpucore.C.gpucore_clear_error()
    assert gpucore.last_error() == ""


def test_devices():
    assert gpucore.device_count("cpu") == 1
    ok, why = gpucore.backend_status("cpu")
    assert ok and why == ""
    props = gpucore.device_properties("cpu", 0)
    assert props.type == gpucore.DeviceType.CPU and props.index == 0 and props.name
    assert props.multiprocessors >= 1 and props.total_memory > 0
    ds = gpucore.devices()
    assert ds[0].type == gpucore.DeviceType.CPU
    assert len(ds) == 1 + gpucore.device_count("cuda")
    with pytest.raises(gpucore.InvalidArgumentError) as e:
        gpucore.device_properties("cpu", 5)
    assert "index 5" in str(e.value)
    ok, why = gpucore.backend_status("cuda")
    if not ok:
        assert why, "an unavailable backend must say why"
        assert gpucore.device_count("cuda") == 0
        with pytest.raises(gpucore.BackendUnavailableError):
            gpucore.device_properties("cuda", 0)


def test_device_processes_and_peer():
    ok, _ = gpucore.backend_status("cuda")
    if ok:
        assert isinstance(gpucore.device_processes(0), list)
        assert gpucore.can_access_peer(0, 0) in (True, False)
    else:
        with pytest.raises(gpucore.GpucoreError):
            gpucore.device_processes(0)
        with pytest.raises(gpucore.GpucoreError):
            gpucore.can_access_peer(0, 1)
    with pytest.raises(ValueError):
        gpucore.device_processes(-1)


def test_logging_level_and_callback(ctx):
    old = gpucore.get_log_level()
    lines = []
    try:
        gpucore.set_log_callback(lambda lv, msg: lines.append((lv, msg)))
        gpucore.set_log_level("debug")
        assert gpucore.get_log_level() == gpucore.LogLevel.DEBUG
        c = gpucore.Context("cpu")
        c.close()
        assert any("context" in m for _, m in lines), lines
        with pytest.raises(gpucore.InvalidArgumentError):
            gpucore.set_log_level(99)
        with pytest.raises(ValueError):
            gpucore.set_log_level("loud")
    finally:
        gpucore.set_log_level(old)
        gpucore.set_log_callback(None)


def test_help_texts():
    for obj in (gpucore.Tensor, gpucore.Context, gpucore.Stream, gpucore.Event, gpucore.from_numpy,
                gpucore.from_dlpack, gpucore.Tensor.numpy, gpucore.Tensor.uniform_, gpucore.empty):
        assert obj.__doc__ and len(obj.__doc__) > 30, obj
