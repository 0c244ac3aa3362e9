"""The exception hierarchy of the gpucore Python binding.

Every non-zero ``gpucore_status`` returned by the C library becomes an exception
whose message is the library's own ``gpucore_last_error()`` text. Each class also
derives from the builtin exception a Python user would naturally catch
(``ValueError`` for bad values, ``TypeError`` for bad dtypes, ``MemoryError`` for
out-of-memory, ...), so generic handlers keep working.

Errors the binding detects itself before calling C (a wrong Python type, a
negative size, a freed tensor) use the same classes and say what was wrong.
"""
from __future__ import annotations

from typing import Dict, Optional, Type

__all__ = [
    "GpucoreError", "InvalidArgumentError", "InvalidArgumentTypeError", "NullPointerError",
    "InvalidHandleError", "ShapeMismatchError", "DtypeMismatchError", "DeviceMismatchError",
    "SizeOverflowError", "OutOfMemoryError", "NotSupportedError", "BackendUnavailableError",
    "BackendError", "NotContiguousError", "NotReadyError", "CommError", "FileIOError",
    "CorruptFileError", "GpucoreTimeoutError", "InternalError", "error_for_status",
]

# Status codes of include/gpucore.h (gpucore_status).
OK = 0
ERR_INVALID_ARGUMENT = 1
ERR_NULL_POINTER = 2
ERR_INVALID_HANDLE = 3
ERR_SHAPE_MISMATCH = 4
ERR_DTYPE_MISMATCH = 5
ERR_DEVICE_MISMATCH = 6
ERR_OVERFLOW = 7
ERR_OUT_OF_MEMORY = 8
ERR_NOT_SUPPORTED = 9
ERR_BACKEND_UNAVAILABLE = 10
ERR_BACKEND = 11
ERR_NOT_CONTIGUOUS = 12
ERR_NOT_READY = 13
ERR_COMM = 14
ERR_IO = 15
ERR_CORRUPT_FILE = 16
ERR_TIMEOUT = 17
ERR_INTERNAL = 18


class GpucoreError(RuntimeError):
    """Base class of every error raised by gpucore.

    Attributes:
        status: the ``gpucore_status`` code (an int; 0 never appears here).
        status_name: its name, e.g. ``"GPUCORE_ERR_SHAPE_MISMATCH"``.
        message: the library's message (``gpucore_last_error()``) or the binding's own.
        function: the C function that failed, or ``None`` when the binding itself refused.
    """

    status_code: int = ERR_INTERNAL

    def __init__(self, message: str, status: Optional[int] = None, status_name: Optional[str] = None,
                 function: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = self.status_code if status is None else status
        self.status_name = status_name or _STATUS_NAMES.get(self.status, "GPUCORE_ERR_%d" % self.status)
        self.function = function


class InvalidArgumentError(GpucoreError, ValueError):
    """A value is out of its documented range (GPUCORE_ERR_INVALID_ARGUMENT)."""
    status_code = ERR_INVALID_ARGUMENT


class InvalidArgumentTypeError(InvalidArgumentError, TypeError):
    """An argument has the wrong Python type (detected by the binding)."""


class NullPointerError(InvalidArgumentError, TypeError):
    """A required object was missing / None (GPUCORE_ERR_NULL_POINTER)."""
    status_code = ERR_NULL_POINTER


class InvalidHandleError(GpucoreError, ValueError):
    """A tensor, stream, event or context that was freed, or whose context was closed."""
    status_code = ERR_INVALID_HANDLE


class ShapeMismatchError(GpucoreError, ValueError):
    """Shapes that must agree do not (GPUCORE_ERR_SHAPE_MISMATCH)."""
    status_code = ERR_SHAPE_MISMATCH


class DtypeMismatchError(GpucoreError, TypeError):
    """Dtypes that must agree do not, or a dtype the call does not take."""
    status_code = ERR_DTYPE_MISMATCH


class DeviceMismatchError(GpucoreError, ValueError):
    """Tensors or streams from different devices / contexts in one call."""
    status_code = ERR_DEVICE_MISMATCH


class SizeOverflowError(GpucoreError, OverflowError):
    """A size whose byte count does not fit in int64 (GPUCORE_ERR_OVERFLOW)."""
    status_code = ERR_OVERFLOW


class OutOfMemoryError(GpucoreError, MemoryError):
    """The device (or host) allocation failed (GPUCORE_ERR_OUT_OF_MEMORY)."""
    status_code = ERR_OUT_OF_MEMORY


class NotSupportedError(GpucoreError, NotImplementedError):
    """Valid, but this build or device cannot do it (GPUCORE_ERR_NOT_SUPPORTED)."""
    status_code = ERR_NOT_SUPPORTED


class BackendUnavailableError(GpucoreError):
    """The requested backend cannot be used here; the message says why."""
    status_code = ERR_BACKEND_UNAVAILABLE


class BackendError(GpucoreError):
    """The CUDA runtime / cuBLAS / cuDNN reported an error (GPUCORE_ERR_BACKEND)."""
    status_code = ERR_BACKEND


class NotContiguousError(GpucoreError, ValueError):
    """The call needs a contiguous tensor (GPUCORE_ERR_NOT_CONTIGUOUS)."""
    status_code = ERR_NOT_CONTIGUOUS


class NotReadyError(GpucoreError):
    """Work is still pending (GPUCORE_ERR_NOT_READY); queries return False instead."""
    status_code = ERR_NOT_READY


class CommError(GpucoreError):
    """A collective failed or timed out (GPUCORE_ERR_COMM)."""
    status_code = ERR_COMM


class FileIOError(GpucoreError):
    """Reading or writing a file failed (GPUCORE_ERR_IO)."""
    status_code = ERR_IO


class CorruptFileError(GpucoreError, ValueError):
    """A file's content is inconsistent (GPUCORE_ERR_CORRUPT_FILE)."""
    status_code = ERR_CORRUPT_FILE


class GpucoreTimeoutError(GpucoreError):
    """A wait ran past its limit (GPUCORE_ERR_TIMEOUT)."""
    status_code = ERR_TIMEOUT


class InternalError(GpucoreError):
    """A bug in libgpucore (GPUCORE_ERR_INTERNAL): please report it."""
    status_code = ERR_INTERNAL


_STATUS_NAMES: Dict[int, str] = {
    0: "GPUCORE_OK", 1: "GPUCORE_ERR_INVALID_ARGUMENT", 2: "GPUCORE_ERR_NULL_POINTER",
    3: "GPUCORE_ERR_INVALID_HANDLE", 4: "GPUCORE_ERR_SHAPE_MISMATCH", 5: "GPUCORE_ERR_DTYPE_MISMATCH",
    6: "GPUCORE_ERR_DEVICE_MISMATCH", 7: "GPUCORE_ERR_OVERFLOW", 8: "GPUCORE_ERR_OUT_OF_MEMORY",
    9: "GPUCORE_ERR_NOT_SUPPORTED", 10: "GPUCORE_ERR_BACKEND_UNAVAILABLE", 11: "GPUCORE_ERR_BACKEND",
    12: "GPUCORE_ERR_NOT_CONTIGUOUS", 13: "GPUCORE_ERR_NOT_READY", 14: "GPUCORE_ERR_COMM",
    15: "GPUCORE_ERR_IO", 16: "GPUCORE_ERR_CORRUPT_FILE", 17: "GPUCORE_ERR_TIMEOUT",
    18: "GPUCORE_ERR_INTERNAL",
}

_BY_STATUS: Dict[int, Type[GpucoreError]] = {
    ERR_INVALID_ARGUMENT: InvalidArgumentError, ERR_NULL_POINTER: NullPointerError,
    ERR_INVALID_HANDLE: InvalidHandleError, ERR_SHAPE_MISMATCH: ShapeMismatchError,
    ERR_DTYPE_MISMATCH: DtypeMismatchError, ERR_DEVICE_MISMATCH: DeviceMismatchError,
    ERR_OVERFLOW: SizeOverflowError, ERR_OUT_OF_MEMORY: OutOfMemoryError,
    ERR_NOT_SUPPORTED: NotSupportedError, ERR_BACKEND_UNAVAILABLE: BackendUnavailableError,
    ERR_BACKEND: BackendError, ERR_NOT_CONTIGUOUS: NotContiguousError, ERR_NOT_READY: NotReadyError,
    ERR_COMM: CommError, ERR_IO: FileIOError, ERR_CORRUPT_FILE: CorruptFileError,
    ERR_TIMEOUT: GpucoreTimeoutError, ERR_INTERNAL: InternalError,
}


def error_for_status(status: int, message: str, status_name: Optional[str] = None,
                     function: Optional[str] = None) -> GpucoreError:
    """The exception object for a non-zero status code (unknown codes give GpucoreError)."""
    if not isinstance(status, int) or isinstance(status, bool):
        raise TypeError("error_for_status: status must be an int (a gpucore_status code), not %s" % type(status).__name__)
    cls = _BY_STATUS.get(status, GpucoreError)
    return cls(message, status=status, status_name=status_name, function=function)
