"""Asynchronous errors and Context.synchronize's shortcut: an error raised by queued work
(gpucore.debug_fail_async stands in for a faulting kernel) is raised by the next synchronize
of its stream or context, once, and leaves the context usable; on the CPU backend (x86-64)
Context.synchronize reads the context's pending word and skips the C call only when there is
nothing to wait for and no error to report."""
import platform
import threading

import numpy as np
import pytest

import gpucore as g
from gpucore import context as context_module

BIG = 1 << 22  # floats: a normal fill of this many takes milliseconds, so it is still queued


@pytest.fixture
def counted(monkeypatch):
    """Count the C context-synchronize calls that Context.synchronize makes."""
    calls = []
    real = context_module._fast_context_synchronize

    def counting(hp):
        calls.append(hp)
        return real(hp)

    monkeypatch.setattr(context_module, "_fast_context_synchronize", counting)
    return calls


def test_error_is_raised_once_by_the_stream(ctx):
    s = g.Stream(ctx)
    g.debug_fail_async(g.BackendError, stream=s, device=ctx)
    with pytest.raises(g.BackendError, match="asynchronous"):
        s.synchronize()
    s.synchronize()
    ctx.synchronize()


def test_error_is_raised_once_by_the_context_behind_queued_work(ctx, counted):
    s, other = g.Stream(ctx), g.Stream(ctx)
    a = g.empty(BIG, device=ctx)
    for k in range(3):
        a.normal_(seed=k, stream=other)
    g.debug_fail_async(g.OutOfMemoryError, stream=s)
    g.debug_fail_async(g.InternalError, stream=s)  # only the first failure is kept
    with pytest.raises(g.OutOfMemoryError):
        ctx.synchronize()
    assert other.query()  # the context waited for the fills on the other stream
    ctx.synchronize()
    s.synchronize()
    assert len(counted) >= 1
    # still usable: work after a failure runs and its result is right
    g.debug_fail_async(g.BackendError, stream=s)
    a.fill_(3.0, stream=s)
    with pytest.raises(g.BackendError):
        ctx.synchronize()
    assert np.all(a.numpy() == 3.0)
    a.fill_(5.0)
    assert np.all(a.numpy() == 5.0)


def test_bad_arguments(ctx):
    with pytest.raises(g.InvalidArgumentError, match="not an error code"):
        g.debug_fail_async(0, device=ctx)
    with pytest.raises(g.InvalidArgumentError, match="not an error code"):
        g.debug_fail_async(g.NotReadyError, device=ctx)
    with pytest.raises(TypeError, match="gpucore.Stream"):
        g.debug_fail_async(g.BackendError, stream="s")
    ctx.synchronize()  # nothing was queued


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                    reason="the shortcut reads the pending word only where loads acquire (x86-64)")
def test_synchronize_skips_the_call_only_when_idle(ctx, counted):
    assert ctx._idle is not None  # the CPU context gave its word
    ctx.synchronize()
    ctx.synchronize()
    assert counted == []  # idle: answered from the word
    x = g.ones(16, device=ctx)
    (x + x).numpy()  # a small op on an idle stream runs inline; nothing stays counted
    assert counted == []
    # queued work: the call is made, and it waits
    s = g.Stream(ctx)
    a = g.empty(BIG, device=ctx)
    for k in range(4):
        a.normal_(seed=k, stream=s)
    a.fill_(7.0, stream=s)
    ctx.synchronize()
    assert len(counted) == 1
    assert s.query()
    assert np.all(a.numpy() == 7.0)
    # an error waiting to be reported: the call is made, and raises
    g.debug_fail_async(g.BackendError, stream=s)
    while not s.query():
        pass
    with pytest.raises(g.BackendError):
        ctx.synchronize()
    assert len(counted) == 2
    ctx.synchronize()
    assert len(counted) == 2


def test_numpy_sees_queued_results(ctx):
    """numpy() synchronizes through the shortcut: results of work queued on the current stream
    are there when it returns, every time."""
    a = g.empty(BIG, device=ctx)
    for rep in range(5):
        a.normal_(seed=rep)
        a.fill_(float(rep))
        v = a.numpy()
        assert v[0] == rep and v[-1] == rep


def test_threads_synchronizing_one_context(ctx):
    errors = []

    def work(value):
        try:
            s = g.Stream(ctx)
            with s:
                t = g.empty(BIG // 4, device=ctx)
                for rep in range(10):
                    t.normal_(seed=rep)
                    t.fill_(value + rep)
                    s.synchronize()
                    ctx.synchronize()
                    v = t.numpy()
                    if not (v[0] == value + rep and v[-1] == value + rep):
                        errors.append((value, rep, v[0]))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(100 * i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_closed_context_still_raises(ctx):
    ctx.synchronize()
    ctx.close()
    assert ctx._idle is None
    with pytest.raises(g.InvalidHandleError, match="closed"):
        ctx.synchronize()
