"""gpucore — Python binding of libgpucore (ctypes; no compiler needed).

Quick start::

    import numpy as np, gpucore
    ctx = gpucore.Context("cpu")            # or "cuda", "cuda:1", None (GPUCORE_DEVICE / auto)
    x = ctx.empty((2, 3)).uniform_(seed=1)  # Philox: same numbers on every backend
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = gpucore.from_numpy(a)               # shares a's memory (CPU)
    t[0].fill_(7); t.context.synchronize()  # ops are asynchronous on the current stream
    assert a[0, 0] == 7
    y = np.from_dlpack(x)                   # zero-copy to numpy; also torch/cupy/jax

The library is loaded from ``$GPUCORE_LIBRARY``, else ``libgpucore.so`` next to this
package, else the system library path. Every C function is declared once in
``gpucore._lib.DECLARATIONS``; the raw ctypes calls are ``gpucore.C.gpucore_*``
(status-returning ones raise :class:`GpucoreError` subclasses carrying the library's
message). Main types: :class:`Context`, :class:`Stream`, :class:`Event`,
:class:`Tensor`, :class:`DType`.

PyTorch habits: ``a @ b``; comparisons return 1.0/0.0 masks of the operands' dtype; ``bool``/
``float``/``int`` of one element; ``t.t()``, ``**``, ``max``/``min``, ``arange``, ``stack``,
``ones_like``/``full_like`` (gpucore.ops_compose; ``where`` refuses); ``t.to(dtype | device |
tensor)``; sizes as varargs (``gpucore.randn(16, 8)``); ``numel()``/``data_ptr()``/
``is_contiguous()`` methods; ``gpucore.cuda.is_available()``; mixed float dtypes promote.

Ops (no autograd; every backward is its own function): elementwise math and
activations (``add``, ``relu``, ``gelu``, ...), reductions (``sum``, ``mean``, ...),
``softmax``, ``layer_norm``, ``rms_norm``, ``cross_entropy``, ``embedding``,
``matmul``, ``linear``, ``conv2d`` (gpucore.ops, gpucore.nn); transformer ops with PyTorch's
names: ``scaled_dot_product_attention`` (+ ``_backward``), ``rotary_embedding``, ``swiglu``/``glu``,
``residual_norm`` (gpucore.transformer). Training:
``AdamW``/``SGD`` (f32 master weights for bf16/f16 params), ``LossScaler``,
``clip_grad_norm_``, ``save_checkpoint``/``load_checkpoint``, safetensors
``save_file``/``load_file``, ``CheckpointExecutor`` (activation checkpointing with
Python-defined segments), ``Communicator``/``DDPReducer``. Language models from Hugging Face
folders (GPT-2, Llama, Mistral, Qwen2: logits, generation, LoRA in PEFT's format, fine-tuning) and
token-file datasets: ``gpucore.models``. Memory: ``memory_stats``,
``max_memory_allocated``, ``memory_snapshot``, ``empty_cache``, ``profiler``.
"""
from __future__ import annotations

from ._lib import C, DECLARATIONS, library_path, last_error, status_string
from .errors import *  # noqa: F401,F403  (the exception hierarchy)
from .errors import __all__ as _errors_all
from .dtypes import (DType, float32, float64, float16, bfloat16, int32, int64, uint8, float8_e4m3,
                     float8_e5m2, as_dtype, all_dtypes, bf16_to_float32, float32_to_bf16, fp8_to_float32)
from .device import (DeviceType, LogLevel, DeviceProperties, device_count, backend_available,
                     device_properties, devices, device_processes, can_access_peer, component_version,
                     versions, version, version_string, get_log_level, set_log_level, set_log_callback)
from .context import Context, Stream, Event, Timer, get_context, default_context
from .tensor import (Tensor, empty, zeros, ones, full, tensor, from_numpy, rand, randn, empty_like,
                     zeros_like, ones_like, full_like, manual_seed, IndexOutOfRangeError)
from .interop import from_dlpack, to_dlpack, cuda_array_interface
from . import ops, nn, memory, optim, serialization, distributed, checkpoint, zero, pipeline
from .ops import *  # noqa: F401,F403  (elementwise, activations, reductions, row ops)
from .ops import __all__ as _ops_all
from .nn import *  # noqa: F401,F403  (matmul, linear, conv)
from .nn import __all__ as _nn_all
from . import ops_compose
from . import quant
from .quant import QUANT_FORMATS, QUANT_DOUBLE, quant_size, quantize, dequantize, QWeight, qlinear, qlinear_backward_data
from .ops_compose import *  # noqa: F401,F403  (comparisons, pow, max/min, arange, stack, where, all/any)
from .ops_compose import __all__ as _compose_all
from . import cuda
from .device import backend_status
from .memory import *  # noqa: F401,F403  (allocator statistics, buffers, profiler)
from .memory import __all__ as _memory_all
from .optim import SGD, AdamW, Optimizer, LossScaler, clip_grad_norm_
from .serialization import (save_file, load_file, SafetensorsFile, safe_open, save_checkpoint,
                            load_checkpoint)
from .distributed import Communicator, DDPReducer, unique_id, comm_group
from .zero import ZeroTrainer
from .pipeline import Pipeline
from .checkpoint import CheckpointExecutor, CheckpointCall
from . import transformer
from . import gguf
from . import models
from . import text
from .text import Tokenizer, chat_template
from .transformer import (AttentionOptions, attention_stats, scaled_dot_product_attention,
                          scaled_dot_product_attention_backward, rotary_embedding, rotary_embedding_backward,
                          glu, glu_backward, swiglu, swiglu_backward, residual_norm, residual_norm_backward)

__version__ = version_string()

__all__ = list(_errors_all) + [
    "C", "DECLARATIONS", "library_path", "last_error", "status_string",
    "DType", "float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8", "float8_e4m3",
    "float8_e5m2", "as_dtype", "all_dtypes", "bf16_to_float32", "float32_to_bf16", "fp8_to_float32",
    "DeviceType", "LogLevel", "DeviceProperties", "device_count", "backend_available", "device_properties",
    "devices", "device_processes", "can_access_peer", "component_version", "versions", "version",
    "version_string", "get_log_level", "set_log_level", "set_log_callback",
    "Context", "Stream", "Event", "Timer", "get_context", "default_context",
    "Tensor", "empty", "zeros", "ones", "full", "tensor", "from_numpy", "rand", "randn", "empty_like",
    "zeros_like", "ones_like", "full_like", "manual_seed", "IndexOutOfRangeError", "ops_compose", "cuda",
    "quant", "QUANT_FORMATS", "QUANT_DOUBLE", "quant_size", "quantize", "dequantize", "QWeight", "qlinear",
    "qlinear_backward_data",
    "backend_status", "from_dlpack", "to_dlpack", "cuda_array_interface",
    "ops", "nn", "memory", "optim", "serialization", "distributed", "checkpoint",
    "SGD", "AdamW", "Optimizer", "LossScaler", "clip_grad_norm_", "save_file", "load_file", "SafetensorsFile",
    "safe_open", "save_checkpoint", "load_checkpoint", "Communicator", "DDPReducer", "unique_id", "comm_group",
    "zero", "ZeroTrainer", "pipeline", "Pipeline",
    "CheckpointExecutor", "CheckpointCall",
    "transformer", "gguf", "models", "AttentionOptions", "attention_stats", "scaled_dot_product_attention",
    "scaled_dot_product_attention_backward",
    "rotary_embedding", "rotary_embedding_backward", "glu", "glu_backward", "swiglu", "swiglu_backward",
    "residual_norm", "residual_norm_backward", "text", "Tokenizer", "chat_template",
] + [n for n in _ops_all + _nn_all + _memory_all + _compose_all if n not in ("Number", "TensorOrNumber", "IntPair")]
