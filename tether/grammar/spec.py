"""What a generation's output must look like, said once for every engine: the output specs.

Every consumer of layer 0 — the turn core, the guard's re-pick and repair, a chat backend —
describes the wanted output with one of these engine-neutral specs, and the engine compiles
it (``Engine.compile``): an in-process engine into a logits processor over its vocabulary
(:mod:`tether.grammar.local`), llama-server into GBNF with lazy triggers, vLLM into a
structural tag or JSON schema, Ollama into a JSON schema (:mod:`tether.grammar.remote`).
Parts an engine cannot apply (steering and grounding act on logits) are left out by what the
engine declares in ``EngineInfo.layers``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tether.grammar.formats.base import ToolCallFormat, ToolSpec
from tether.grammar.plan import Mode
from tether.grammar.steering import Steering

__all__ = ["ArgumentsSpec", "GroundingSpec", "NameChoiceSpec", "OutputSpec", "ReplySpec"]


@dataclass(frozen=True)
class GroundingSpec:
    """A preference for copying argument values from the conversation (``source``), not a constraint.

    ``opener``: the bytes that open a call's arguments; ``bias``: the logit bonus of a copied
    continuation; ``listed``: the byte range of a list the request enumerates (one item per call);
    ``flags``: per tool, the boolean parameters the request mentions."""

    source: str
    opener: bytes
    bias: float = 4.0
    listed: tuple[int, int] | None = None
    flags: Mapping[str, frozenset[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class ReplySpec:
    """A reply under the format's tool-call rules over ``tools``.

    ``required``: a call must come (``tool_choice`` required or named); ``answer_only``: only a text
    answer may (a re-decided turn); ``parallel``: more than one call may. ``steering`` and
    ``grounding`` act on logits: only engines that declare ``layer0_decision`` / ``layer0_grounded``
    are given them.
    """

    fmt: ToolCallFormat
    tools: tuple[ToolSpec, ...]
    mode: Mode
    required: bool = False
    parallel: bool = True
    answer_only: bool = False
    steering: Steering | None = None
    grounding: GroundingSpec | None = None


@dataclass(frozen=True)
class NameChoiceSpec:
    """The whole output is exactly one of ``names`` (the guard's re-pick)."""

    names: tuple[str, ...]


@dataclass(frozen=True)
class ArgumentsSpec:
    """The whole output is one arguments object valid for ``tool`` (the guard's repair)."""

    tool: ToolSpec


OutputSpec = ReplySpec | NameChoiceSpec | ArgumentsSpec
