"""The KV budget with separate K and V cache types and layers offloaded to a GPU, on injected readings."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from tests.support.asgi import asgi_client
from tether.config import ServerConfig
from tether.engine.base import EngineInfo
from tether.engine.llama_options import LlamaOptions
from tether.engine.scripted import ScriptedEngine
from tether.workflows.budget import (
    FixedMemory,
    KvShape,
    context_budget,
    gpu_free_bytes,
    kv_bytes_per_token,
)

GIB = 2**30
# 24 layers, 4 KV heads of width 128 (2048 / 16): an f16 layer holds 4 * (128 * 2 + 128 * 2) = 2048 B/token.
MODEL = {
    "general.architecture": "llama",
    "llama.block_count": "24",
    "llama.attention.head_count": "16",
    "llama.attention.head_count_kv": "4",
    "llama.embedding_length": "2048",
}
SMOLLM2 = {
    "general.architecture": "llama",
    "llama.block_count": "30",
    "llama.attention.head_count": "9",
    "llama.attention.head_count_kv": "3",
    "llama.embedding_length": "576",
}


def info(options: LlamaOptions | None, n_ctx: int = 65536, metadata: dict[str, str] = MODEL) -> EngineInfo:
    return EngineInfo("m", n_ctx, None, "", "", frozenset(), 10, metadata=metadata, llama_options=options)


def test_k_and_v_are_priced_separately() -> None:
    # 30 layers * 3 KV heads * (64 * 34/32 for q8_0 K + 64 * 2 for f16 V) = 30 * 3 * (68 + 128)
    assert kv_bytes_per_token(SMOLLM2, "q8_0", "f16") == 30 * 3 * (68 + 128) == 17_640
    assert kv_bytes_per_token(SMOLLM2, "f16", "q4_0") == 30 * 3 * (128 + 36)
    assert kv_bytes_per_token(SMOLLM2, "q8_0") == 12_240  # V as K when not given
    shape = KvShape.from_metadata(MODEL)
    assert shape == KvShape(layers=24, kv_heads=4, key_dim=128, value_dim=128)
    assert shape.bytes_per_token() == 24 * 2048 and shape.bytes_per_token(layers=16) == 16 * 2048
    with pytest.raises(ValueError, match="known: f16, q8_0"):
        shape.bytes_per_token("q3_k")


def test_sixteen_of_24_layers_on_a_gpu_with_1_gib_free() -> None:
    # --gpu-layers 17: the output layer and the last 16 layers; their KV cache is 16 * 2048 B/token in
    # VRAM, the other 8 layers' 8 * 2048 B/token in RAM.
    budget = context_budget(
        info(LlamaOptions(gpu_layers=17)), memory=FixedMemory(host=8 * GIB, device=GIB), allocated=False
    )
    assert (budget.gpu_layers, budget.kv_bytes_per_token, budget.kv_bytes_per_token_device) == (
        16,
        49_152,
        32_768,
    )
    assert budget.max_ctx_by_memory == GIB // 32_768 == 32_768  # RAM would allow 8 GiB / 16 KiB = 524,288
    assert budget.memory_source == "vram" and budget.vram_free_bytes == GIB
    assert budget.budget_tokens == 32_768 and budget.prompt_budget == 32_768 - 512


def test_mixed_cache_types_on_a_partial_offload() -> None:
    options = LlamaOptions(gpu_layers=17, flash_attn=True, cache_type_k="q8_0", cache_type_v="q4_0")
    budget = context_budget(info(options), memory=FixedMemory(host=8 * GIB, device=GIB), allocated=False)
    per_layer = 4 * (128 * 34 // 32 + 128 * 18 // 32)  # 4 * (136 + 72) = 832 B/token
    assert (budget.cache_type_k, budget.cache_type_v) == ("q8_0", "q4_0")
    assert budget.kv_bytes_per_token_device == 16 * per_layer == 13_312
    assert budget.max_ctx_by_memory == GIB // 13_312 == 80_659
    assert budget.budget_tokens == 65_536  # n_ctx is the smaller one now


def test_host_memory_limits_when_the_cpu_share_is_the_tighter_one() -> None:
    budget = context_budget(
        info(LlamaOptions(gpu_layers=17)),
        memory=FixedMemory(host=100 * 2**20, device=80 * GIB),
        allocated=False,
    )
    assert budget.max_ctx_by_memory == 100 * 2**20 // (8 * 2048) == 6_400 and budget.memory_source == "ram"


def test_allocated_cache_is_counted_back_in_per_memory() -> None:
    # Two slots of 8192 tokens already hold 2 * 8192 * 32 KiB = 512 MiB of VRAM: 1 GiB free + that,
    # over 2 slots * 32 KiB per token.
    budget = context_budget(
        info(LlamaOptions(gpu_layers=17), n_ctx=8192), slots=2, memory=FixedMemory(host=64 * GIB, device=GIB)
    )
    assert budget.max_ctx_by_memory == (GIB + 2 * 8192 * 32_768) // (2 * 32_768) == 24_576
    assert budget.budget_tokens == 8192


def test_all_layers_on_the_gpu_leave_host_memory_out() -> None:
    budget = context_budget(
        info(LlamaOptions(gpu_layers=-1)), memory=FixedMemory(host=1, device=GIB), allocated=False
    )
    assert budget.gpu_layers == 24 and budget.kv_bytes_per_token_device == budget.kv_bytes_per_token
    assert budget.max_ctx_by_memory == GIB // 49_152 and budget.memory_source == "vram"


def test_without_a_device_reading_the_offloaded_share_counts_against_host_memory() -> None:
    # Apple's unified memory, or no nvidia-smi: the whole cache is compared with host memory.
    budget = context_budget(info(LlamaOptions(gpu_layers=-1)), memory=FixedMemory(host=GIB), allocated=False)
    assert budget.vram_free_bytes is None and budget.memory_source == "ram"
    assert budget.max_ctx_by_memory == GIB // 49_152 == 21_845


@dataclass
class CountingMemory:
    asked: list[str] = field(default_factory=list)

    def host_free(self) -> int | None:
        self.asked.append("host")
        return 4 * GIB

    def device_free(self) -> int | None:
        self.asked.append("device")
        return GIB


def test_a_cpu_only_model_never_asks_for_device_memory() -> None:
    probe = CountingMemory()
    for options in (None, LlamaOptions(), LlamaOptions(gpu_layers=1)):  # 1: only the output layer
        budget = context_budget(info(options), memory=probe, allocated=False)
        assert budget.gpu_layers == 0 and budget.memory_source == "ram"
    assert probe.asked == ["host"] * 3
    context_budget(info(LlamaOptions(gpu_layers=2)), memory=probe)
    assert probe.asked[-2:] == ["device", "host"]


def test_gpu_free_bytes_sums_what_nvidia_smi_lists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    smi = tmp_path / "nvidia-smi"
    monkeypatch.setenv("PATH", str(tmp_path))
    assert gpu_free_bytes() is None  # no nvidia-smi at all
    smi.write_text("#!/bin/sh\nprintf '1024\\n2048\\n'\n")
    smi.chmod(0o755)
    assert gpu_free_bytes() == 3072 * 2**20
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    assert gpu_free_bytes() is None


class _Loaded(ScriptedEngine):
    """A scripted engine that says it was loaded by llama.cpp with ``options``."""

    def __init__(self, options: LlamaOptions) -> None:
        super().__init__()
        self._described = replace(super().info, metadata=dict(SMOLLM2), llama_options=options)

    @property
    def info(self) -> EngineInfo:
        return self._described


async def test_models_endpoint_reports_the_cache_types_and_offload() -> None:
    options = LlamaOptions(gpu_layers=5, flash_attn=True, cache_type_k="q8_0", cache_type_v="q8_0")
    async with asgi_client(_Loaded(options), ServerConfig(), timeout=10) as client:
        card = (await client.get("/v1/models")).json()["data"][0]["tether"]
    budget = card["context_budget"]
    assert (budget["cache_type_k"], budget["cache_type_v"], budget["gpu_layers"]) == ("q8_0", "q8_0", 4)
    assert budget["kv_bytes_per_token"] == 12_240 and budget["kv_bytes_per_token_device"] == 4 * 3 * 68 * 2
