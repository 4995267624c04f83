"""What a remote engine's output must look like, said once for every engine dialect.

Layer 0 on the embedded engine is a logits processor built from the format declaration
(:mod:`tether.grammar.plan`). A remote engine applies constraints on its own side, each in
its own language (llama-server: GBNF with lazy triggers; vLLM: structural tags or JSON
schema; Ollama: a JSON schema). The turn pipeline describes the wanted output with one of
the specs below — the same declaration, tools and mode layer 0 gets — and each engine
adapter compiles it into its request fields.
"""

from __future__ import annotations

from dataclasses import dataclass

from tether.grammar.formats.base import ToolCallFormat, ToolSpec
from tether.grammar.plan import Mode

__all__ = ["ArgumentsSpec", "NameChoiceSpec", "OutputSpec", "ReplySpec"]


@dataclass(frozen=True)
class ReplySpec:
    """A reply under the format's tool-call rules over ``tools``.

    ``required``: a call must come (``tool_choice`` required or named); ``answer_only``: only a text
    answer may (a re-decided turn); ``parallel``: more than one call may.
    """

    fmt: ToolCallFormat
    tools: tuple[ToolSpec, ...]
    mode: Mode
    required: bool = False
    parallel: bool = True
    answer_only: bool = False


@dataclass(frozen=True)
class NameChoiceSpec:
    """The whole output is exactly one of ``names`` (the guard's re-pick)."""

    names: tuple[str, ...]


@dataclass(frozen=True)
class ArgumentsSpec:
    """The whole output is one arguments object valid for ``tool`` (the guard's repair)."""

    tool: ToolSpec


OutputSpec = ReplySpec | NameChoiceSpec | ArgumentsSpec
