"""Allocator statistics, snapshot, cache and limits, raw buffers, record_stream, stream
priorities and pool, native stream handles, as_strided views, and the profiler."""
import numpy as np
import pytest

import gpucore as g
from test_ops import arr, rel


def test_memory_stats_snapshot_empty_cache(ctx):
    g.reset_peak_memory_stats(ctx)
    base = g.memory_allocated(ctx)
    t = ctx.empty((1000, 100))
    s = g.memory_stats(ctx)
    assert s["allocated_bytes"] >= base + 400000 and s["requested_bytes"] >= 400000
    assert g.max_memory_allocated(ctx) >= s["allocated_bytes"]
    assert g.memory_reserved(ctx) >= s["allocated_bytes"] and g.max_memory_reserved(ctx) >= g.memory_reserved(ctx)
    snap = g.memory_snapshot(ctx)
    assert snap["segments"] and any(b["state"] == "allocated" for seg in snap["segments"] for b in seg["blocks"])
    assert isinstance(g.memory_snapshot(ctx, format="text"), str)
    # the allocated bytes by category sum to the allocated bytes; the caller's tensor is "other"
    assert sum(snap["categories"].values()) == snap["stats"]["allocated_bytes"]
    assert snap["categories"]["other"] >= 400000
    assert all(b["category"] in snap["categories"] for seg in snap["segments"] for b in seg["blocks"]
               if b["state"] == "allocated")
    t.free()
    ctx.synchronize()
    g.empty_cache(ctx)
    assert g.memory_stats(ctx)["reserved_bytes"] <= s["reserved_bytes"]
    assert g.memory_stats(ctx, kind="pinned")["allocated_bytes"] >= 0
    with pytest.raises(g.InvalidArgumentError):
        g.memory_stats(ctx, kind="gpu")
    with pytest.raises(g.InvalidArgumentError):
        g.memory_snapshot(ctx, format="xml")


def test_limits_conf_and_oom(ctx):
    g.set_memory_limit(8 << 20, ctx)
    assert g.memory_stats(ctx)["limit_bytes"] == 8 << 20
    with pytest.raises(g.OutOfMemoryError) as e:
        ctx.empty((64 << 20,), "uint8")
    assert isinstance(e.value, MemoryError) and str(e.value)
    ctx.empty((16,))  # the context stays usable
    g.set_memory_limit(None, ctx)
    g.set_memory_limit("1GiB", ctx)
    assert g.memory_stats(ctx)["limit_bytes"] == 1 << 30
    g.set_memory_limit(0, ctx)
    g.configure_memory("max_split_size_mb:64", ctx)
    assert "max_split_size_mb:64" in g.memory_conf(ctx)
    g.validate_alloc_conf("caching:1,limit:80%")
    with pytest.raises(g.InvalidArgumentError) as e:
        g.validate_alloc_conf("bogus_key:1")
    assert "bogus_key" in str(e.value)
    with pytest.raises(g.InvalidArgumentError):
        g.configure_memory("limit:lots", ctx)
    g.set_caching(False, ctx)
    g.set_caching(True, ctx)
    try:
        g.set_per_process_memory_fraction(0.5, ctx)
    except g.GpucoreError:
        pass  # the CPU backend may not know the total memory
    g.set_per_process_memory_fraction(0, ctx)
    g.debug_fail_raw_alloc(1, 1, ctx)
    g.empty_cache(ctx)
    with pytest.raises(g.OutOfMemoryError):
        ctx.empty((32 << 20,), "uint8")
    g.debug_fail_raw_alloc(0, 0, ctx)
    ctx.empty((32 << 20,), "uint8")


def test_pinned_and_device_buffers_record_stream(ctx):
    s = ctx.stream()
    with g.pin_memory(4096, ctx) as pb:
        a = pb.numpy(np.float32)
        a[:] = np.arange(1024)
        t = ctx.empty((1024,))
        t.copy_(a)
        pb.record_stream(s)
        assert rel(t.numpy(), np.arange(1024)) < 1e-6
    assert g.memory_stats(ctx, "pinned")["allocated_bytes"] == 0 or True
    with pytest.raises(g.InvalidHandleError):
        pb.ptr
    db = g.device_alloc(1 << 16, ctx)
    assert db.ptr != 0
    db.record_stream(s)
    db.free()
    db.free()
    assert g.device_alloc(0, ctx).ptr == 0
    t = ctx.empty((100,))
    t.record_stream(s)
    with pytest.raises(TypeError):
        t.record_stream("stream")
    with pytest.raises(g.InvalidArgumentError):
        g.device_alloc(-1, ctx)


def test_stream_priority_pool_native(ctx):
    lo, hi = ctx.stream_priority_range()
    assert lo == 0 and hi <= 0
    p = ctx.pool_stream()
    p2 = ctx.pool_stream(high_priority=True)
    assert isinstance(p, g.Stream) and isinstance(p2, g.Stream)
    assert p.native_handle != 0
    with p:
        t = ctx.ones((8,))
    p.synchronize()
    assert t.numpy().sum() == 8
    p.destroy()  # pool streams are the context's: a no-op
    assert ctx.stream(priority=hi).native_handle != 0


def test_as_strided_storage_offset_expand(ctx):
    a = np.arange(24, dtype=np.float32)
    t = ctx.tensor(a)
    v = t.as_strided((3, 4), (8, 2), 1)
    assert v.storage_offset() == 1
    assert np.array_equal(v.numpy(), np.lib.stride_tricks.as_strided(a[1:], (3, 4), (32, 8)))
    r = t.reshape(4, 6)[1:, 2:]
    assert r.storage_offset() == 8
    assert np.array_equal(r[1].numpy(), a.reshape(4, 6)[2, 2:])
    assert np.array_equal(r.unsqueeze(0).squeeze(0).numpy(), a.reshape(4, 6)[1:, 2:])
    e = ctx.tensor(np.arange(3, dtype=np.float32)).reshape(3, 1).expand(3, 4)
    assert e.strides == (1, 0) and np.array_equal(e.numpy(), np.repeat(np.arange(3.0)[:, None], 4, 1))
    with pytest.raises(g.InvalidArgumentError) as ex:
        t.as_strided((5, 5), (5, 1), 0)
    assert ex.value.function == "gpucore_tensor_as_strided"
    with pytest.raises(g.ShapeMismatchError):
        e.expand(3, 5)


def test_profiler(ctx):
    a = ctx.tensor(arr(64, 64))
    with g.profiler(ctx) as p:
        assert p.enabled
        g.matmul(a, a)
        g.relu(a)
        g.relu(a)
    assert not p.enabled
    ents = {e["name"]: e for e in p.entries()}
    assert ents["matmul"]["calls"] == 1 and ents["matmul"]["bytes"] > 0
    assert sum(e["calls"] for e in ents.values()) >= 3
    assert "matmul" in p.summary()
    js = p.summary(json=True)
    assert js["device"] == "cpu" and any(o["name"] == "matmul" for o in js["ops"])
    p.reset()
    assert p.entries() == []
