"""Output specs compiled for remote engines, one module per dialect: GBNF (llama-server), structural
tags and JSON schema (vLLM), JSON schema (Ollama)."""

from tether.grammar.remote.gbnf import GbnfGrammar, compile_gbnf
from tether.grammar.remote.structural_tag import VllmConstraint, compile_ollama, compile_vllm

__all__ = ["GbnfGrammar", "VllmConstraint", "compile_gbnf", "compile_ollama", "compile_vllm"]
