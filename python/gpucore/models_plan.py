"""The memory plan of a language model's training step (``gpucore_lm_plan``), before anything is
loaded: ``plan(model_or_path, batch, seq, ...)`` returns a :class:`MemoryPlan` with the step's
peak (the caching allocator's allocated peak), the bytes per category live at that moment, and
where the peak falls (phase and layer); ``str()`` prints it as a table. Re-exported by
:mod:`gpucore.models`.

    >>> p = gpucore.models.plan("path/to/SmolLM2-135M", batch=4, seq=512, lora={"r": 8})
    >>> print(p)            # the table
    >>> p.peak_bytes, p.breakdown["activations"]
"""
from __future__ import annotations

import ctypes
import json
import os
from ctypes import byref, c_char_p
from typing import Any, Dict, Optional

from . import dtypes as _dt
from ._lib import C, LmMemoryPlan, LmPlanOptions
from ._validate import to_float, to_int
from .checkpoint import PHASES, POLICIES
from .errors import InvalidArgumentError, NotSupportedError

__all__ = ["plan", "MemoryPlan", "CATEGORIES"]

#: The categories of a plan, in the C enum's order (gpucore_mem_category).
CATEGORIES = tuple(C.gpucore_mem_category_name(i).decode() for i in range(7))
_OPTIMIZERS = {"none": -1, "sgd": 0, "adamw": 1}
_DEVICES = {"cpu": 0, "cuda": 1}


class MemoryPlan:
    """A step's planned memory: ``peak_bytes``, ``breakdown`` (category -> bytes at the peak, summing to
    the peak), ``persistent_bytes`` (held between steps), ``phase`` ("forward", "recompute", "backward",
    or None outside the layers), ``layer`` (None outside them), ``where`` (in words), and the checkpoint
    plan's ``recomputed_segments`` of ``segments``."""

    def __init__(self, raw: LmMemoryPlan, label: str) -> None:
        self.peak_bytes = int(raw.peak_bytes)
        self.breakdown: Dict[str, int] = {name: int(raw.bytes[i]) for i, name in enumerate(CATEGORIES)}
        self.persistent_bytes = int(raw.persistent_bytes)
        self.phase: Optional[str] = PHASES[raw.phase] if 0 <= raw.phase < len(PHASES) else None
        self.layer: Optional[int] = int(raw.layer) if raw.layer >= 0 else None
        self.where = raw.where.decode()
        self.recomputed_segments = int(raw.recomputed_segments)
        self.segments = int(raw.segments)
        self.label = label

    def __repr__(self) -> str:
        return "MemoryPlan(peak_bytes=%d, where=%r)" % (self.peak_bytes, self.where)

    def as_dict(self) -> Dict[str, Any]:
        return {"peak_bytes": self.peak_bytes, "breakdown": dict(self.breakdown),
                "persistent_bytes": self.persistent_bytes, "phase": self.phase, "layer": self.layer,
                "where": self.where, "recomputed_segments": self.recomputed_segments, "segments": self.segments}

    def __str__(self) -> str:
        mib = 1024.0 * 1024.0
        rows = ["memory plan: %s" % self.label, "  %-12s %12s %7s" % ("category", "MiB", "share")]
        for name, b in self.breakdown.items():
            rows.append("  %-12s %12.2f %6.1f%%" % (name, b / mib, 100.0 * b / self.peak_bytes if self.peak_bytes else 0))
        rows.append("  %-12s %12.2f" % ("peak", self.peak_bytes / mib))
        rows.append("  at %s; %d of %d segments recomputed; %.2f MiB held between steps"
                    % (self.where, self.recomputed_segments, self.segments, self.persistent_bytes / mib))
        return "\n".join(rows)


def _arch_of(path: str) -> str:
    """model_type of a folder's config.json ("" when unreadable: the C call then says why)."""
    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            return str(json.load(f).get("model_type", ""))
    except (OSError, ValueError):
        return ""


def plan(model_or_path: Any, batch: int, seq: int, dtype: Any = None, quantize: Optional[str] = None,
         lora: Optional[Dict[str, Any]] = None, checkpoint_policy: str = "keep_all", checkpoint_param: int = 0,
         zero: int = 0, world_size: int = 1, optimizer: str = "adamw", grad_accum: int = 1,
         generate_max_len: Optional[int] = None, device: Any = None, head_chunk_rows: int = 0,
         memory_limit: int = 0) -> MemoryPlan:
    """The memory of one training step of ``model_or_path`` (a LanguageModel, or a Hugging Face folder whose
    config.json alone is read) at ``batch`` x ``seq`` tokens: full fine-tuning when ``lora`` is None, else
    LoRA with ``add_lora``'s arguments as a dict (r, lora_alpha, lora_dropout, target_modules: the
    architecture's defaults when absent); ``checkpoint_policy`` one of set_checkpoint_policy's names;
    ``optimizer`` "adamw", "sgd" or "none"; ``quantize`` a quant format name ("nf4", "fp4", "int8", ...)
    of the decoder's linear weights; ``device`` "cpu" or "cuda" (the CUDA matmul's workspace counts;
    default: the model's context, else the CPU); ``dtype`` default: the model's (or the config's);
    ``memory_limit`` > 0 replays the step under that limit as ``memory.set_limit`` caps the allocator (its
    segments, not only the blocks in use) and raises OutOfMemoryError where it would not fit."""
    from .models import LanguageModel, default_lora_targets  # models re-exports this module
    from .quant import QUANT_FORMATS
    if generate_max_len is not None:
        raise NotSupportedError("plan: generation (generate_max_len) is not planned yet; the plan is a training step's")
    o = LmPlanOptions()
    C.gpucore_lm_plan_options_init(byref(o))
    o.batch = to_int(batch, "batch")
    o.seq = to_int(seq, "seq")
    o.dtype = -1 if dtype is None else _dt.as_dtype(dtype).value
    if device is not None:
        kind = str(device).split(":")[0]
        if kind not in _DEVICES:
            raise InvalidArgumentError("plan: device must be None, 'cpu' or 'cuda[:N]', not %r" % (device,))
        o.device_type = _DEVICES[kind]
    if quantize is not None:
        if str(quantize).lower() not in QUANT_FORMATS:
            raise InvalidArgumentError("plan: quantize must be None or one of %s, not %r"
                                       % (", ".join(QUANT_FORMATS), quantize))
        o.quant_format = QUANT_FORMATS[str(quantize).lower()]
    if checkpoint_policy not in POLICIES:
        raise InvalidArgumentError("plan: checkpoint_policy must be one of %s, not %r"
                                   % (", ".join(POLICIES), checkpoint_policy))
    o.ckpt_policy = POLICIES[checkpoint_policy]
    o.ckpt_param = to_int(checkpoint_param, "checkpoint_param")
    if optimizer not in _OPTIMIZERS:
        raise InvalidArgumentError("plan: optimizer must be one of %s, not %r" % (", ".join(_OPTIMIZERS), optimizer))
    o.optimizer = _OPTIMIZERS[optimizer]
    o.zero_stage = to_int(zero, "zero")
    o.world_size = to_int(world_size, "world_size")
    o.grad_accum = to_int(grad_accum, "grad_accum")
    o.head_chunk_rows = to_int(head_chunk_rows, "head_chunk_rows")
    o.memory_limit = to_int(memory_limit, "memory_limit", 0)
    is_model = isinstance(model_or_path, LanguageModel)
    path = None if is_model else os.fspath(model_or_path)
    arch = model_or_path.arch if is_model else _arch_of(path)
    keep: Any = None
    if lora is None:
        o.full_finetune = 1
    else:
        known = {"r", "lora_alpha", "lora_dropout", "target_modules", "seed"}
        if not isinstance(lora, dict) or set(lora) - known:
            raise InvalidArgumentError("plan: lora must be a dict of add_lora's arguments (%s)" % ", ".join(sorted(known)))
        targets = lora.get("target_modules") or default_lora_targets(arch)
        if isinstance(targets, str):
            targets = (targets,)
        names = [str(t).encode() for t in targets]
        keep = (c_char_p * max(1, len(names)))(*names)
        o.lora_r = to_int(lora.get("r", 8), "r", 1)
        o.lora_dropout = to_float(lora.get("lora_dropout", 0.0), "lora_dropout")
        o.lora_targets = ctypes.cast(keep, ctypes.POINTER(c_char_p))
        o.n_lora_targets = len(names)
    raw = LmMemoryPlan()
    raw.struct_size = ctypes.sizeof(raw)
    C.gpucore_lm_plan(model_or_path.handle if is_model else None, None if is_model else path.encode(), byref(o),
                      byref(raw))
    label = "%s, batch %d x seq %d, %s, %s" % (getattr(model_or_path, "path", path), o.batch, o.seq,
                                              "full fine-tuning" if lora is None else "LoRA r %d" % o.lora_r,
                                              checkpoint_policy)
    return MemoryPlan(raw, label)
