"""What a generation's output must look like, said once for every engine: the output specs.

Every consumer of layer 0 — the turn core, the guard's re-pick and repair, a chat backend —
describes the wanted output with one of these engine-neutral specs (a structured reply too), and the engine compiles
it (``Engine.compile``): an in-process engine into a logits processor over its vocabulary
(:mod:`tether.grammar.local`), llama-server into GBNF with lazy triggers, vLLM into a
structural tag or JSON schema, Ollama into a JSON schema (:mod:`tether.grammar.remote`).
Parts an engine cannot apply (steering and grounding act on logits) are left out by what the
engine declares in ``EngineInfo.layers``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tether.grammar.formats.base import ToolCallFormat, ToolSpec
from tether.grammar.plan import Mode
from tether.grammar.steering import Steering

__all__ = ["GroundingSpec", "JsonSpec", "NameChoiceSpec", "OutputSpec", "ReplySpec"]


@dataclass(frozen=True)
class GroundingSpec:
    """A preference for copying argument values from the conversation (``source``), not a constraint.

    ``opener``: the bytes that open a call's arguments; ``bias``: the logit bonus of a copied
    continuation; ``listed``: the byte range of a list the request enumerates (one item per call);
    ``flags``: per tool, the boolean parameters the request mentions; ``answered``: values the task's
    answered calls used; ``request``: the user's request."""

    source: str
    opener: bytes
    bias: float = 4.0
    listed: tuple[int, int] | None = None
    flags: Mapping[str, frozenset[str]] = field(default_factory=dict)
    # (tool, parameter, value) of the current task's calls that answered: a file already read by a
    # tool is not the file name preferred for its next call.
    answered: frozenset[tuple[str, str, str]] = frozenset()
    # What the user asked: of several ids a result lists, the one whose record it describes.
    request: str = ""
    # In a loop: the last turn's argument values and its results' text (they end ``source``):
    # :class:`tether.grammar.recent.LatestRound`.
    latest_args: str = ""
    latest_results: str = ""
    # What the user and the tools said (``source`` less the client's instructions): a file name they
    # write is preferred to one only the system prompt gives as an example.
    said: str = ""


@dataclass(frozen=True)
class JsonSpec:
    """The whole output is one JSON value valid for ``schema`` (None: any JSON object): a structured
    reply (``response_format``), or the guard's repair of one tool's arguments (:meth:`of_tool`).
    ``hint`` names the value for grammars that name their rules."""

    schema: Mapping[str, Any] | None
    hint: str = "reply"
    # Tokens the generation may write: near the end the value closes as briefly as it can, so the
    # reply still parses (in-process engines; None: no budget).
    budget: int | None = None

    @classmethod
    def of_tool(cls, tool: ToolSpec) -> JsonSpec:
        """One arguments object valid for ``tool`` (the guard's argument repair)."""
        return cls(tool.parameters, tool.name)


@dataclass(frozen=True)
class ReplySpec:
    """A reply under the format's tool-call rules over ``tools``.

    ``required``: a call must come (``tool_choice`` required or named); ``answer_only``: only a text
    answer may (a re-decided turn); ``parallel``: more than one call may; ``answer``: the text answer
    is one JSON value of that spec, from its first byte (a structured reply beside the tools: one
    grammar, a call or the value; its ``budget`` holds for the call too), None: free text. ``steering`` and
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
    answer: JsonSpec | None = None


@dataclass(frozen=True)
class NameChoiceSpec:
    """The whole output is exactly one of ``names`` (the guard's re-pick)."""

    names: tuple[str, ...]


OutputSpec = ReplySpec | NameChoiceSpec | JsonSpec
