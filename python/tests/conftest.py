"""Shared fixtures: a fresh CPU context per test, and a CUDA context that skips
with the library's reason where CUDA cannot run."""
import gc

import pytest

import gpucore


@pytest.fixture
def ctx():
    c = gpucore.Context("cpu")
    yield c
    gc.collect()
    c.close()


@pytest.fixture
def cuda_ctx():
    ok, why = gpucore.backend_status(gpucore.DeviceType.CUDA)
    if not ok:
        pytest.skip("CUDA backend unavailable: %s" % why)
    c = gpucore.Context("cuda")
    yield c
    gc.collect()
    c.close()
