"""How many tokens a context may hold: the engine's n_ctx and the KV cache against free memory.

``kv_bytes_per_token`` reads the GGUF metadata (``<arch>.block_count``,
``<arch>.attention.head_count_kv``, ``<arch>.embedding_length``,
``<arch>.attention.head_count``, optional ``key_length``/``value_length``):
``n_layers * n_kv_heads * (head_dim_k * bytes(K type) + head_dim_v * bytes(V type))``.
``context_budget`` splits that per token between the layers llama.cpp offloaded to a GPU (their
KV cache lives in device memory) and the rest (host memory), and compares each share with the
free memory it lives in (``MemAvailable`` from ``/proc/meminfo``; free VRAM from ``nvidia-smi``),
read through a ``MemoryProbe`` so tests can inject the readings.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import structlog

from tether.engine.base import EngineInfo
from tether.engine.llama_options import CACHE_TYPES, LlamaOptions, offloaded_layers

__all__ = [
    "KV_TYPE_BYTES",
    "ContextBudget",
    "FixedMemory",
    "KvShape",
    "MemoryProbe",
    "SystemMemory",
    "context_budget",
    "gpu_free_bytes",
    "kv_bytes_per_token",
    "mem_available_bytes",
]

log = structlog.get_logger(__name__)

# Bytes per cached element for llama.cpp's KV cache types (block formats: bytes per block / 32).
KV_TYPE_BYTES: Mapping[str, float] = {name: kind.bytes_per_element for name, kind in CACHE_TYPES.items()}


def _int(metadata: Mapping[str, str], key: str) -> int | None:
    try:
        return int(str(metadata[key]).strip())
    except (KeyError, ValueError):
        return None


def _type_bytes(kv_type: str) -> float:
    if kv_type not in KV_TYPE_BYTES:
        raise ValueError(f"unknown KV cache type {kv_type!r}; known: {', '.join(KV_TYPE_BYTES)}")
    return KV_TYPE_BYTES[kv_type]


@dataclass(frozen=True)
class KvShape:
    """The KV cache's shape per token: layers, KV heads, and the K and V widths per head."""

    layers: int
    kv_heads: int
    key_dim: int
    value_dim: int

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, str]) -> KvShape | None:
        """From GGUF metadata; None when a key is missing."""
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
        return cls(layers, kv_heads, key_dim, value_dim)

    def bytes_per_token(self, type_k: str = "f16", type_v: str = "f16", *, layers: int | None = None) -> int:
        """KV bytes one token occupies in ``layers`` of the layers (default: all of them)."""
        per_layer = self.kv_heads * (
            self.key_dim * _type_bytes(type_k) + self.value_dim * _type_bytes(type_v)
        )
        return round((self.layers if layers is None else layers) * per_layer)


def kv_bytes_per_token(
    metadata: Mapping[str, str], type_k: str = "f16", type_v: str | None = None
) -> int | None:
    """KV-cache bytes one token occupies, from GGUF metadata (V as K unless given); None when a key is missing."""
    shape = KvShape.from_metadata(metadata)
    return None if shape is None else shape.bytes_per_token(type_k, type_v or type_k)


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
    """Free memory of the NVIDIA GPUs ``nvidia-smi`` lists, summed (llama.cpp splits layers over all
    of them), or None without one."""
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
        values = [int(line.strip()) for line in out.splitlines() if line.strip()]
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return sum(values) * 1024 * 1024 if values else None


class MemoryProbe(Protocol):
    """Where free memory is read from: host RAM and GPU memory, each None when unknown."""

    def host_free(self) -> int | None: ...

    def device_free(self) -> int | None: ...


@dataclass(frozen=True)
class SystemMemory:
    """This machine: ``MemAvailable`` and ``nvidia-smi``."""

    meminfo: str = "/proc/meminfo"

    def host_free(self) -> int | None:
        return mem_available_bytes(self.meminfo)

    def device_free(self) -> int | None:
        return gpu_free_bytes()


@dataclass(frozen=True)
class FixedMemory:
    """Given readings (tests, or a caller that measured already)."""

    host: int | None = None
    device: int | None = None

    def host_free(self) -> int | None:
        return self.host

    def device_free(self) -> int | None:
        return self.device


@dataclass(frozen=True)
class ContextBudget:
    """The context budget of a loaded model.

    ``kv_bytes_per_token``: the whole KV cache per token, ``kv_bytes_per_token_device`` the share of
    the ``gpu_layers`` layers in device memory (the rest is in host memory). ``max_ctx_by_memory``:
    tokens per slot whose KV cache the memory could hold (the cache already allocated for ``n_ctx``
    counted back in when ``allocated``), the smaller of what host and device memory allow;
    ``memory_source`` says which one limits (``ram``, ``vram`` or ``none`` without a reading).
    ``budget_tokens``: ``min(n_ctx, max_ctx_by_memory)``; ``prompt_budget``: what a prompt may use,
    leaving ``reserve_tokens`` for the reply.
    """

    n_ctx: int
    slots: int
    cache_type_k: str
    cache_type_v: str
    gpu_layers: int
    kv_bytes_per_token: int | None
    kv_bytes_per_token_device: int | None
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


def _tokens_fitting(free: int | None, per_token: int, held: int) -> int | None:
    return None if free is None or per_token <= 0 else (free + held) // per_token


@dataclass(frozen=True)
class _MemoryFit:
    """Free host and device memory (None: no reading) and the tokens per slot whose KV cache fits
    in them: the smaller of the two, ``source`` naming the one that limits (``none``: no limit known)."""

    host: int | None
    device: int | None
    tokens: int | None = None
    source: str = "none"


def _memory_fit(
    probe: MemoryProbe, per_token: int | None, per_token_device: int | None, *, slots: int, held_tokens: int
) -> _MemoryFit:
    """How many tokens per slot fit in free memory, ``per_token`` KV bytes each (``per_token_device``
    of them in device memory, which is read only when that is not 0); ``held_tokens`` are already
    allocated and counted back in. Without a device reading the device share counts against host
    memory."""
    device = probe.device_free() if per_token_device else None
    host = probe.host_free()
    if not per_token or per_token_device is None:
        return _MemoryFit(host, device)
    device_share = per_token_device if device is not None else 0
    slots_n = max(slots, 1)
    limits = {
        "vram": _tokens_fitting(device, device_share * slots_n, device_share * held_tokens),
        "ram": _tokens_fitting(
            host, (per_token - device_share) * slots_n, (per_token - device_share) * held_tokens
        ),
    }
    known = {name: limit for name, limit in limits.items() if limit is not None}
    if not known:
        return _MemoryFit(host, device)
    source = min(known, key=lambda name: known[name])
    return _MemoryFit(host, device, known[source], source)


# What context_budget logs of the ContextBudget it returns (the proxy logs all of it at start-up).
_LOGGED = ("n_ctx", "kv_bytes_per_token", "gpu_layers", "max_ctx_by_memory", "budget_tokens", "memory_source")


def context_budget(
    info: EngineInfo,
    *,
    slots: int = 1,
    reserve_tokens: int = 512,
    allocated: bool = True,
    memory: MemoryProbe | None = None,
) -> ContextBudget:
    """Compute the budget for ``info`` (an ``EngineInfo`` of a loaded model).

    The K and V cache types and the offloaded layers come from ``info.llama_options`` (f16, none
    on the GPU for other engines). ``allocated``: the engines are loaded, so ``slots * n_ctx``
    tokens of KV cache already live in memory and are counted back in. Without a device reading
    (no ``nvidia-smi``: Apple's unified memory, for one) the offloaded share counts against host
    memory. ``memory``: where free memory is read (default: this machine).
    """
    options = info.llama_options or LlamaOptions()
    shape = KvShape.from_metadata(info.metadata)
    type_k, type_v = options.cache_type_k, options.cache_type_v
    on_device = offloaded_layers(options.gpu_layers, shape.layers) if shape else 0
    bpt = shape.bytes_per_token(type_k, type_v) if shape else None
    bpt_device = shape.bytes_per_token(type_k, type_v, layers=on_device) if shape else None
    fit = _memory_fit(
        memory if memory is not None else SystemMemory(),
        bpt,
        bpt_device,
        slots=slots,
        held_tokens=info.n_ctx * slots if allocated else 0,
    )
    budget = info.n_ctx if fit.tokens is None else min(info.n_ctx, fit.tokens)
    reserve = min(reserve_tokens, budget // 2)
    result = ContextBudget(
        n_ctx=info.n_ctx,
        slots=slots,
        cache_type_k=options.cache_type_k,
        cache_type_v=options.cache_type_v,
        gpu_layers=on_device,
        kv_bytes_per_token=bpt,
        kv_bytes_per_token_device=bpt_device,
        kv_bytes_per_slot=bpt * info.n_ctx if bpt is not None else None,
        mem_available_bytes=fit.host,
        vram_free_bytes=fit.device,
        memory_source=fit.source,
        max_ctx_by_memory=fit.tokens,
        budget_tokens=budget,
        reserve_tokens=reserve,
        prompt_budget=budget - reserve,
    )
    fields = result.as_dict()
    log.info("context_budget", **{name: fields[name] for name in _LOGGED})
    return result
