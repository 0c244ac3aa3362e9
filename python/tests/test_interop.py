"""Zero-copy interop: numpy <-> gpucore, DLPack (numpy, gpucore, torch/cupy when
installed), lifetimes, and the CUDA array interface."""
import gc
import importlib
import weakref

import numpy as np
import pytest

import gpucore
from gpucore import _runtime, interop


def test_from_numpy_shares_memory_both_ways(ctx):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = gpucore.from_numpy(a, device=ctx)
    assert t.data_ptr() == a.ctypes.data and t.shape == (3, 4) and t.strides == (4, 1)
    a[1, 2] = -5.0                               # numpy write -> gpucore read
    assert t.numpy()[1, 2] == -5.0
    t[0].fill_(9.0)                              # gpucore write -> numpy read
    ctx.synchronize()
    np.testing.assert_array_equal(a[0], [9, 9, 9, 9])
    s = gpucore.from_numpy(a[:, 1::2], device=ctx)   # strided arrays too
    assert s.strides == (4, 2)
    s.fill_(1.0)
    ctx.synchronize()
    assert (a[:, 1::2] == 1).all() and a[2, 0] == 8


def test_from_numpy_keeps_array_alive_and_releases_it(ctx):
    a = np.arange(6, dtype=np.int64)
    ref = weakref.ref(a) if hasattr(a, "__weakref__") else None
    before = _runtime.live_owner_count()
    t = gpucore.from_numpy(a, device=ctx)
    v = t[2:]
    del a
    gc.collect()
    assert v.numpy().tolist() == [2, 3, 4, 5]
    del t
    gc.collect()
    assert v.numpy().tolist() == [2, 3, 4, 5]     # the view keeps it alive
    assert _runtime.live_owner_count() == before + 1
    del v
    gc.collect()
    assert _runtime.live_owner_count() == before  # the deleter ran and dropped the array
    if ref is not None:
        assert ref() is None


def test_from_numpy_bits_and_refusals(ctx):
    u = np.array([0x3F80, 0x4000], np.uint16)
    t = gpucore.from_numpy(u, dtype="bf16", device=ctx)
    np.testing.assert_array_equal(t.numpy(convert=True), [1.0, 2.0])
    with pytest.raises(gpucore.InvalidArgumentError) as e:
        r = np.zeros(3, np.float32)
        r.flags.writeable = False
        gpucore.from_numpy(r, device=ctx)
    assert "read-only" in str(e.value)
    with pytest.raises(gpucore.NotSupportedError):
        gpucore.from_numpy(np.arange(4, dtype=np.float32)[::-1], device=ctx)
    with pytest.raises(gpucore.InvalidArgumentError):
        gpucore.from_numpy(np.zeros(3, np.complex64), device=ctx)
    with pytest.raises(gpucore.InvalidArgumentError):
        gpucore.from_numpy(np.zeros(3, ">f4"), device=ctx)
    with pytest.raises(gpucore.DtypeMismatchError):
        gpucore.from_numpy(np.zeros(3, np.float32), dtype="f64", device=ctx)
    with pytest.raises(TypeError):
        gpucore.from_numpy([1, 2, 3])
    z = gpucore.from_numpy(np.zeros((0, 4), np.float32), device=ctx)
    assert z.shape == (0, 4) and z.numel() == 0


def test_numpy_view_is_zero_copy_and_outlives_tensor_and_context():
    c = gpucore.Context("cpu")
    t = c.empty((3, 4)).fill_(2.0)
    n = t.numpy()
    assert n.ctypes.data == t.data_ptr()
    n[0, 0] = 42.0                                # numpy write -> gpucore read
    assert t.numpy(copy=True)[0, 0] == 42.0
    t.fill_(3.0)                                  # gpucore write -> numpy read
    c.synchronize()
    assert n[2, 3] == 3.0
    tv = t.T.numpy()                              # strided views keep their strides
    np.testing.assert_array_equal(tv, n.T)
    c.close()                                     # deferred: numpy still holds the memory
    with pytest.raises(gpucore.InvalidHandleError) as e:
        t.fill_(1.0)
    assert "closed" in str(e.value)
    assert n.sum() == 3.0 * 12
    n[:] = 1.0
    del n, tv
    gc.collect()
    assert c._handle is None                      # the C context went with the last export


def test_np_from_dlpack_zero_copy(ctx):
    t = ctx.empty((2, 5), "f64").uniform_(seed=3)
    a = np.from_dlpack(t)
    assert a.ctypes.data == t.data_ptr()
    a[1, 1] = 123.0
    assert t.numpy(copy=True)[1, 1] == 123.0
    np.testing.assert_array_equal(np.from_dlpack(t.T), t.numpy().T)
    assert t.__dlpack_device__() == (interop.kDLCPU, 0)
    before = interop.live_export_count()
    b = np.from_dlpack(t[:, 1::2])
    assert interop.live_export_count() == before + 1
    del b
    gc.collect()
    assert interop.live_export_count() == before


def test_legacy_and_versioned_capsules(ctx):
    t = ctx.tensor(np.arange(6, dtype=np.int32))
    cap = t.__dlpack__()
    assert "dltensor" in repr(cap) and "versioned" not in repr(cap)
    u = gpucore.from_dlpack(cap)                  # gpucore -> gpucore through a capsule
    assert u.data_ptr() == t.data_ptr() and u.dtype is gpucore.int32
    with pytest.raises(gpucore.InvalidArgumentError) as e:
        gpucore.from_dlpack(cap)
    assert "already consumed" in str(e.value)
    vcap = t.__dlpack__(max_version=(1, 0))
    assert "dltensor_versioned" in repr(vcap)
    w = gpucore.from_dlpack(vcap, device=ctx)
    w.fill_(4)
    ctx.synchronize()
    assert t.numpy().tolist() == [4] * 6
    before = interop.live_export_count()
    unused = t.__dlpack__()
    assert interop.live_export_count() == before + 1
    del unused                                     # dropped unconsumed: the capsule destructor frees it
    gc.collect()
    assert interop.live_export_count() == before
    cp = gpucore.from_dlpack(t.__dlpack__(max_version=(1, 0), copy=True))
    assert cp.data_ptr() != t.data_ptr() and cp.numpy().tolist() == [4] * 6
    with pytest.raises(BufferError):
        ctx.empty((2,), "float8_e5m2").__dlpack__()


def test_from_dlpack_of_numpy_zero_copy(ctx):
    a = np.linspace(0, 1, 24, dtype=np.float32).reshape(2, 3, 4)
    t = gpucore.from_dlpack(a, device=ctx)
    assert t.data_ptr() == a.ctypes.data and t.shape == a.shape
    t[1].fill_(-1.0)
    ctx.synchronize()
    assert (a[1] == -1).all()
    a[0, 0, 0] = 77
    assert t.numpy()[0, 0, 0] == 77
    s = gpucore.from_dlpack(a[:, ::2, 1:], device=ctx)
    np.testing.assert_array_equal(s.numpy(), a[:, ::2, 1:])
    del a
    gc.collect()
    assert t.numpy()[0, 0, 0] == 77               # the tensor keeps the numpy array alive
    r = np.zeros(3)
    r.flags.writeable = False
    with pytest.raises(gpucore.InvalidArgumentError) as e:
        gpucore.from_dlpack(r)
    assert "read-only" in str(e.value)
    with pytest.raises(gpucore.DtypeMismatchError):
        gpucore.from_dlpack(np.zeros(3, np.complex64))
    with pytest.raises(TypeError):
        gpucore.from_dlpack(object())


def test_cuda_array_interface_absent_on_cpu(ctx):
    t = ctx.zeros((2,))
    assert not hasattr(t, "__cuda_array_interface__")


@pytest.mark.parametrize("lib", ["torch", "cupy"])
def test_dlpack_with_torch_and_cupy(lib):
    try:
        mod = importlib.import_module(lib)
    except ImportError as e:
        pytest.skip("%s is not installed (%s); DLPack exchange with it is untested here" % (lib, e))
    if lib == "cupy":
        ok, why = gpucore.backend_status("cuda")
        if not ok:
            pytest.skip("cupy needs CUDA: %s" % why)
        dev = "cuda"
        x = mod.arange(12, dtype=mod.float32).reshape(3, 4)
    else:
        dev = "cpu"
        x = mod.arange(12, dtype=mod.float32).reshape(3, 4)
    t = gpucore.from_dlpack(x)
    assert t.device.startswith(dev) and t.shape == (3, 4)
    t.fill_(5.0)
    t.context.synchronize()
    assert float(x.sum()) == 60.0                  # zero-copy import
    g = gpucore.zeros((2, 3), device=t.context).fill_(2.0)
    y = mod.from_dlpack(g)
    assert float(y.sum()) == 12.0
    y += 1
    assert float(g.numpy(copy=True).sum()) == 18.0  # zero-copy export


def test_cuda_interop(cuda_ctx):
    t = cuda_ctx.tensor(np.arange(8, dtype=np.float32).reshape(2, 4))
    cai = t.__cuda_array_interface__
    assert cai["version"] == 3 and cai["shape"] == (2, 4) and cai["typestr"] == "<f4"
    assert cai["data"][0] == t.data_ptr() and cai["strides"] is None
    assert t.T.__cuda_array_interface__["strides"] == (4, 16)
    assert t.__dlpack_device__() == (interop.kDLCUDA, cuda_ctx.device_index)
    u = gpucore.from_dlpack(t.__dlpack__(), device=cuda_ctx)
    assert u.data_ptr() == t.data_ptr()
    with pytest.raises(gpucore.NotSupportedError):
        t.numpy(copy=False)
    np.testing.assert_array_equal(t.numpy(), np.arange(8).reshape(2, 4))
