"""Safetensors interchange, checked without the `safetensors` or torch packages:
a small numpy reader and writer of the format (8-byte little-endian header
length, JSON header, raw little-endian bytes) stands in for Python's
safetensors, and libgpucore is driven through ctypes on $GPUCORE_LIBRARY.
Files written by libgpucore must read here and the reverse. Self-contained: it
skips cleanly when $GPUCORE_LIBRARY is not set."""
import ctypes
import json
import os
import struct

import numpy as np
import pytest

LIB_PATH = os.environ.get("GPUCORE_LIBRARY")
pytestmark = pytest.mark.skipif(not LIB_PATH, reason="GPUCORE_LIBRARY is not set (path of libgpucore.so)")

# gpucore_dtype values and the safetensors names / numpy types they map to
DTYPES = {  # name: (gpucore_dtype, numpy dtype used for the raw bytes)
    "F32": (0, np.float32), "F64": (1, np.float64), "F16": (2, np.float16), "BF16": (3, np.uint16),
    "I32": (4, np.int32), "I64": (5, np.int64), "U8": (6, np.uint8), "F8_E4M3": (7, np.uint8),
    "F8_E5M2": (8, np.uint8),
}


def np_write(path, tensors, metadata=None):
    """The reference writer: tensors is {name: (dtype string, array)}; padding to 8 like safetensors."""
    header, offset, blobs = {}, 0, []
    if metadata:
        header["__metadata__"] = metadata
    for name, (dt, arr) in tensors.items():
        raw = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def np_read(path):
    """The reference reader: returns ({name: (dtype, array)}, metadata, header_length)."""
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    meta = header.pop("__metadata__", {})
    out = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        arr = np.frombuffer(body[begin:end], dtype=np.dtype(DTYPES[e["dtype"]][1]).newbyteorder("<"))
        out[name] = (e["dtype"], arr.reshape(e["shape"]))
    return out, meta, n


@pytest.fixture(scope="module")
def lib():
    L = ctypes.CDLL(LIB_PATH)
    p, i64, c = ctypes.c_void_p, ctypes.c_int64, ctypes.c_char_p
    L.gpucore_context_create.argtypes = [c, ctypes.POINTER(p)]
    L.gpucore_context_destroy.argtypes = [p]
    L.gpucore_tensor_create.argtypes = [p, ctypes.c_int, ctypes.c_int, ctypes.POINTER(i64), ctypes.POINTER(p)]
    L.gpucore_tensor_destroy.argtypes = [p]
    L.gpucore_copy_from_host.argtypes = [p, p, i64]
    L.gpucore_copy_to_host.argtypes = [p, i64, p]
    L.gpucore_tensor_nbytes.argtypes = [p]
    L.gpucore_tensor_nbytes.restype = i64
    L.gpucore_last_error.restype = c
    L.gpucore_safetensors_save.argtypes = [c, ctypes.POINTER(c), ctypes.POINTER(p), i64, ctypes.POINTER(c),
                                           ctypes.POINTER(c), i64]
    L.gpucore_safetensors_open.argtypes = [c, ctypes.POINTER(p)]
    L.gpucore_safetensors_close.argtypes = [p]
    L.gpucore_safetensors_count.argtypes = [p]
    L.gpucore_safetensors_count.restype = i64
    L.gpucore_safetensors_name.argtypes = [p, i64]
    L.gpucore_safetensors_name.restype = c
    L.gpucore_safetensors_info.argtypes = [p, c, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int),
                                           ctypes.POINTER(i64)]
    L.gpucore_safetensors_metadata.argtypes = [p, c]
    L.gpucore_safetensors_metadata.restype = c
    L.gpucore_safetensors_load_tensor.argtypes = [p, p, c, ctypes.POINTER(p)]
    return L


@pytest.fixture
def ctx(lib):
    h = ctypes.c_void_p()
    assert lib.gpucore_context_create(b"cpu", ctypes.byref(h)) == 0, lib.gpucore_last_error()
    yield h
    lib.gpucore_context_destroy(h)


def sample_tensors():
    rng = np.random.default_rng(7)
    return {
        "w": ("F32", rng.standard_normal((3, 4)).astype(np.float32)),
        "scalar": ("F64", np.array(3.25, dtype=np.float64)),
        "h": ("F16", rng.standard_normal((5,)).astype(np.float16)),
        "bf": ("BF16", rng.integers(0, 65535, (2, 2, 2), dtype=np.uint16)),
        "i": ("I32", rng.integers(-9, 9, (7,), dtype=np.int32)),
        "l": ("I64", rng.integers(-9, 9, (1, 3), dtype=np.int64)),
        "u": ("U8", rng.integers(0, 255, (4,), dtype=np.uint8)),
        "e4": ("F8_E4M3", rng.integers(0, 255, (2, 3), dtype=np.uint8)),
        "e5": ("F8_E5M2", rng.integers(0, 255, (3,), dtype=np.uint8)),
        "empty": ("F32", np.zeros((0, 4), dtype=np.float32)),
    }


def test_numpy_file_reads_in_libgpucore(lib, ctx, tmp_path):
    path = str(tmp_path / "from_numpy.safetensors")
    tensors = sample_tensors()
    np_write(path, tensors, {"format": "pt"})
    f = ctypes.c_void_p()
    assert lib.gpucore_safetensors_open(path.encode(), ctypes.byref(f)) == 0, lib.gpucore_last_error()
    try:
        assert lib.gpucore_safetensors_count(f) == len(tensors)
        assert lib.gpucore_safetensors_metadata(f, b"format") == b"pt"
        for name, (dt, arr) in tensors.items():
            code, nd = ctypes.c_int(), ctypes.c_int()
            shape = (ctypes.c_int64 * 8)()
            assert lib.gpucore_safetensors_info(f, name.encode(), ctypes.byref(code), ctypes.byref(nd), shape) == 0
            assert code.value == DTYPES[dt][0]
            assert list(shape[:nd.value]) == list(arr.shape)
            t = ctypes.c_void_p()
            assert lib.gpucore_safetensors_load_tensor(f, ctx, name.encode(), ctypes.byref(t)) == 0
            got = np.empty(arr.shape, dtype=arr.dtype)
            if got.nbytes:
                assert lib.gpucore_copy_to_host(got.ctypes.data, got.nbytes, t) == 0
            lib.gpucore_tensor_destroy(t)
            np.testing.assert_array_equal(got, arr)
    finally:
        lib.gpucore_safetensors_close(f)


def test_libgpucore_file_reads_in_numpy(lib, ctx, tmp_path):
    path = str(tmp_path / "from_gpucore.safetensors")
    tensors = sample_tensors()
    handles = []
    for dt, arr in tensors.values():
        shape = (ctypes.c_int64 * max(1, arr.ndim))(*arr.shape)
        t = ctypes.c_void_p()
        assert lib.gpucore_tensor_create(ctx, DTYPES[dt][0], arr.ndim, shape, ctypes.byref(t)) == 0
        if arr.nbytes:
            a = np.ascontiguousarray(arr)
            assert lib.gpucore_copy_from_host(t, a.ctypes.data, a.nbytes) == 0
        handles.append(t)
    names = (ctypes.c_char_p * len(tensors))(*[n.encode() for n in tensors])
    ts = (ctypes.c_void_p * len(tensors))(*[h.value for h in handles])
    keys = (ctypes.c_char_p * 1)(b"format")
    vals = (ctypes.c_char_p * 1)(b"pt")
    st = lib.gpucore_safetensors_save(path.encode(), names, ts, len(tensors), keys, vals, 1)
    for h in handles:
        lib.gpucore_tensor_destroy(h)
    assert st == 0, lib.gpucore_last_error()
    got, meta, header_len = np_read(path)
    assert header_len % 8 == 0
    assert meta == {"format": "pt"}
    assert list(got) == list(tensors)  # file order is the given order
    for name, (dt, arr) in tensors.items():
        assert got[name][0] == dt
        np.testing.assert_array_equal(got[name][1], arr)
        assert got[name][1].shape == arr.shape


def test_corrupt_file_is_refused(lib, tmp_path):
    path = str(tmp_path / "bad.safetensors")
    np_write(path, {"w": ("F32", np.ones(4, dtype=np.float32))})
    data = open(path, "rb").read()
    open(path, "wb").write(data[:-3])  # truncated
    f = ctypes.c_void_p()
    assert lib.gpucore_safetensors_open(path.encode(), ctypes.byref(f)) == 16  # GPUCORE_ERR_CORRUPT_FILE
    assert b"truncated" in lib.gpucore_last_error()
