"""What both wire protocols share when reading a request: limits, tool specs, history checks, presets.

The OpenAI and Anthropic translators differ in shapes only; every rule about what a
request may contain lives here once, so a bad request gets the same 400 whichever
protocol it came in: a tool whose ``parameters`` is not a JSON Schema, duplicate tool
names, a tool result that answers no call, text with lone surrogates, absurd sizes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from tether.errors import InvalidRequestError, ModelNotFoundError
from tether.grammar.formats.base import ToolSpec
from tether.guardrails.presets import PRESETS, GuardConfig
from tether.schema_check import schema_problem
from tether.workflows.sessions import SESSION_HEADER, WORKFLOW_HEADER, SessionRef

if TYPE_CHECKING:
    from fastapi import Request

    from tether.proxy.state import AppState
    from tether.turns.events import FinishOut

__all__ = [
    "MAX_LOGIT_BIAS",
    "MAX_SCHEMA_DEPTH",
    "MAX_STOPS",
    "MAX_STOP_CHARS",
    "MAX_TOOLS",
    "Loose",
    "NamedTool",
    "RequestBody",
    "app_state",
    "check_model",
    "find_surrogate",
    "flatten_text",
    "guard_for",
    "interventions_field",
    "session_of",
    "stop_strings",
    "tool_spec",
    "tool_specs",
]

MAX_TOOLS = 128
# What OpenAI and Anthropic accept as a tool name.
TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
MAX_SCHEMA_DEPTH = 32
MAX_SCHEMA_NODES = 5000
MAX_STOPS = 16
MAX_STOP_CHARS = 256
MAX_LOGIT_BIAS = 1024


def find_surrogate(value: Any, path: str = "") -> str | None:
    """The path of the first string (key or value) holding a lone UTF-16 surrogate, or None.

    JSON allows ``"\\ud800"``; it decodes to text no UTF-8 tokenizer can encode.
    """
    if isinstance(value, str):
        return path or "(body)" if any("\ud800" <= ch <= "\udfff" for ch in value) else None
    if isinstance(value, Mapping):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            found = find_surrogate(key, where) or find_surrogate(item, where)
            if found:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = find_surrogate(item, f"{path}[{i}]")
            if found:
                return found
    return None


class Loose(BaseModel):
    """Base of the request models: unknown fields are ignored (clients send many)."""

    model_config = ConfigDict(extra="ignore")


class NamedTool(Loose):
    """What a tool declaration has in both protocols: a name and a description."""

    name: str = Field(min_length=1, max_length=256)
    description: str | None = None


class RequestBody(Loose):
    """Base of every request body: text that no tokenizer can encode is refused with a 400 naming
    where it is."""

    @model_validator(mode="before")
    @classmethod
    def _no_lone_surrogates(cls, data: Any) -> Any:
        where = find_surrogate(data)
        if where is not None:
            raise PydanticCustomError(
                "lone_surrogate",
                "{where} holds a lone UTF-16 surrogate (such as \\ud800), which is not text",
                {"where": where},
            )
        return data


def flatten_text(
    content: str | Sequence[Mapping[str, Any]] | None, *, where: str, kinds: tuple[str, ...], join: str
) -> str:
    """The text of a message's content: a string, or a list of parts whose ``type`` is one of ``kinds``
    joined by ``join`` (OpenAI's parts are fragments of one text; Anthropic's blocks are paragraphs).
    Any other part is refused with a 400 naming it: this server reads text only."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for i, part in enumerate(content):
        kind = part.get("type")
        if kind not in kinds:
            raise InvalidRequestError(
                f"content part type {kind!r} is not supported by this text-only model",
                param=f"{where}[{i}].type",
            )
        parts.append(str(part.get("text", "")))
    return join.join(parts)


def _shape(schema: Any, where: str) -> None:
    """Depth and size bounds: a schema is compiled into automata and walked per value."""
    stack: list[tuple[Any, int]] = [(schema, 1)]
    nodes = 0
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if depth > MAX_SCHEMA_DEPTH or nodes > MAX_SCHEMA_NODES:
            raise InvalidRequestError(
                f"tool schema is too large: more than {MAX_SCHEMA_DEPTH} levels deep or "
                f"{MAX_SCHEMA_NODES} nodes",
                param=where,
            )
        children = node.values() if isinstance(node, Mapping) else node if isinstance(node, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, Mapping | list))


def tool_spec(
    name: str, description: str | None, parameters: Mapping[str, Any] | None, where: str
) -> ToolSpec:
    """A validated ``ToolSpec``: ``parameters`` must be a Draft 2020-12 object schema of sane size."""
    params = dict(parameters) if parameters is not None else {"type": "object", "properties": {}}
    params.pop("$schema", None)
    _shape(params, where)
    problem = schema_problem(params)
    if problem is not None:
        path = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in problem.path)
        raise InvalidRequestError(f"not a valid JSON Schema at {where}{path}: {problem.message}", param=where)
    kind = params.get("type", "object")
    if kind != "object" and not (isinstance(kind, list) and "object" in kind):
        raise InvalidRequestError(
            f"tool parameters must be an object schema (type 'object'), not {kind!r}", param=where
        )
    return ToolSpec(name=name, description=description or "", parameters=params)


def tool_specs(
    tools: Iterable[tuple[str, str | None, Mapping[str, Any] | None, str]],
) -> tuple[ToolSpec, ...]:
    """Specs for ``(name, description, parameters, where)`` rows; duplicate names and too many tools are 400s."""
    specs: list[ToolSpec] = []
    seen: set[str] = set()
    for name, description, parameters, where in tools:
        if not TOOL_NAME.fullmatch(name):
            raise InvalidRequestError(
                f"tool name {name!r} must be 1 to 64 letters, digits, '_' or '-' (as OpenAI and Anthropic "
                "require; a dotted name such as math.sqrt is sent as math_sqrt)",
                param=f"{where.rsplit('.', 1)[0]}.name",
            )
        if len(specs) >= MAX_TOOLS:
            raise InvalidRequestError(f"at most {MAX_TOOLS} tools can be offered", param="tools")
        if name in seen:
            raise InvalidRequestError(
                f"duplicate tool name {name!r}", param=f"{where.rsplit('.', 1)[0]}.name"
            )
        seen.add(name)
        specs.append(tool_spec(name, description, parameters, where))
    return tuple(specs)


def stop_strings(stop: str | Sequence[str] | None) -> tuple[str, ...]:
    """Stop sequences, bounded in number and length; empty strings are refused."""
    stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
    if len(stops) > MAX_STOPS:
        raise InvalidRequestError(f"at most {MAX_STOPS} stop sequences", param="stop")
    for s in stops:
        if not s or len(s) > MAX_STOP_CHARS:
            raise InvalidRequestError(
                f"stop sequences must be 1 to {MAX_STOP_CHARS} characters long", param="stop"
            )
    return stops


def guard_for(preset: str | None, constrain: str | None, default: GuardConfig) -> GuardConfig:
    """The ``tether`` extension field, for both protocols: a preset, then a ``constrain`` override."""
    guard = PRESETS[preset] if preset is not None else default
    return replace(guard, constrain=constrain) if constrain is not None else guard  # type: ignore[arg-type]


def app_state(request: Request) -> AppState:
    """The app's state (``app.state.tether``)."""
    state: AppState = request.app.state.tether
    return state


def check_model(state: AppState, model: str) -> None:
    if model not in state.model_names:
        served = ", ".join(state.model_names)
        raise ModelNotFoundError(f"model {model!r} is not served here; available: {served}", param="model")


def session_of(request: Request) -> SessionRef | None:
    """The workflow session a request names (``X-Tether-Session``, and ``X-Tether-Workflow`` to start
    it); None without the header. The pipeline's ``SessionStage`` resolves it before the first event,
    so an unknown session is still a 404 before anything streams."""
    session = request.headers.get(SESSION_HEADER)
    if session is None:
        return None
    return SessionRef(session, request.headers.get(WORKFLOW_HEADER))


def interventions_field(finish: FinishOut) -> dict[str, Any]:
    """The ``tether`` extension of a reply, for every protocol: ``layers`` (what the backend gets; no
    ``layer0_*`` entry means the post-hoc guard only), ``interventions`` when there were any, and
    ``generations`` when the reply took more than one model run (its ``usage`` sums them all);
    ``{}`` when there is none of these."""
    extra: dict[str, Any] = {}
    if finish.layers:
        extra["layers"] = list(finish.layers)
    if finish.interventions:
        extra["interventions"] = [i.to_dict() for i in finish.interventions]
    if finish.usage.generations > 1:
        extra["generations"] = finish.usage.generations
    return {"tether": extra} if extra else {}
