"""Bad input from Python: each an exception carrying the library's (or the
binding's) message, and the library stays usable afterwards."""
import gc

import numpy as np
import pytest

import gpucore


def test_error_objects_carry_status_and_message(ctx):
    with pytest.raises(gpucore.ShapeMismatchError) as e:
        ctx.empty((2, 3)).copy_(ctx.empty((3, 2)))
    err = e.value
    assert isinstance(err, gpucore.GpucoreError) and isinstance(err, ValueError)
    assert err.status == 4 and err.status_name == "GPUCORE_ERR_SHAPE_MISMATCH"
    assert err.function == "gpucore_copy"
    assert "copy: dst has shape [2, 3] but src has [3, 2]" in str(err)
    with pytest.raises(gpucore.DtypeMismatchError) as e:
        ctx.empty((2,)).copy_(ctx.empty((2,), "f64"))
    assert isinstance(e.value, TypeError) and "copies do not convert" in str(e.value)


def test_bad_devices():
    with pytest.raises(gpucore.InvalidArgumentError) as e:
        gpucore.Context("tpu")
    assert "'tpu' is not one of cpu, cuda, cuda:N, auto" in str(e.value)
    ok, why = gpucore.backend_status("cuda")
    if not ok:
        with pytest.raises(gpucore.BackendUnavailableError) as e:
            gpucore.Context("cuda")
        assert "cannot be used" in str(e.value)
        with pytest.raises(gpucore.BackendUnavailableError):
            gpucore.Context("cuda:99")
    else:
        with pytest.raises(gpucore.InvalidArgumentError) as e:
            gpucore.Context("cuda:999")
        assert "index 999" in str(e.value)
    with pytest.raises(gpucore.InvalidArgumentTypeError):
        gpucore.Context(0)
    with pytest.raises(TypeError):
        gpucore.get_context(3.5)
    with pytest.raises(gpucore.InvalidArgumentError):
        gpucore.device_properties("cpu", -1)
    with pytest.raises(ValueError):
        gpucore.device_count("gpu")


def test_wrong_types_and_values(ctx):
    with pytest.raises(TypeError):
        ctx.empty(None)
    with pytest.raises(TypeError):
        ctx.empty("abc")
    with pytest.raises(TypeError):
        ctx.empty((2.5, 3))
    with pytest.raises(ValueError) as e:
        ctx.empty((-1, 3))
    assert "shape[0] is -1" in str(e.value)
    with pytest.raises(ValueError):
        ctx.empty((1 << 63, 2))
    with pytest.raises(gpucore.SizeOverflowError) as e:
        ctx.empty((1 << 40, 1 << 40))
    assert "64-bit" in str(e.value) or "overflow" in str(e.value).lower()
    with pytest.raises(ValueError):
        ctx.empty((1,) * 9)
    assert ctx.empty((2,), dtype=None).dtype is gpucore.float32  # as torch: None is the default dtype
    with pytest.raises(ValueError):
        ctx.empty((2,), dtype="float128")
    with pytest.raises(TypeError):
        ctx.empty((2,), dtype=5)
    t = ctx.empty((2, 3))
    with pytest.raises(TypeError):
        t.fill_(None)
    with pytest.raises(TypeError):
        t.fill_("1")
    with pytest.raises(TypeError):
        t.uniform_(seed=1.5)
    with pytest.raises(ValueError):
        t.uniform_(seed=-1)
    with pytest.raises(ValueError):
        t.uniform_(seed=1 << 64)
    with pytest.raises(gpucore.InvalidArgumentError) as e:
        t.transpose(0, 5)
    assert "dim 5 is out of range" in str(e.value)
    with pytest.raises(ValueError):
        t.transpose(0, 1 << 40)
    with pytest.raises(gpucore.InvalidArgumentError) as e:
        t.permute(0, 0)
    assert "not a permutation" in str(e.value)
    with pytest.raises(IndexError):
        t[5]
    with pytest.raises(IndexError):
        t[0, 0, 0]
    with pytest.raises(TypeError):
        t["a"]
    with pytest.raises(TypeError):
        t[1.0]
    with pytest.raises(gpucore.NotSupportedError):
        t[::-1]
    with pytest.raises(gpucore.ShapeMismatchError) as e:
        t.reshape(4, 2)
    assert "has 6 elements" in str(e.value)
    with pytest.raises(gpucore.ShapeMismatchError):
        t.copy_(np.zeros((3, 2), np.float32))
    with pytest.raises(gpucore.DtypeMismatchError):
        t.copy_(np.zeros((2, 3), np.float64))
    with pytest.raises(TypeError):
        t.copy_(None)
    with pytest.raises(TypeError):
        t.copy_(object())
    with pytest.raises(TypeError):
        t.copy_(t, non_blocking="yes")
    with pytest.raises(ValueError):
        t.item()
    with pytest.raises(TypeError):
        ctx.stream(priority="high")
    with pytest.raises(TypeError):
        gpucore.Event(None)
    with pytest.raises(TypeError):
        ctx.default_stream.wait_event(None)
    with pytest.raises(TypeError):
        ctx.event().elapsed_time("end")
    with pytest.raises(gpucore.NotReadyError if False else gpucore.GpucoreError):
        ctx.event().elapsed_time(ctx.event())   # never recorded
    with pytest.raises(gpucore.InvalidArgumentError) as e:
        ctx.default_stream.destroy() or gpucore.C.gpucore_stream_destroy(ctx.default_stream.handle)
    assert "default stream" in str(e.value)
    # the library is still usable
    assert t.fill_(1.0).numpy().sum() == 6.0


def test_freed_tensors(ctx):
    t = ctx.ones((3,))
    v = t[1:]
    t.free()
    t.free()   # idempotent
    for op in (lambda: t.shape, lambda: t.numpy(), lambda: t.fill_(1), lambda: t[0], lambda: t.copy_(v),
               lambda: v.copy_(t), lambda: t.__dlpack__(), lambda: np.from_dlpack(t), lambda: t.to("cpu"),
               lambda: t.data_ptr(), lambda: gpucore.from_dlpack(t)):
        with pytest.raises(gpucore.InvalidHandleError) as e:
            op()
        assert "freed" in str(e.value)
    assert v.numpy().tolist() == [1.0, 1.0]   # views keep the memory


def test_closed_context_objects():
    c = gpucore.Context("cpu")
    t = c.ones((4,))
    s = c.stream()
    ev = c.event().record()
    a = np.zeros(4, np.float32)
    w = gpucore.from_numpy(a, device=c)
    c.close()
    for op in (lambda: t.numpy(), lambda: t.fill_(0), lambda: w.fill_(1), lambda: s.synchronize(),
               lambda: ev.query(), lambda: c.synchronize(), lambda: c.empty((2,)), lambda: c.stream(),
               lambda: s.__enter__()):
        with pytest.raises(gpucore.InvalidHandleError) as e:
            op()
        assert "closed" in str(e.value) or "destroyed" in str(e.value)
    del t, s, ev, w
    gc.collect()
    a[:] = 1.0   # the array was released by the deleter, and is still ours
    assert a.sum() == 4.0


def test_garbage_collected_handles_do_not_leak_owners(ctx):
    from gpucore import _runtime
    before = _runtime.live_owner_count()
    for _ in range(50):
        x = gpucore.from_numpy(np.zeros(10, np.float32), device=ctx)
        y = x[2:5].unsqueeze(0)
        del x, y
    gc.collect()
    assert _runtime.live_owner_count() == before


def test_wrong_kinds_of_argument_get_the_binding_message(ctx):
    # arguments of the wrong kind are refused in the user's words, not with an attribute error from
    # inside the binding
    with pytest.raises(gpucore.InvalidArgumentError, match="fp8_to_float32: dtype must be float8_e4m3 or float8_e5m2"):
        gpucore.fp8_to_float32(np.zeros(3, np.uint8), gpucore.float32)
    with pytest.raises(gpucore.InvalidArgumentError, match="unknown dtype name"):
        gpucore.fp8_to_float32(np.zeros(3, np.uint8), "e9m9")
    np.testing.assert_array_equal(gpucore.fp8_to_float32(np.array([0x38, 0xb8], np.uint8), "float8_e4m3"), [1.0, -1.0])
    with pytest.raises(gpucore.InvalidArgumentTypeError, match="unique_id: ctx must be a gpucore.Context, not tuple"):
        gpucore.unique_id((1, 2))
    with pytest.raises(TypeError, match="error_for_status: status must be an int"):
        gpucore.error_for_status("3", "x")
    dy, x, w = ctx.rand((1, 2, 4, 4)), ctx.rand((1, 3, 4, 4)), ctx.rand((2, 3, 1, 1))
    with pytest.raises(gpucore.InvalidArgumentTypeError, match=r"weight_shape\[0\] must be an integer, not Tensor"):
        gpucore.conv2d_backward_filter(dy, x, w)
    with pytest.raises(gpucore.InvalidArgumentError, match=r"input_shape\[1\]"):
        gpucore.conv2d_backward_data(dy, w, (1, -3, 4, 4))
    assert gpucore.conv2d_backward_filter(dy, x, (2, 3, 1, 1)).shape == (2, 3, 1, 1)

    class Long:  # a long sequence given as a shape (a big tensor, say) is refused by its length
        def __len__(self):
            return 1 << 40

        def __iter__(self):
            raise AssertionError("the shape was iterated")

    with pytest.raises(gpucore.InvalidArgumentError, match="shape has 1099511627776 dims; at most 8"):
        ctx.empty(Long())
    with pytest.raises(gpucore.InvalidArgumentError, match="has 9 dims"):
        ctx.empty(range(9))
