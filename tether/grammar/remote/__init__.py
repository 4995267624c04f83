"""Layer 0 for remote engines: one engine-neutral ``OutputSpec``, compiled per engine dialect."""

from tether.grammar.remote.gbnf import GbnfGrammar, compile_gbnf
from tether.grammar.remote.spec import ArgumentsSpec, NameChoiceSpec, OutputSpec, ReplySpec
from tether.grammar.remote.structural_tag import VllmConstraint, compile_ollama, compile_vllm

__all__ = ["ArgumentsSpec", "GbnfGrammar", "NameChoiceSpec", "OutputSpec", "ReplySpec", "compile_gbnf"]
__all__ += ["VllmConstraint", "compile_ollama", "compile_vllm"]
