"""``gpucore.cuda``: torch.cuda's two questions with plain answers.

``gpucore.cuda.is_available()`` is a bool and ``gpucore.cuda.device_count()`` an int (0 where the
CUDA backend is absent or cannot run); :func:`gpucore.backend_status` says why it is unavailable.
"""
from __future__ import annotations

from . import device as _device

__all__ = ["is_available", "device_count"]


def is_available() -> bool:
    """Whether the CUDA backend can run here (a driver, a device and the backend module)."""
    return _device.backend_available(_device.DeviceType.CUDA)


def device_count() -> int:
    """The number of CUDA devices gpucore can use (0 when CUDA is unavailable)."""
    return _device.device_count(_device.DeviceType.CUDA) if is_available() else 0
