"""Dropped small results give their handles back in batches (one C call per batch): the memory
statistics, a memory limit, a context close and threads all see them as freed, and large
results still go at once."""
import sys

import numpy as np
import pytest

import gpucore as g
from test_fast_paths import errors_from_threads

_tensor_module = sys.modules["gpucore.tensor"]


def _small(ctx):
    return g.tensor(np.arange(16, dtype="float32"), device=ctx)


def test_small_results_wait_and_count_as_freed(ctx):
    a = _small(ctx)
    base = g.memory_allocated(ctx)
    r = g.add(a, a)
    assert r._batch
    del r
    assert len(ctx._release) == 1  # waiting, not yet given back
    assert g.memory_allocated(ctx) == base  # the statistics give it back first
    assert not ctx._release


def test_a_full_batch_goes_in_one_call(ctx):
    a = _small(ctx)
    g.memory_allocated(ctx)
    for _ in range(_tensor_module._RELEASE_BATCH * 3 + 5):
        g.mul(a, 2.0)
    assert len(ctx._release) < _tensor_module._RELEASE_BATCH


def test_large_results_go_at_once(ctx):
    n = _tensor_module._RELEASE_BATCH_MAX_ELEMENTS + 1
    a = g.tensor(np.ones(n, dtype="float32"), device=ctx)
    r = g.add(a, a)
    assert not r._batch
    del r
    assert not ctx._release


def test_views_and_foreign_tensors_go_at_once(ctx):
    a = _small(ctx)
    v = a.reshape(4, 4)
    assert not v._batch
    del v
    assert not ctx._release


def test_out_of_memory_gives_the_batch_back_and_retries():
    # a context under a memory limit, filled to a few results short of it: the batch of dropped
    # results waiting would pass the limit, so the loop below runs only because a failed
    # allocation gives the batch back and tries again
    c = g.Context("cpu")
    try:
        n = _tensor_module._RELEASE_BATCH_MAX_ELEMENTS
        a = g.tensor(np.ones(n, dtype="float32"), device=c)
        g.set_memory_limit(1 << 20, c)
        held = []
        with pytest.raises(g.OutOfMemoryError):
            while True:
                held.append(g.add(a, a))
        assert len(held) > 16
        del held[-8:]
        g.memory_allocated(c)  # gives those back: 8 results of room
        assert not c._release
        for _ in range(4 * _tensor_module._RELEASE_BATCH):
            r = g.add(a, a)
            assert r._batch
        del r
        held.append(g.empty(n, device=c))  # the plain creation path retries too
    finally:
        g.set_memory_limit(None, c)
        c.close()


def test_threads_drop_results_concurrently(ctx):
    a = _small(ctx)
    base = g.memory_allocated(ctx)

    def step():
        for _ in range(2000):
            g.add(a, a)

    errors = errors_from_threads(step)
    assert not errors, errors
    assert g.memory_allocated(ctx) == base  # none lost, none given back twice


def test_close_gives_the_batch_back():
    c = g.Context("cpu")
    a = _small(c)
    r = g.add(a, a)
    del r
    assert c._release
    c.close()
    assert not c._release
    with pytest.raises(g.InvalidHandleError):
        g.add(a, a)
