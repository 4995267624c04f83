"""What a workflow is: frozen dataclasses built in Python or loaded from YAML/TOML.

A ``Workflow`` names its tools (JSON Schema or pydantic-model parameters), the
steps that must succeed before a terminal tool may run, prerequisites between
tools (optionally matched on arguments: ``edit_file(path=X)`` needs
``read_file(path=X)`` first), the terminal tools that end a run, and budgets.
Everything is validated once, at construction, with one-line ``ConfigError``s.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from pydantic import BaseModel

from tether.chat import FAILURE_PATTERN
from tether.errors import ConfigError
from tether.grammar.formats.base import ToolSpec

__all__ = ["Budgets", "Prerequisite", "Step", "ToolDef", "Workflow", "schema_of"]

_EMPTY_SCHEMA: Mapping[str, Any] = {"type": "object", "properties": {}}


def schema_of(parameters: Mapping[str, Any] | type[BaseModel] | None) -> dict[str, Any]:
    """A JSON Schema object for tool parameters given as a schema, a pydantic model class or None."""
    if parameters is None:
        return dict(_EMPTY_SCHEMA)
    if isinstance(parameters, type) and issubclass(parameters, BaseModel):
        schema = parameters.model_json_schema()
        schema.pop("title", None)
        return schema
    if not isinstance(parameters, Mapping):
        raise ConfigError(
            f"tool parameters must be a JSON Schema object or a pydantic model, not {parameters!r}"
        )
    return dict(parameters)


@dataclass(frozen=True)
class ToolDef:
    """A tool the workflow offers. ``parameters`` None: take the schema from the toolbox at run time."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] | None = None

    @staticmethod
    def of(
        name: str, parameters: Mapping[str, Any] | type[BaseModel] | None = None, description: str = ""
    ) -> ToolDef:
        """Build from a JSON Schema, a pydantic model class (its JSON Schema) or None."""
        return ToolDef(name, description, None if parameters is None else schema_of(parameters))

    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, dict(self.parameters or _EMPTY_SCHEMA))


@dataclass(frozen=True)
class Step:
    """A required step: a successful call of ``tool`` whose arguments include ``args``."""

    tool: str
    args: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""

    def label(self) -> str:
        """``read_file(path='a.txt')`` or ``read_file``: how nudges name the step."""
        if not self.args:
            return self.tool
        inner = ", ".join(f"{k}={v!r}" for k, v in self.args.items())
        return f"{self.tool}({inner})"


@dataclass(frozen=True)
class Prerequisite:
    """``tool`` may only run after ``requires`` succeeded; ``match`` pairs (arg of ``tool``, arg of
    ``requires``) that must be equal, e.g. ``(("path", "path"),)``."""

    tool: str
    requires: str
    match: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Budgets:
    """Limits of one run.

    ``max_iterations``: model calls in total (retries included); ``max_retries_per_step``:
    corrective turns (guardrail retries and blocked calls) without progress on a step;
    ``max_consecutive_tool_errors``: tool failures in a row; ``max_violations``: blocked calls
    (premature terminal, missing prerequisite) in the whole run.
    """

    max_iterations: int = 16
    max_retries_per_step: int = 3
    max_consecutive_tool_errors: int = 3
    max_violations: int = 6

    def __post_init__(self) -> None:
        for name in (
            "max_iterations",
            "max_retries_per_step",
            "max_consecutive_tool_errors",
            "max_violations",
        ):
            if getattr(self, name) < (1 if name == "max_iterations" else 0):
                raise ConfigError(f"budgets.{name}: must be >= {1 if name == 'max_iterations' else 0}")


@dataclass(frozen=True)
class Workflow:
    """A declarative workflow. ``ordered``: a step only counts once the steps before it are done.

    ``error_pattern`` (a regex) marks tool results that count as failures when the proxy only
    sees message text (a tool message has no error flag in the OpenAI protocol).
    """

    name: str
    tools: tuple[ToolDef, ...]
    terminal: tuple[str, ...]
    steps: tuple[Step, ...] = ()
    prerequisites: tuple[Prerequisite, ...] = ()
    budgets: Budgets = field(default_factory=Budgets)
    system: str = ""
    task: str = ""
    description: str = ""
    ordered: bool = False
    error_pattern: str = FAILURE_PATTERN

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("name: a workflow needs a name")
        names = [t.name for t in self.tools]
        if not names:
            raise ConfigError("tools: a workflow needs at least one tool")
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ConfigError(f"tools: duplicate tool name {dupes[0]!r}")
        known = set(names)
        for i, tool in enumerate(self.tools):
            if tool.parameters is None:
                continue
            try:
                jsonschema.validators.validator_for(dict(tool.parameters)).check_schema(dict(tool.parameters))
            except jsonschema.SchemaError as exc:
                raise ConfigError(f"tools[{i}].parameters: invalid JSON Schema ({exc.message})") from None
        if not self.terminal:
            raise ConfigError("terminal: name at least one terminal tool")
        for i, name in enumerate(self.terminal):
            if name not in known:
                raise ConfigError(f"terminal[{i}]: {name!r} is not a declared tool")
        for i, step in enumerate(self.steps):
            if step.tool not in known:
                raise ConfigError(f"steps[{i}].tool: {step.tool!r} is not a declared tool")
            if step.tool in self.terminal:
                raise ConfigError(f"steps[{i}].tool: {step.tool!r} is terminal; terminal tools end the run")
        for i, pre in enumerate(self.prerequisites):
            for key, value in (("tool", pre.tool), ("requires", pre.requires)):
                if value not in known:
                    raise ConfigError(f"prerequisites[{i}].{key}: {value!r} is not a declared tool")
            if pre.tool == pre.requires:
                raise ConfigError(f"prerequisites[{i}].requires: a tool cannot require itself")
        try:
            re.compile(self.error_pattern)
        except re.error as exc:
            raise ConfigError(f"error_pattern: invalid regular expression ({exc})") from None

    @staticmethod
    def build(
        name: str,
        *,
        tools: Iterable[ToolDef | str],
        terminal: str | Sequence[str],
        steps: Iterable[Step | str] = (),
        prerequisites: Iterable[Prerequisite | tuple[str, str] | tuple[str, str, Sequence[str]]] = (),
        **options: Any,
    ) -> Workflow:
        """Convenience constructor: plain strings for tools and steps, tuples for prerequisites
        (``("edit_file", "read_file", ["path"])``)."""
        return Workflow(
            name=name,
            tools=tuple(t if isinstance(t, ToolDef) else ToolDef(t) for t in tools),
            terminal=(terminal,) if isinstance(terminal, str) else tuple(terminal),
            steps=tuple(s if isinstance(s, Step) else Step(s) for s in steps),
            prerequisites=tuple(_prerequisite(p) for p in prerequisites),
            **options,
        )

    def tool(self, name: str) -> ToolDef | None:
        return next((t for t in self.tools if t.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        """The workflow file's fields as a JSON-ready mapping; ``workflow_from_mapping`` (the loader)
        reads it back into an equal ``Workflow``."""
        return {
            "name": self.name,
            "description": self.description,
            "system": self.system,
            "task": self.task,
            "tools": [
                {"name": t.name, "description": t.description, "parameters": _plain(t.parameters)}
                for t in self.tools
            ],
            "steps": [
                {"tool": s.tool, "args": _plain(s.args), "description": s.description} for s in self.steps
            ],
            "prerequisites": [
                {
                    "tool": p.tool,
                    "requires": p.requires,
                    "match": [m for m, _ in p.match]
                    if all(m == t for m, t in p.match)
                    else {m: t for m, t in p.match},
                }
                for p in self.prerequisites
            ],
            "terminal": list(self.terminal),
            "ordered": self.ordered,
            "budgets": {
                "max_iterations": self.budgets.max_iterations,
                "max_retries_per_step": self.budgets.max_retries_per_step,
                "max_consecutive_tool_errors": self.budgets.max_consecutive_tool_errors,
                "max_violations": self.budgets.max_violations,
            },
            "error_pattern": self.error_pattern,
        }

    def prerequisites_of(self, tool: str) -> tuple[Prerequisite, ...]:
        return tuple(p for p in self.prerequisites if p.tool == tool)


def _plain(value: Any) -> Any:
    """Mappings as dicts and sequences as lists, all the way down (for JSON)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _prerequisite(value: Prerequisite | tuple[str, str] | tuple[str, str, Sequence[str]]) -> Prerequisite:
    if isinstance(value, Prerequisite):
        return value
    if len(value) == 2:
        return Prerequisite(value[0], value[1])
    tool, requires, match = value
    return Prerequisite(tool, requires, tuple((m, m) for m in match))
