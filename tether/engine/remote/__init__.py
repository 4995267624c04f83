"""Engines that run elsewhere: tether keeps its pipeline and forwards generation (docs/backends.md)."""

from tether.engine.remote.llama_server import LlamaServerEngine, connect_llama_server
from tether.engine.remote.vllm import VllmEngine, connect_vllm

__all__ = ["LlamaServerEngine", "VllmEngine", "connect_llama_server", "connect_vllm"]
