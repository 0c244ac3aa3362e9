"""Loading libgpucore.so and the one table that declares its C functions.

Adding a C function to the binding is one line in ``DECLARATIONS``:
``"gpucore_name": (RESTYPE, [ARGTYPES...]),``. A RESTYPE of ``STATUS`` means the
function returns ``gpucore_status``: the wrapper in ``C`` raises the matching
exception (with ``gpucore_last_error()``) on any non-zero status. ``QUERY`` is the
same except that ``GPUCORE_ERR_NOT_READY`` is returned instead of raised. Any
other RESTYPE is a plain ctypes type returned as is.

The library is looked for, in order: ``$GPUCORE_LIBRARY``; ``libgpucore.so`` next to
this package (the package's own copy, which ``pip install .`` puts there);
``ctypes.util.find_library("gpucore")``; ``libgpucore.so.0`` on the system's library
path. A failure names every path tried.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from ctypes import (POINTER, c_char_p, c_double, c_float, c_int, c_int64, c_size_t, c_uint64,
                    c_void_p)
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from . import errors as _errors

__all__ = ["C", "lib", "library_path", "DECLARATIONS", "DeviceProperties", "STATUS", "QUERY",
           "LOG_FN", "DELETER_FN", "last_error", "status_string", "MemoryStats", "ProfileEntry",
           "MatmulOptions", "MatmulStats", "ConvOptions", "ConvStats", "OptimizerConfig", "LossScalerConfig", "DdpOptions",
           "DdpTraceEvent", "TokenDataOptions", "LmBackwardOptions", "LmLoadOptions", "TokenizerArrays", "ChatMessage", "CkptStats", "CKPT_FORWARD_FN", "CKPT_BACKWARD_FN", "CKPT_PACK_FN",
           "CKPT_UNPACK_FN", "CKPT_DISCARD_FN", "CKPT_SEGMENT_HOOK_FN", "CKPT_GRAD_READY_FN",
           "PIPELINE_LOSS_FN"]


class _StatusKind:
    """Marker restype for functions returning gpucore_status."""

    def __init__(self, name: str, allow_not_ready: bool) -> None:
        self.name = name
        self.allow_not_ready = allow_not_ready

    def __repr__(self) -> str:
        return self.name


STATUS = _StatusKind("STATUS", False)
QUERY = _StatusKind("QUERY", True)

H = c_void_p                 # every opaque handle (gpucore_context*, gpucore_tensor*, ...)
P_H = POINTER(c_void_p)      # gpucore_x **out
P_I64 = POINTER(c_int64)
P_INT = POINTER(c_int)
LOG_FN = ctypes.CFUNCTYPE(None, c_int, c_char_p, c_void_p)   # gpucore_log_fn
DELETER_FN = ctypes.CFUNCTYPE(None, c_void_p)                # tensor_wrap's deleter

GPUCORE_NAME_LEN = 256


class DeviceProperties(ctypes.Structure):
    """ctypes mirror of ``gpucore_device_properties`` (fields -1 where unknown)."""
    _fields_ = [
        ("struct_size", c_int64),
        ("name", ctypes.c_char * GPUCORE_NAME_LEN),
        ("type", ctypes.c_int32),
        ("index", ctypes.c_int32),
        ("compute_major", ctypes.c_int32),
        ("compute_minor", ctypes.c_int32),
        ("multiprocessors", ctypes.c_int32),
        ("warp_size", ctypes.c_int32),
        ("total_memory", c_int64),
        ("free_memory", c_int64),
        ("l2_cache_bytes", c_int64),
        ("shared_memory_per_block_optin", c_int64),
        ("clock_khz", ctypes.c_int32),
        ("memory_clock_khz", ctypes.c_int32),
        ("utilization_percent", ctypes.c_int32),
        ("temperature_c", ctypes.c_int32),
        ("has_native_code", ctypes.c_int32),
        ("has_ptx", ctypes.c_int32),
        ("pci_bus_id", ctypes.c_char * 32),
    ]


def _i64_fields(*names: str) -> List[Tuple[str, Any]]:
    return [(n, c_int64) for n in names]


class MemoryStats(ctypes.Structure):
    """ctypes mirror of ``gpucore_memory_stats``."""
    _fields_ = [("struct_size", c_int64)] + _i64_fields(
        "allocated_bytes", "allocated_bytes_peak", "allocated_blocks", "allocated_blocks_peak",
        "reserved_bytes", "reserved_bytes_peak", "reserved_segments", "reserved_segments_peak",
        "active_bytes", "active_bytes_peak", "active_blocks", "active_blocks_peak",
        "inactive_split_bytes", "inactive_split_bytes_peak", "inactive_split_blocks",
        "inactive_split_blocks_peak", "requested_bytes", "requested_bytes_peak", "num_raw_allocs",
        "num_raw_frees", "num_ooms", "num_alloc_retries", "limit_bytes")


class ProfileEntry(ctypes.Structure):
    """ctypes mirror of ``gpucore_profile_entry``."""
    _fields_ = [("struct_size", c_int64), ("name", ctypes.c_char * 64), ("calls", c_int64),
                ("bytes", c_int64), ("total_ms", c_double), ("min_ms", c_double), ("max_ms", c_double),
                ("timed_calls", c_int64)]


class MatmulOptions(ctypes.Structure):
    """ctypes mirror of ``gpucore_matmul_options``."""
    _fields_ = [("struct_size", c_int64), ("trans_a", ctypes.c_int32), ("trans_b", ctypes.c_int32),
                ("alpha", c_double), ("beta", c_double), ("c", c_void_p), ("epilogue", ctypes.c_int32),
                ("allow_tf32", ctypes.c_int32), ("bias", c_void_p), ("aux", c_void_p), ("bias_grad", c_void_p),
                ("scale_a", c_void_p), ("scale_b", c_void_p), ("amax_d", c_void_p)]


class ConvOptions(ctypes.Structure):
    """ctypes mirror of ``gpucore_conv_options``."""
    _fields_ = [("struct_size", c_int64), ("layout", ctypes.c_int32), ("algo", ctypes.c_int32)] + _i64_fields(
        "stride_h", "stride_w", "pad_h", "pad_w", "dil_h", "dil_w", "groups") + [
        ("padding_same", ctypes.c_int32), ("allow_tf32", ctypes.c_int32), ("activation", ctypes.c_int32),
        ("reserved", ctypes.c_int32), ("workspace_limit", c_int64)]


class MatmulStats(ctypes.Structure):
    """ctypes mirror of ``gpucore_matmul_stats``."""
    _fields_ = [("struct_size", c_int64), ("gemms", c_int64), ("fallback_gemms", c_int64),
                ("fallback_by_reason", c_int64 * 5)]  # GPUCORE_MATMUL_FALLBACK_REASONS


class ConvStats(ctypes.Structure):
    """ctypes mirror of ``gpucore_conv_stats``."""
    _fields_ = [("struct_size", c_int64)] + _i64_fields(
        "plans_cached", "plan_capacity", "cache_hits", "cache_misses", "evictions", "autotune_runs",
        "autotune_candidates") + [("autotune_ms", c_double), ("workspace_fallbacks", c_int64)]


class OptimizerConfig(ctypes.Structure):
    """ctypes mirror of ``gpucore_optimizer_config``."""
    _fields_ = [("struct_size", c_int64), ("kind", ctypes.c_int32), ("nesterov", ctypes.c_int32),
                ("lr", c_double), ("weight_decay", c_double), ("momentum", c_double), ("dampening", c_double),
                ("beta1", c_double), ("beta2", c_double), ("eps", c_double)]


class LossScalerConfig(ctypes.Structure):
    """ctypes mirror of ``gpucore_loss_scaler_config``."""
    _fields_ = [("struct_size", c_int64), ("init_scale", c_double), ("growth_factor", c_double),
                ("backoff_factor", c_double), ("growth_interval", c_int64)]


class DdpOptions(ctypes.Structure):
    """ctypes mirror of ``gpucore_ddp_options``."""
    _fields_ = [("struct_size", c_int64), ("first_bucket_bytes", c_int64), ("bucket_bytes", c_int64),
                ("wire_dtype", ctypes.c_int32), ("average", ctypes.c_int32), ("trace", ctypes.c_int32)]


class ZeroOptions(ctypes.Structure):
    """ctypes mirror of ``gpucore_zero_options``."""
    _fields_ = [("struct_size", c_int64), ("stage", ctypes.c_int32), ("average", ctypes.c_int32),
                ("bucket_bytes", c_int64), ("max_grad_norm", c_double), ("units", POINTER(ctypes.c_int32))]


class ZeroStats(ctypes.Structure):
    """ctypes mirror of ``gpucore_zero_stats``."""
    _fields_ = [("struct_size", c_int64), ("stage", ctypes.c_int32), ("rank", ctypes.c_int32),
                ("size", ctypes.c_int32), ("buckets", ctypes.c_int32)] + _i64_fields(
        "numel", "shard_numel", "param_bytes", "grad_bytes", "state_bytes", "live_grad_bytes", "gathered_bytes")


class DdpTraceEvent(ctypes.Structure):
    """ctypes mirror of ``gpucore_ddp_trace_event``."""
    _fields_ = [("kind", ctypes.c_int32), ("index", ctypes.c_int32), ("step", c_int64), ("time_ns", c_int64)]


class TokenDataOptions(ctypes.Structure):
    """ctypes mirror of ``gpucore_token_data_options``."""
    _fields_ = [("struct_size", c_int64), ("batch_size", c_int64), ("seq_len", c_int64), ("seed", c_uint64),
                ("shuffle", ctypes.c_int32), ("dtype", ctypes.c_int32), ("rank", ctypes.c_int32),
                ("world_size", ctypes.c_int32), ("vocab_size", c_int64), ("layout", ctypes.c_int32),
                ("reserved", ctypes.c_int32)]


class LmPlanOptions(ctypes.Structure):
    """ctypes mirror of ``gpucore_lm_plan_options``."""
    _fields_ = [("struct_size", c_int64), ("dtype", ctypes.c_int32), ("device_type", ctypes.c_int32),
                ("batch", c_int64), ("seq", c_int64), ("full_finetune", ctypes.c_int32), ("lora_r", c_int64),
                ("lora_targets", ctypes.POINTER(c_char_p)), ("n_lora_targets", c_int64), ("lora_dropout", c_double),
                ("ckpt_policy", ctypes.c_int32), ("ckpt_param", c_int64), ("optimizer", ctypes.c_int32),
                ("momentum", c_double), ("zero_stage", ctypes.c_int32), ("world_size", ctypes.c_int32),
                ("grad_accum", c_int64), ("quant_format", ctypes.c_int32), ("quant_block_size", c_int64),
                ("quant_flags", ctypes.c_int32), ("head_chunk_rows", c_int64), ("workspace_bytes", c_int64),
                ("memory_limit", c_int64)]


class LmMemoryPlan(ctypes.Structure):
    """ctypes mirror of ``gpucore_lm_memory_plan``."""
    _fields_ = [("struct_size", c_int64), ("peak_bytes", c_int64), ("bytes", c_int64 * 7),
                ("persistent_bytes", c_int64), ("phase", ctypes.c_int32), ("layer", c_int64),
                ("where", ctypes.c_char * 64), ("recomputed_segments", c_int64), ("segments", c_int64)]


class LmBackwardOptions(ctypes.Structure):
    """ctypes mirror of ``gpucore_lm_backward_options``."""
    _fields_ = [("struct_size", c_int64), ("accumulate", ctypes.c_int32), ("total_label_tokens", c_int64)]


class LmLoadOptions(ctypes.Structure):
    """ctypes mirror of ``gpucore_lm_load_options``."""
    _fields_ = [("struct_size", c_int64), ("dtype", ctypes.c_int32), ("quantize", ctypes.c_int32),
                ("block_size", c_int64)]


class TokenizerArrays(ctypes.Structure):
    """ctypes mirror of ``gpucore_tokenizer_arrays``."""
    _fields_ = [("n_tokens", c_int64), ("tokens", POINTER(c_char_p)), ("token_types", POINTER(ctypes.c_int32)),
                ("n_merges", c_int64), ("merges", POINTER(c_char_p)), ("pre", c_char_p),
                ("bos_id", ctypes.c_int32), ("eos_id", ctypes.c_int32), ("add_bos", c_int), ("add_eos", c_int)]


class ChatMessage(ctypes.Structure):
    """ctypes mirror of ``gpucore_chat_message``."""
    _fields_ = [("role", c_char_p), ("content", c_char_p)]


class CkptStats(ctypes.Structure):
    """ctypes mirror of ``gpucore_ckpt_stats``."""
    _fields_ = [("struct_size", c_int64)] + _i64_fields(
        "baseline_bytes", "peak_allocated_bytes", "held_bytes", "keep_all_bytes", "bytes_saved",
        "estimated_peak_bytes", "segments", "kept", "checkpoints", "recomputed", "recompute_runs",
        "packed_tensors", "unpacked_tensors", "offloaded_bytes")


# Checkpoint-executor callbacks (the status is returned as a plain int).
CKPT_FORWARD_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, P_H, c_void_p, c_void_p)
CKPT_BACKWARD_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p)
CKPT_PACK_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_void_p, P_H)
CKPT_UNPACK_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_void_p, P_H)
CKPT_DISCARD_FN = ctypes.CFUNCTYPE(None, c_void_p, c_void_p)
CKPT_SEGMENT_HOOK_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_int64, c_char_p, ctypes.c_int32, ctypes.c_int32)
CKPT_GRAD_READY_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_int64, c_char_p, ctypes.c_int32, c_void_p, c_void_p)
# gpucore_pipeline_loss_fn(user, micro_batch, y, dy, stream)
PIPELINE_LOSS_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_int64, c_void_p, c_void_p, c_void_p)
P_CHARP = POINTER(c_char_p)
P_U64 = POINTER(c_uint64)
I32 = ctypes.c_int32
P_I32 = POINTER(ctypes.c_int32)


# ---------------------------------------------------------------------------
# THE table: one line per C function of include/gpucore.h.
# ---------------------------------------------------------------------------
DECLARATIONS: Dict[str, Tuple[Any, List[Any]]] = {
    # version
    "gpucore_version": (c_int, []),
    "gpucore_version_string": (c_char_p, []),
    # status codes and errors
    "gpucore_status_string": (c_char_p, [c_int]),
    "gpucore_last_error": (c_char_p, []),
    "gpucore_clear_error": (None, []),
    # logging
    "gpucore_get_log_level": (c_int, []),
    "gpucore_set_log_level": (STATUS, [c_int]),
    "gpucore_set_log_callback": (None, [LOG_FN, c_void_p]),
    # devices
    "gpucore_device_count": (STATUS, [c_int, P_INT]),
    "gpucore_backend_available": (c_int, [c_int, c_char_p, c_size_t]),  # non-zero is an answer, not an error
    "gpucore_device_get_properties": (STATUS, [c_int, c_int, POINTER(DeviceProperties)]),
    "gpucore_device_get_processes": (STATUS, [c_int, P_I64, P_I64, c_int, P_INT]),
    "gpucore_device_can_access_peer": (STATUS, [c_int, c_int, P_INT]),
    "gpucore_component_version": (c_int, [c_char_p, c_char_p, c_size_t]),  # NOT_SUPPORTED means absent
    # context
    "gpucore_context_create": (STATUS, [c_char_p, P_H]),
    "gpucore_context_destroy": (STATUS, [H]),
    "gpucore_context_device": (STATUS, [H, P_INT, P_INT]),
    "gpucore_context_device_name": (c_char_p, [H]),
    "gpucore_context_id": (c_int64, [H]),
    "gpucore_context_synchronize": (STATUS, [H]),
    "gpucore_context_pending_word": (STATUS, [H, P_H]),  # NOT_SUPPORTED on CUDA: Context keeps None
    # streams and events
    "gpucore_context_default_stream": (STATUS, [H, P_H]),
    "gpucore_context_current_stream": (STATUS, [H, P_H]),
    "gpucore_context_set_current_stream": (STATUS, [H, H]),
    "gpucore_stream_create": (STATUS, [H, c_int, P_H]),
    "gpucore_stream_destroy": (STATUS, [H]),
    "gpucore_stream_synchronize": (STATUS, [H]),
    "gpucore_stream_query": (QUERY, [H]),
    "gpucore_event_create": (STATUS, [H, P_H]),
    "gpucore_event_destroy": (STATUS, [H]),
    "gpucore_event_record": (STATUS, [H, H]),
    "gpucore_stream_wait_event": (STATUS, [H, H]),
    "gpucore_event_synchronize": (STATUS, [H]),
    "gpucore_event_query": (QUERY, [H]),
    "gpucore_event_elapsed_ms": (STATUS, [H, H, POINTER(c_float)]),
    # tensors
    "gpucore_dtype_size": (c_int64, [c_int]),
    "gpucore_dtype_name": (c_char_p, [c_int]),
    "gpucore_enum_name": (c_char_p, [c_char_p, c_int]),
    "gpucore_tensor_create": (STATUS, [H, c_int, c_int, P_I64, P_H]),
    "gpucore_tensor_wrap": (STATUS, [H, c_int, c_int, P_I64, P_I64, c_void_p, DELETER_FN, c_void_p, P_H]),
    "gpucore_tensor_destroy": (STATUS, [H]),
    "gpucore_tensor_destroy_many": (STATUS, [P_H, c_int64]),
    "gpucore_tensor_ndim": (c_int, [H]),
    "gpucore_tensor_dtype": (c_int, [H]),
    "gpucore_tensor_shape": (STATUS, [H, P_I64]),
    "gpucore_tensor_strides": (STATUS, [H, P_I64]),
    "gpucore_tensor_numel": (c_int64, [H]),
    "gpucore_tensor_nbytes": (c_int64, [H]),
    "gpucore_tensor_is_contiguous": (c_int, [H]),
    "gpucore_tensor_data": (STATUS, [H, P_H]),
    "gpucore_tensor_context": (STATUS, [H, P_H]),
    "gpucore_tensor_slice": (STATUS, [H, c_int, c_int64, c_int64, c_int64, P_H]),
    "gpucore_tensor_reshape": (STATUS, [H, c_int, P_I64, P_H]),
    "gpucore_tensor_transpose": (STATUS, [H, c_int, c_int, P_H]),
    "gpucore_tensor_permute": (STATUS, [H, P_INT, P_H]),
    # copies
    "gpucore_copy_from_host": (STATUS, [H, c_void_p, c_int64]),
    "gpucore_copy_to_host": (STATUS, [c_void_p, c_int64, H]),
    "gpucore_copy_from_host_async": (STATUS, [H, c_void_p, c_int64, H]),
    "gpucore_copy_to_host_async": (STATUS, [c_void_p, c_int64, H, H]),
    "gpucore_copy": (STATUS, [H, H, H]),
    "gpucore_concat": (STATUS, [H, P_H, c_int, c_int, H]),
    # fill and random
    "gpucore_fill": (STATUS, [H, c_double, H]),
    "gpucore_random": (STATUS, [H, c_int, c_double, c_double, c_uint64, c_uint64, H]),
    "gpucore_random_offset_advance": (c_uint64, [c_int64, c_int]),
    # streams / tensors added later
    "gpucore_stream_native_handle": (STATUS, [H, P_H]),
    "gpucore_tensor_as_strided": (STATUS, [H, c_int, P_I64, P_I64, c_int64, P_H]),
    "gpucore_tensor_storage_offset": (STATUS, [H, P_I64]),
    # elementwise ops
    "gpucore_binary": (STATUS, [c_int, H, H, H, H]),
    "gpucore_binary_act": (STATUS, [c_int, c_int, H, H, H, H]),
    "gpucore_binary_new": (STATUS, [c_int, H, H, H, P_H]),
    "gpucore_unary": (STATUS, [c_int, H, H, H]),
    "gpucore_unary_new": (STATUS, [c_int, H, H, P_H]),
    "gpucore_scale": (STATUS, [H, H, c_double, c_double, H]),
    "gpucore_scale_new": (STATUS, [H, c_double, c_double, H, P_H]),
    "gpucore_axpy": (STATUS, [H, c_double, H, H]),
    "gpucore_clamp": (STATUS, [H, H, c_double, c_double, H]),
    "gpucore_activation_forward": (STATUS, [c_int, H, H, H]),
    "gpucore_activation_forward_new": (STATUS, [c_int, H, H, P_H]),
    "gpucore_activation_backward": (STATUS, [c_int, H, H, H, H]),
    "gpucore_cast": (STATUS, [H, H, H]),
    "gpucore_quant_size": (STATUS, [c_int, c_int64, c_int64, c_int64, c_int, P_I64]),
    "gpucore_quantize": (STATUS, [H, c_int, c_int64, c_int, H, H]),
    "gpucore_dequantize": (STATUS, [H, c_int, c_int64, c_int, H, H]),
    "gpucore_qlinear_forward": (STATUS, [H, c_void_p, H, c_int, H, H, H]),
    "gpucore_qlinear_backward_data": (STATUS, [H, c_void_p, c_double, H, H]),
    "gpucore_dropout": (STATUS, [H, H, c_double, c_uint64, c_uint64, H]),
    # reductions
    "gpucore_reduce": (STATUS, [c_int, H, H, c_int, H]),
    "gpucore_reduce_dims": (STATUS, [c_int, H, H, P_INT, c_int, H]),
    "gpucore_bias_grad": (STATUS, [H, H, H]),
    # row ops
    "gpucore_softmax": (STATUS, [H, H, c_int, H]),
    "gpucore_softmax_backward": (STATUS, [H, H, H, c_int, H]),
    "gpucore_layer_norm": (STATUS, [H, H, H, H, H, H, c_double, H]),
    "gpucore_layer_norm_backward": (STATUS, [H, H, H, H, H, H, H, H, H]),
    "gpucore_rms_norm": (STATUS, [H, H, H, H, c_double, H]),
    "gpucore_rms_norm_backward": (STATUS, [H, H, H, H, H, H, H]),
    "gpucore_cross_entropy": (STATUS, [H, H, H, c_int64, c_int, H]),
    "gpucore_cross_entropy_backward": (STATUS, [H, H, H, H, c_int64, c_int, H]),
    "gpucore_cross_entropy_forward_ex": (STATUS, [H, H, H, H, c_int64, c_int, c_double, c_int, H]),
    "gpucore_cross_entropy_backward_ex": (STATUS, [H, H, H, H, H, c_int64, c_int, c_double, c_int, H]),
    "gpucore_embedding": (STATUS, [H, H, H, H]),
    "gpucore_embedding_backward": (STATUS, [H, H, H, H]),
    "gpucore_embedding_backward_padding": (STATUS, [H, H, H, c_int64, H]),
    # memory
    "gpucore_memory_get_stats": (STATUS, [H, c_int, POINTER(MemoryStats)]),
    "gpucore_memory_reset_peak_stats": (STATUS, [H, c_int]),
    "gpucore_memory_snapshot": (STATUS, [H, c_int, c_int, c_char_p, c_int64, P_I64]),
    "gpucore_memory_empty_cache": (STATUS, [H, c_int]),
    "gpucore_memory_set_limit": (STATUS, [H, c_int64]),
    "gpucore_memory_set_limit_fraction": (STATUS, [H, c_double]),
    "gpucore_memory_set_caching": (STATUS, [H, c_int, c_int]),
    "gpucore_memory_configure": (STATUS, [H, c_char_p]),
    "gpucore_alloc_conf_validate": (STATUS, [c_char_p]),
    "gpucore_memory_get_conf": (STATUS, [H, c_char_p, c_size_t]),
    "gpucore_tensor_record_stream": (STATUS, [H, H]),
    "gpucore_device_alloc": (STATUS, [H, c_int64, H, P_H]),
    "gpucore_device_free": (STATUS, [H, c_void_p]),
    "gpucore_device_record_stream": (STATUS, [H, c_void_p, H]),
    "gpucore_host_alloc": (STATUS, [H, c_int64, H, P_H]),
    "gpucore_host_free": (STATUS, [H, c_void_p]),
    "gpucore_host_record_stream": (STATUS, [H, c_void_p, H]),
    "gpucore_debug_fail_raw_alloc": (STATUS, [H, c_int64, c_int64]),
    "gpucore_debug_fail_async": (STATUS, [H, c_int]),
    # profiling
    "gpucore_profiler_enable": (STATUS, [H, c_int]),
    "gpucore_profiler_enabled": (c_int, [H]),
    "gpucore_profiler_reset": (STATUS, [H]),
    "gpucore_profiler_entries": (STATUS, [H, POINTER(ProfileEntry), c_int, P_INT]),
    "gpucore_profiler_summary": (STATUS, [H, c_int, c_char_p, c_int64, P_I64]),
    # stream priorities and pool
    "gpucore_stream_priority_range": (STATUS, [H, P_INT, P_INT]),
    "gpucore_context_pool_stream": (STATUS, [H, c_int, P_H]),
    # matmul and linear
    "gpucore_matmul_options_init": (None, [POINTER(MatmulOptions)]),
    "gpucore_matmul": (STATUS, [H, H, H, POINTER(MatmulOptions), H]),
    "gpucore_matmul_nd": (STATUS, [H, H, H, H]),
    "gpucore_context_set_allow_tf32": (STATUS, [H, c_int]),
    "gpucore_context_get_allow_tf32": (STATUS, [H, P_INT]),
    "gpucore_matmul_set_workspace_size": (STATUS, [H, c_int64]),
    "gpucore_matmul_get_stats": (STATUS, [H, POINTER(MatmulStats)]),
    "gpucore_matmul_reset_stats": (STATUS, [H]),
    "gpucore_matmul_fallback_reason_text": (c_char_p, [c_int]),
    "gpucore_linear_forward": (STATUS, [H, H, H, c_int, H, H, H]),
    "gpucore_linear_backward": (STATUS, [H, H, H, H, H, H, H, H]),
    # convolution
    "gpucore_conv_options_init": (None, [POINTER(ConvOptions)]),
    "gpucore_conv_output_shape": (STATUS, [H, H, POINTER(ConvOptions), P_INT, P_I64]),
    "gpucore_conv_forward": (STATUS, [H, H, H, H, POINTER(ConvOptions), H]),
    "gpucore_conv_backward_data": (STATUS, [H, H, H, POINTER(ConvOptions), H]),
    "gpucore_conv_backward_filter": (STATUS, [H, H, H, POINTER(ConvOptions), H]),
    "gpucore_conv_get_stats": (STATUS, [H, POINTER(ConvStats)]),
    # training primitives
    "gpucore_optimizer_config_default": (STATUS, [c_int, POINTER(OptimizerConfig)]),
    "gpucore_optimizer_create": (STATUS, [H, POINTER(OptimizerConfig), P_H, c_int64, P_H]),
    "gpucore_optimizer_destroy": (STATUS, [H]),
    "gpucore_optimizer_step": (STATUS, [H, P_H, c_int64, H, H]),
    "gpucore_optimizer_lr": (STATUS, [H, P_H]),
    "gpucore_optimizer_step_count": (STATUS, [H, P_H]),
    "gpucore_optimizer_param_count": (c_int64, [H]),
    "gpucore_optimizer_state": (STATUS, [H, c_int64, c_char_p, P_H]),
    "gpucore_loss_scaler_config_default": (STATUS, [POINTER(LossScalerConfig)]),
    "gpucore_loss_scaler_create": (STATUS, [H, POINTER(LossScalerConfig), P_H]),
    "gpucore_loss_scaler_destroy": (STATUS, [H]),
    "gpucore_loss_scaler_unscale": (STATUS, [H, P_H, c_int64, H]),
    "gpucore_loss_scaler_update": (STATUS, [H, H]),
    "gpucore_loss_scaler_scale": (STATUS, [H, P_H]),
    "gpucore_loss_scaler_found_inf": (STATUS, [H, P_H]),
    "gpucore_loss_scaler_growth_tracker": (STATUS, [H, P_H]),
    "gpucore_clip_grad_norm": (STATUS, [P_H, c_int64, c_double, H, H, H]),
    # safetensors
    "gpucore_safetensors_save": (STATUS, [c_char_p, P_CHARP, P_H, c_int64, P_CHARP, P_CHARP, c_int64]),
    "gpucore_safetensors_open": (STATUS, [c_char_p, P_H]),
    "gpucore_safetensors_close": (STATUS, [H]),
    "gpucore_safetensors_count": (c_int64, [H]),
    "gpucore_safetensors_name": (c_char_p, [H, c_int64]),
    "gpucore_safetensors_info": (STATUS, [H, c_char_p, P_INT, P_INT, P_I64]),
    "gpucore_safetensors_metadata": (c_char_p, [H, c_char_p]),
    "gpucore_safetensors_read": (STATUS, [H, c_char_p, H]),
    "gpucore_safetensors_load_tensor": (STATUS, [H, H, c_char_p, P_H]),
    # GGUF
    "gpucore_gguf_open": (STATUS, [c_char_p, P_H]),
    "gpucore_gguf_close": (STATUS, [H]),
    "gpucore_gguf_file_info": (STATUS, [H, P_I64, P_I64, P_I64]),
    "gpucore_gguf_kv_count": (c_int64, [H]),
    "gpucore_gguf_kv_find": (c_int64, [H, c_char_p]),
    "gpucore_gguf_kv_info": (STATUS, [H, c_int64, P_CHARP, P_INT, P_INT, P_I64]),
    "gpucore_gguf_kv_int": (STATUS, [H, c_int64, c_int64, P_I64]),
    "gpucore_gguf_kv_float": (STATUS, [H, c_int64, c_int64, POINTER(c_double)]),
    "gpucore_gguf_kv_string": (STATUS, [H, c_int64, c_int64, P_H, P_I64]),
    "gpucore_gguf_kv_data": (STATUS, [H, c_int64, P_H, P_I64]),
    "gpucore_gguf_tensor_count": (c_int64, [H]),
    "gpucore_gguf_tensor_find": (c_int64, [H, c_char_p]),
    "gpucore_gguf_tensor_info": (STATUS, [H, c_int64, P_CHARP, P_INT, P_INT, P_I64, P_I64, P_I64]),
    "gpucore_gguf_type_name": (c_char_p, [c_int]),
    "gpucore_gguf_read": (STATUS, [H, c_int64, H]),
    "gpucore_gguf_load_tensor": (STATUS, [H, H, c_int64, c_int, P_H]),
    "gpucore_checkpoint_save": (STATUS, [c_char_p, P_CHARP, P_H, c_int64, H, H]),
    "gpucore_checkpoint_load": (STATUS, [c_char_p, P_CHARP, P_H, c_int64, H, H]),
    # collective communication
    "gpucore_comm_create_mpi": (STATUS, [H, P_H]),
    "gpucore_comm_unique_id": (STATUS, [H, c_void_p, c_size_t]),
    "gpucore_comm_create": (STATUS, [H, c_void_p, c_size_t, c_int, c_int, P_H]),
    "gpucore_comm_create_local": (STATUS, [P_H, c_int, P_H]),
    "gpucore_comm_group_start": (STATUS, []),
    "gpucore_comm_group_end": (STATUS, []),
    "gpucore_comm_destroy": (STATUS, [H]),
    "gpucore_comm_rank": (c_int, [H]),
    "gpucore_comm_size": (c_int, [H]),
    "gpucore_comm_context": (STATUS, [H, P_H]),
    "gpucore_comm_stream": (STATUS, [H, P_H]),
    "gpucore_comm_set_timeout": (STATUS, [H, c_double]),
    "gpucore_comm_allreduce": (STATUS, [H, H, H, c_int, H]),
    "gpucore_comm_reduce_scatter": (STATUS, [H, H, H, c_int, H]),
    "gpucore_comm_all_gather": (STATUS, [H, H, H, H]),
    "gpucore_comm_broadcast": (STATUS, [H, H, H, c_int, H]),
    "gpucore_comm_barrier": (STATUS, [H, H]),
    "gpucore_comm_last_sequence": (c_uint64, [H]),
    "gpucore_comm_wait": (STATUS, [H, c_uint64, c_double]),
    # DDP reducer
    "gpucore_ddp_options_default": (None, [POINTER(DdpOptions)]),
    "gpucore_ddp_create": (STATUS, [H, P_H, c_int, POINTER(DdpOptions), P_H]),
    "gpucore_ddp_destroy": (STATUS, [H]),
    "gpucore_ddp_bucket_count": (STATUS, [H, P_INT]),
    "gpucore_ddp_bucket_info": (STATUS, [H, c_int, P_INT, P_INT, P_I64]),
    "gpucore_ddp_set_no_sync": (STATUS, [H, c_int]),
    "gpucore_ddp_mark_ready": (STATUS, [H, c_int, H]),
    # gradients as views into their buckets (no copy in, no copy back)
    "gpucore_ddp_grad_view": (STATUS, [H, c_int, P_H]),
    "gpucore_ddp_finish": (STATUS, [H, H]),
    "gpucore_ddp_trace": (STATUS, [H, POINTER(DdpTraceEvent), c_int, P_INT]),
    # ZeRO trainer
    "gpucore_zero_options_default": (None, [POINTER(ZeroOptions)]),
    "gpucore_zero_create": (STATUS, [H, P_H, c_int, POINTER(OptimizerConfig), POINTER(ZeroOptions), P_H]),
    "gpucore_zero_destroy": (STATUS, [H]),
    "gpucore_zero_bucket_count": (STATUS, [H, P_INT]),
    "gpucore_zero_bucket_info": (STATUS, [H, c_int, P_INT, P_INT, P_I64, P_I64]),
    "gpucore_zero_bucket_of": (STATUS, [H, c_int, P_INT]),
    "gpucore_zero_grad": (STATUS, [H, c_int, H, P_H]),
    "gpucore_zero_mark_ready": (STATUS, [H, c_int, H]),
    "gpucore_zero_set_no_sync": (STATUS, [H, c_int]),
    "gpucore_zero_step": (STATUS, [H, H, H]),
    "gpucore_zero_grad_norm": (STATUS, [H, P_H]),
    "gpucore_zero_optimizer": (STATUS, [H, P_H]),
    "gpucore_zero_gather": (STATUS, [H, c_int]),
    "gpucore_zero_release": (STATUS, [H, c_int, H]),
    "gpucore_zero_param": (STATUS, [H, c_int, H, P_H]),
    "gpucore_zero_attach_ckpt": (STATUS, [H, H, P_I32, c_int64]),
    "gpucore_zero_bind_ckpt": (STATUS, [H, H, P_H, P_H]),
    "gpucore_zero_get_stats": (STATUS, [H, POINTER(ZeroStats)]),
    "gpucore_zero_save_sharded": (STATUS, [H, c_char_p, H]),
    "gpucore_zero_load_sharded": (STATUS, [H, c_char_p, H]),
    "gpucore_zero_save_consolidated": (STATUS, [H, c_char_p, P_CHARP, H]),
    "gpucore_zero_load_consolidated": (STATUS, [H, c_char_p, P_CHARP, H]),
    # gradient checkpointing
    "gpucore_ckpt_create": (STATUS, [H, c_char_p, P_H]),
    "gpucore_ckpt_destroy": (STATUS, [H]),
    "gpucore_ckpt_segment_count": (c_int64, [H]),
    "gpucore_ckpt_add_custom": (STATUS, [H, c_char_p, CKPT_FORWARD_FN, CKPT_BACKWARD_FN, c_void_p]),
    "gpucore_ckpt_add_linear": (STATUS, [H, c_char_p, H, H, c_int, H, H]),
    "gpucore_ckpt_add_conv2d": (STATUS, [H, c_char_p, H, H, POINTER(ConvOptions), c_int, H, H]),
    "gpucore_ckpt_add_layer_norm": (STATUS, [H, c_char_p, H, H, c_double, H, H]),
    "gpucore_ckpt_attention_block_init": (None, [c_void_p]),
    "gpucore_ckpt_mlp_block_init": (None, [c_void_p]),
    "gpucore_ckpt_add_attention_block": (STATUS, [H, c_char_p, c_void_p]),
    "gpucore_ckpt_add_mlp_block": (STATUS, [H, c_char_p, c_void_p]),
    "gpucore_ckpt_add_dropout": (STATUS, [H, c_char_p, c_double]),
    "gpucore_ckpt_begin_residual": (STATUS, [H, c_char_p]),
    "gpucore_ckpt_end_residual": (STATUS, [H]),
    "gpucore_ckpt_save": (STATUS, [H, H]),
    "gpucore_ckpt_saved": (STATUS, [H, c_int64, P_H]),
    "gpucore_ckpt_rng": (STATUS, [H, c_uint64, P_U64, P_U64]),
    "gpucore_ckpt_grad_ready": (STATUS, [H, I32, H]),
    "gpucore_ckpt_call_segment": (STATUS, [H, P_I64, P_CHARP]),
    "gpucore_ckpt_set_policy": (STATUS, [H, c_int, c_int64]),
    "gpucore_ckpt_get_plan": (STATUS, [H, P_I32, c_int64]),
    "gpucore_ckpt_set_seed": (STATUS, [H, c_uint64, c_uint64]),
    "gpucore_ckpt_forward": (STATUS, [H, H, P_H]),
    "gpucore_ckpt_backward": (STATUS, [H, H, H]),
    "gpucore_ckpt_reset": (STATUS, [H]),
    "gpucore_ckpt_set_saved_tensor_hooks": (STATUS, [H, CKPT_PACK_FN, CKPT_UNPACK_FN, CKPT_DISCARD_FN, c_void_p]),
    "gpucore_ckpt_set_offload": (STATUS, [H, c_int, c_int64]),
    "gpucore_ckpt_set_segment_hook": (STATUS, [H, CKPT_SEGMENT_HOOK_FN, c_void_p]),
    "gpucore_ckpt_set_grad_ready_callback": (STATUS, [H, CKPT_GRAD_READY_FN, c_void_p]),
    "gpucore_ckpt_get_stats": (STATUS, [H, POINTER(CkptStats)]),
    "gpucore_pipeline_create": (STATUS, [P_H, c_int, P_H]),
    "gpucore_pipeline_destroy": (STATUS, [H]),
    "gpucore_pipeline_step": (STATUS, [H, H, c_int64, PIPELINE_LOSS_FN, c_void_p, H]),
    # attention and transformer ops (options: a gpucore.transformer.AttentionOptions by reference)
    "gpucore_attention_options_init": (None, [c_void_p]),
    "gpucore_attention_get_stats": (STATUS, [H, c_void_p]),
    "gpucore_attention_reset_stats": (STATUS, [H]),
    "gpucore_attention_fallback_reason_text": (c_char_p, [c_int]),
    "gpucore_attention_forward": (STATUS, [H, H, H, H, H, H, H, c_void_p, H]),
    "gpucore_attention_backward": (STATUS, [H, H, H, H, H, H, H, H, H, H, H, c_void_p, H]),
    "gpucore_rotary_embedding": (STATUS, [H, H, H, H, c_int, H]),
    "gpucore_rotary_embedding_backward": (STATUS, [H, H, H, H, c_int, H]),
    "gpucore_glu": (STATUS, [H, H, H, c_int, H]),
    "gpucore_glu_backward": (STATUS, [H, H, H, H, H, c_int, H]),
    "gpucore_residual_norm": (STATUS, [H, H, H, H, H, H, H, H, c_int, c_double, H]),
    "gpucore_residual_norm_backward": (STATUS, [H, H, H, H, H, H, H, H, H, c_int, H]),
    # LoRA linear (options: a gpucore.transformer.LoraOptions by reference)
    "gpucore_lora_options_init": (None, [c_void_p]),
    "gpucore_lora_forward": (STATUS, [H, H, H, H, H, H, H, c_void_p, H]),
    "gpucore_lora_backward": (STATUS, [H, H, H, H, H, H, H, H, H, c_void_p, H]),
    "gpucore_lora_merge": (STATUS, [H, H, H, c_double, H]),
    "gpucore_lora_unmerge": (STATUS, [H, H, H, c_double, H]),
    # token data (options: a TokenDataOptions by reference)
    "gpucore_token_data_options_default": (STATUS, [c_void_p]),
    "gpucore_token_data_open": (STATUS, [H, P_CHARP, c_int64, c_void_p, P_H]),
    "gpucore_token_data_close": (STATUS, [H]),
    "gpucore_token_data_sizes": (STATUS, [H, P_I64, P_I64, P_I64]),
    "gpucore_token_data_next": (STATUS, [H, H, P_H, P_H, P_I64, P_I64]),
    "gpucore_token_data_position": (STATUS, [H, P_I64]),
    "gpucore_token_data_seek": (STATUS, [H, c_int64]),
    "gpucore_token_data_batch_windows": (STATUS, [H, c_int64, P_I64]),
    "gpucore_token_data_write": (STATUS, [c_char_p, c_void_p, c_int64]),
    # language models (host id arrays as POINTER(c_int64); names come back as c_char_p)
    "gpucore_lm_create": (STATUS, [H, c_char_p, c_int, P_H]),
    "gpucore_lm_load_options_init": (None, [POINTER(LmLoadOptions)]),
    "gpucore_lm_create_ex": (STATUS, [H, c_char_p, POINTER(LmLoadOptions), P_H]),
    "gpucore_lm_quantization": (c_char_p, [H]),
    "gpucore_lm_weight_bytes": (STATUS, [H, P_I64]),
    "gpucore_lm_decode_bytes": (STATUS, [H, P_I64]),
    "gpucore_lm_destroy": (STATUS, [H]),
    "gpucore_lm_context": (STATUS, [H, P_H]),
    "gpucore_lm_config_int": (STATUS, [H, c_char_p, P_I64]),
    "gpucore_lm_config_double": (STATUS, [H, c_char_p, POINTER(c_double)]),
    "gpucore_lm_arch_name": (c_char_p, [H]),
    "gpucore_lm_default_lora_targets": (c_char_p, [c_char_p]),
    "gpucore_lm_config_json": (STATUS, [H, POINTER(c_char_p)]),
    "gpucore_lm_parameter_count": (c_int64, [H]),
    "gpucore_lm_parameter": (STATUS, [H, c_int64, P_CHARP, P_H]),
    "gpucore_lm_forward": (STATUS, [H, H, P_H]),
    "gpucore_lm_forward_host": (STATUS, [H, P_I64, c_int64, c_int64, P_H]),
    "gpucore_lm_cache_create": (STATUS, [H, c_int64, c_int64, P_H]),
    "gpucore_lm_cache_destroy": (STATUS, [H]),
    "gpucore_lm_cache_length": (c_int64, [H]),
    "gpucore_lm_cache_reset": (STATUS, [H]),
    "gpucore_lm_forward_cached": (STATUS, [H, H, H, c_int, P_H]),
    "gpucore_lm_generate": (STATUS, [H, P_I64, c_int64, c_int64, c_int64, c_int, c_double, c_int64, c_double,
                                     c_uint64, c_int64, c_int64, P_I64, P_I64]),
    "gpucore_lm_sample_token": (STATUS, [POINTER(c_float), c_int64, c_int, c_double, c_int64, c_double, c_uint64,
                                         c_uint64, P_I64]),
    "gpucore_lm_trainable_count": (c_int64, [H]),
    "gpucore_lm_trainable": (STATUS, [H, c_int64, P_CHARP, P_H, P_H]),
    "gpucore_lm_set_full_finetune": (STATUS, [H, c_int]),
    "gpucore_lm_loss": (STATUS, [H, H, H, POINTER(c_double)]),
    "gpucore_lm_forward_backward": (STATUS, [H, H, H, POINTER(c_double)]),
    "gpucore_lm_loss_host": (STATUS, [H, P_I64, P_I64, c_int64, c_int64, POINTER(c_double)]),
    "gpucore_lm_forward_backward_host": (STATUS, [H, P_I64, P_I64, c_int64, c_int64, POINTER(c_double)]),
    "gpucore_lm_backward_options_init": (None, [POINTER(LmBackwardOptions)]),
    "gpucore_lm_forward_backward_ex": (STATUS, [H, H, H, POINTER(LmBackwardOptions), POINTER(c_double)]),
    "gpucore_lm_count_label_tokens": (STATUS, [H, H, H, P_I64]),
    "gpucore_lm_set_checkpoint_policy": (STATUS, [H, c_int, c_int64]),
    "gpucore_lm_set_seed": (STATUS, [H, c_uint64]),
    "gpucore_lm_set_head_chunk_rows": (STATUS, [H, c_int64]),
    "gpucore_lm_plan_options_init": (None, [POINTER(LmPlanOptions)]),
    "gpucore_lm_plan": (STATUS, [H, c_char_p, POINTER(LmPlanOptions), POINTER(LmMemoryPlan)]),
    "gpucore_mem_category_name": (c_char_p, [c_int]),
    "gpucore_lm_add_lora": (STATUS, [H, c_int64, c_double, c_double, P_CHARP, c_int64, c_uint64]),
    "gpucore_lm_load_adapter": (STATUS, [H, c_char_p]),
    "gpucore_lm_save_adapter": (STATUS, [H, c_char_p]),
    "gpucore_lm_merge_adapter": (STATUS, [H]),
    "gpucore_lm_lora_count": (c_int64, [H]),
    "gpucore_lm_save_pretrained": (STATUS, [H, c_char_p]),
    # text: tokenizer and chat prompts
    "gpucore_tokenizer_create_from_file": (STATUS, [c_char_p, P_H]),
    "gpucore_tokenizer_create_from_arrays": (STATUS, [POINTER(TokenizerArrays), P_H]),
    "gpucore_tokenizer_create_from_gguf": (STATUS, [c_char_p, P_H]),
    "gpucore_tokenizer_destroy": (None, [H]),
    "gpucore_tokenizer_encode": (STATUS, [H, c_char_p, c_int64, c_int, POINTER(ctypes.c_int32), c_int64, P_I64]),
    "gpucore_tokenizer_decode": (STATUS, [H, POINTER(ctypes.c_int32), c_int64, c_int, c_char_p, c_int64, P_I64]),
    "gpucore_tokenizer_vocab_size": (c_int64, [H]),
    "gpucore_tokenizer_token_to_id": (ctypes.c_int32, [H, c_char_p]),
    "gpucore_tokenizer_id_to_token": (c_char_p, [H, ctypes.c_int32]),
    "gpucore_tokenizer_bos_id": (ctypes.c_int32, [H]),
    "gpucore_tokenizer_eos_id": (ctypes.c_int32, [H]),
    "gpucore_tokenizer_chat_template": (c_char_p, [H]),
    "gpucore_chat_render": (STATUS, [c_char_p, c_char_p, c_char_p, POINTER(ChatMessage), c_int64, c_int, c_char_p,
                                     c_int64, P_I64]),
}


# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------

def _candidates() -> List[Tuple[str, str]]:
    """(how, path) pairs in search order."""
    out: List[Tuple[str, str]] = []
    env = os.environ.get("GPUCORE_LIBRARY")
    if env:
        out.append(("$GPUCORE_LIBRARY", env))
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("libgpucore.so", "libgpucore.so.0", "libgpucore.dylib"):
        out.append(("next to the package", os.path.join(here, name)))
    found = ctypes.util.find_library("gpucore")
    if found:
        out.append(("ctypes.util.find_library('gpucore')", found))
    out.append(("the system library path", "libgpucore.so.0"))
    out.append(("the system library path", "libgpucore.so"))
    return out


def _load() -> Tuple[ctypes.CDLL, str]:
    tried: List[str] = []
    env = os.environ.get("GPUCORE_LIBRARY")
    for how, path in _candidates():
        if os.path.sep in path and not os.path.exists(path):
            tried.append("%s (%s): no such file" % (path, how))
            if how == "$GPUCORE_LIBRARY":
                # An explicit setting that points nowhere is an error, not a hint.
                break
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("%s (%s): %s" % (path, how, e))
            if how == "$GPUCORE_LIBRARY":
                break
    hint = ("install the package with the library inside it ('pip install .' in the libgpucore "
            "source folder), or set GPUCORE_LIBRARY to the path of libgpucore.so (e.g. "
            "build/src/libgpucore.so after 'meson setup build && ninja -C build')")
    if env:
        hint = "GPUCORE_LIBRARY is set to %r but that library cannot be loaded; fix or unset it" % env
    raise ImportError("gpucore: cannot load libgpucore; tried:\n  " + "\n  ".join(tried) + "\n" + hint)


lib, library_path = _load()

_raw_clear_error = lib.gpucore_clear_error
_raw_clear_error.restype = None
_raw_clear_error.argtypes = []
_raw_last_error = lib.gpucore_last_error
_raw_last_error.restype = c_char_p
_raw_last_error.argtypes = []
_raw_status_string = lib.gpucore_status_string
_raw_status_string.restype = c_char_p
_raw_status_string.argtypes = [c_int]


def last_error() -> str:
    """The library's message for the last failed call on this thread ("" if none)."""
    m = _raw_last_error()
    return m.decode("utf-8", "replace") if m else ""


def status_string(status: int) -> str:
    """The name of a status code, e.g. "GPUCORE_ERR_SHAPE_MISMATCH"."""
    m = _raw_status_string(int(status))
    return m.decode() if m else "GPUCORE_ERR_%d" % status


def raise_status(status: int, function: str) -> None:
    """Raise the exception for a non-zero status of `function`, with the library's message."""
    name = status_string(status)
    msg = last_error() or "%s failed with %s" % (function, name)
    # (the per-op fast paths call C without clearing the last error first: every failing C path
    # writes its own message, so the message read here is always the failing call's)
    raise _errors.error_for_status(status, msg, status_name=name, function=function)


def fast_function(name: str, restype: Any = c_int) -> Any:
    """A second ctypes function object for the STATUS function `name`, with no argtypes, for
    the binding's per-op hot paths (tensor creation, elementwise ops, synchronize).

    ctypes' per-call argtypes conversion costs more than the C work of a small op (a
    POINTER(c_int64) argument alone about 0.2 us), so a hot path passes only values it built
    itself, which ctypes passes as they are: c_void_p objects (handles), ints of 32 bits
    (enums, counts), None (NULL), ctypes arrays and byref() of ctypes objects. A Python int
    too wide for a C int makes ctypes raise ArgumentError, never a truncated value. The
    status comes back as an int (``restype``; None for a void function): the caller raises
    with raise_status(status, name) when it is non-zero. Where the loaded library lacks the function, the stand-in of ``C`` that
    raises NotSupportedError saying so."""
    try:
        fn = lib[name]  # __getitem__ makes a new object: the declared one keeps its argtypes
    except AttributeError:
        return getattr(C, name)
    fn.restype = restype
    return fn


class _Missing:
    """Stands in for a function the loaded library does not export (an older build)."""

    def __init__(self, name: str) -> None:
        self.__name__ = name

    def __call__(self, *args: Any) -> Any:
        raise _errors.NotSupportedError(
            "%s is not exported by the loaded library %s (it is older than this binding)"
            % (self.__name__, library_path), function=self.__name__)


#: Gives back the handles of dropped small results that wait in batches (set by context.py);
#: True when some went. A call that failed for memory is made once more after it.
release_pending: Callable[[], bool] = lambda: False


def retry_after_release(status: int, fn: Any, *args: Any) -> int:
    """The status of fn(*args), which failed with `status`: where that was out of memory and
    dropped tensors were waiting to be given back, they go back first and fn runs once more (a
    failed call leaves nothing behind, so it may be repeated)."""
    if status == _errors.ERR_OUT_OF_MEMORY and release_pending():
        _raw_clear_error()
        return fn(*args)
    return status


def _wrap_status(name: str, fn: Any, allow_not_ready: bool) -> Callable[..., int]:
    clear = _raw_clear_error

    def call(*args: Any) -> int:
        clear()
        s = fn(*args)
        if s and not (allow_not_ready and s == _errors.ERR_NOT_READY):
            s = retry_after_release(s, fn, *args)
            if s:
                raise_status(s, name)
        return s

    call.__name__ = name
    call.__qualname__ = name
    call.__doc__ = "ctypes call of %s; raises GpucoreError subclasses on failure" % name
    return call


class _Namespace:
    """Attribute access to every declared function: ``C.gpucore_tensor_create(...)``."""

    def __init__(self) -> None:
        self.missing: List[str] = []

    def __repr__(self) -> str:
        return "<gpucore C functions from %s>" % library_path


C: Any = _Namespace()


def declare(name: str, restype: Any, argtypes: Sequence[Any]) -> None:
    """Declare one C function (used for the table; also usable by extensions)."""
    try:
        fn = getattr(lib, name)
    except AttributeError:
        C.missing.append(name)
        setattr(C, name, _Missing(name))
        return
    fn.argtypes = list(argtypes)
    if isinstance(restype, _StatusKind):
        fn.restype = c_int
        setattr(C, name, _wrap_status(name, fn, restype.allow_not_ready))
        setattr(C, "raw_" + name, fn)
    else:
        fn.restype = restype
        setattr(C, name, fn)
    DECLARATIONS.setdefault(name, (restype, list(argtypes)))


for _name, (_res, _args) in list(DECLARATIONS.items()):
    declare(_name, _res, _args)

