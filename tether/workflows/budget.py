"""How many tokens a context may hold: the engine's n_ctx and the KV cache against free memory.

``kv_bytes_per_token`` reads the GGUF metadata (``<arch>.block_count``,
``<arch>.attention.head_count_kv``, ``<arch>.embedding_length``,
``<arch>.attention.head_count``, optional ``key_length``/``value_length``):
``n_layers * n_kv_heads * (head_dim_k + head_dim_v) * bytes_per_element``, i.e.
``2 * n_layers * n_kv_heads * head_dim * bytes`` when K and V have the same width.
``context_budget`` combines it with ``MemAvailable`` from ``/proc/meminfo`` (and free
VRAM from ``nvidia-smi`` when present) into the budget reported at start-up.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import structlog

from tether.engine.base import EngineInfo

__all__ = [
    "KV_TYPE_BYTES",
    "ContextBudget",
    "context_budget",
    "gpu_free_bytes",
    "kv_bytes_per_token",
    "mem_available_bytes",
]

log = structlog.get_logger(__name__)

# Bytes per cached element for llama.cpp's KV cache types (block formats: bytes per block / 32).
KV_TYPE_BYTES: Mapping[str, float] = {
    "f32": 4.0,
    "f16": 2.0,
    "bf16": 2.0,
    "q8_0": 34 / 32,
    "q5_1": 24 / 32,
    "q5_0": 22 / 32,
    "q4_1": 20 / 32,
    "q4_0": 18 / 32,
}


def _int(metadata: Mapping[str, str], key: str) -> int | None:
    try:
        return int(str(metadata[key]).strip())
    except (KeyError, ValueError):
        return None


def kv_bytes_per_token(metadata: Mapping[str, str], kv_type: str = "f16") -> int | None:
    """KV-cache bytes one token occupies, from GGUF metadata; None when a key is missing."""
    arch = metadata.get("general.architecture", "llama")
    layers = _int(metadata, f"{arch}.block_count")
    heads = _int(metadata, f"{arch}.attention.head_count")
    kv_heads = _int(metadata, f"{arch}.attention.head_count_kv") or heads
    width = _int(metadata, f"{arch}.embedding_length")
    if not layers or not kv_heads:
        return None
    key_dim = _int(metadata, f"{arch}.attention.key_length")
    if key_dim is None:
        if not width or not heads:
            return None
        key_dim = width // heads
    value_dim = _int(metadata, f"{arch}.attention.value_length") or key_dim
    if kv_type not in KV_TYPE_BYTES:
        raise ValueError(f"unknown KV cache type {kv_type!r}; known: {', '.join(KV_TYPE_BYTES)}")
    return round(layers * kv_heads * (key_dim + value_dim) * KV_TYPE_BYTES[kv_type])


def mem_available_bytes(meminfo: str | Path = "/proc/meminfo") -> int | None:
    """``MemAvailable`` in bytes, or None where /proc/meminfo is absent."""
    try:
        for line in Path(meminfo).read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def gpu_free_bytes() -> int | None:
    """Free memory of the first NVIDIA GPU (``nvidia-smi``), or None without one."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=memory.free", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout
        return int(out.splitlines()[0].strip()) * 1024 * 1024
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class ContextBudget:
    """The context budget of a loaded model.

    ``max_ctx_by_memory``: tokens per slot whose KV cache the memory could hold (the
    cache already allocated for ``n_ctx`` counted back in when ``allocated``);
    ``budget_tokens``: ``min(n_ctx, max_ctx_by_memory)``; ``prompt_budget``: what a prompt
    may use, leaving ``reserve_tokens`` for the reply.
    """

    n_ctx: int
    slots: int
    kv_type: str
    kv_bytes_per_token: int | None
    kv_bytes_per_slot: int | None
    mem_available_bytes: int | None
    vram_free_bytes: int | None
    memory_source: str
    max_ctx_by_memory: int | None
    budget_tokens: int
    reserve_tokens: int
    prompt_budget: int

    def as_dict(self) -> dict[str, Any]:
        """For ``/v1/models`` metadata and logs."""
        return asdict(self)


def context_budget(
    info: EngineInfo,
    *,
    slots: int = 1,
    kv_type: str = "f16",
    reserve_tokens: int = 512,
    allocated: bool = True,
    kv_on_gpu: bool = False,
    mem_available: int | None = None,
    vram_free: int | None = None,
) -> ContextBudget:
    """Compute the budget for ``info`` (an ``EngineInfo`` of a loaded model).

    ``allocated``: the engines are loaded, so ``slots * n_ctx`` tokens of KV cache already
    live in memory and are counted back in. ``kv_on_gpu``: compare against free VRAM
    instead of RAM. ``mem_available``/``vram_free`` override the readings (tests).
    """
    bpt = kv_bytes_per_token(info.metadata, kv_type)
    ram = mem_available if mem_available is not None else mem_available_bytes()
    vram = vram_free if vram_free is not None else (gpu_free_bytes() if kv_on_gpu else None)
    source, free = ("vram", vram) if kv_on_gpu else ("ram", ram)
    per_slot = bpt * info.n_ctx if bpt is not None else None
    max_by_memory: int | None = None
    if bpt and free is not None:
        held = per_slot * slots if (allocated and per_slot is not None) else 0
        max_by_memory = (free + held) // (bpt * max(slots, 1))
    budget = info.n_ctx if max_by_memory is None else min(info.n_ctx, max_by_memory)
    reserve = min(reserve_tokens, budget // 2)
    result = ContextBudget(
        n_ctx=info.n_ctx,
        slots=slots,
        kv_type=kv_type,
        kv_bytes_per_token=bpt,
        kv_bytes_per_slot=per_slot,
        mem_available_bytes=ram,
        vram_free_bytes=vram,
        memory_source=source if free is not None else "none",
        max_ctx_by_memory=max_by_memory,
        budget_tokens=budget,
        reserve_tokens=reserve,
        prompt_budget=budget - reserve,
    )
    log.info(
        "context_budget",
        n_ctx=info.n_ctx,
        kv_bytes_per_token=bpt,
        max_ctx_by_memory=max_by_memory,
        budget_tokens=budget,
        memory_source=result.memory_source,
    )
    return result
