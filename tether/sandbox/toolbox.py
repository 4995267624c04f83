"""The tool registry the workflow runner talks to.

``ToolBox.specs()`` lists the tools in OpenAI's function-tool shape (only those
the permission policy can ever allow); ``ToolBox.call()`` parses and validates
the arguments against the tool's JSON Schema, applies the policy and runs the
tool. It never raises for a tool's failure: the model gets an ``is_error``
result it can read and react to.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import jsonschema
import structlog

from tether.errors import TetherError
from tether.grammar.formats.base import ToolSpec
from tether.sandbox.permissions import PermissionPolicy, ToolKind

__all__ = ["Tool", "ToolBox", "ToolHandler", "ToolResult", "ToolSource"]

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What the model sees as the tool message."""

    content: str
    is_error: bool = False


ToolHandler = Callable[[dict[str, Any]], Awaitable[ToolResult]]


@dataclass(frozen=True, slots=True)
class Tool:
    """One callable tool: its schema, its kind (for permissions) and its coroutine."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    kind: ToolKind
    handler: ToolHandler = field(repr=False)
    aliases: tuple[str, ...] = ()  # other names a call may use for it (ToolSpec.aliases)

    def tool_spec(self) -> ToolSpec:
        """The tool as offered to the model (with a copy of the schema)."""
        return ToolSpec(self.name, self.description, json.loads(json.dumps(self.parameters)), self.aliases)

    def spec(self) -> dict[str, Any]:
        """The OpenAI ``{"type": "function", "function": {...}}`` entry (with a copy of the schema)."""
        return self.tool_spec().to_openai()


class ToolBox:
    """Named tools behind one permission policy."""

    def __init__(self, tools: Iterable[Tool] = (), *, policy: PermissionPolicy | None = None) -> None:
        self._policy = policy if policy is not None else PermissionPolicy()
        self._tools: dict[str, Tool] = {}
        self._validators: dict[str, jsonschema.protocols.Validator] = {}
        self._groups: dict[str, list[str]] = {}
        for tool in tools:
            self.register(tool)

    @property
    def policy(self) -> PermissionPolicy:
        return self._policy

    def register(self, tool: Tool) -> None:
        """Add ``tool``; its schema is checked now so a bad schema fails at start-up."""
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is already registered")
        schema = dict(tool.parameters)
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        self._tools[tool.name] = tool
        self._validators[tool.name] = cls(schema)

    def replace_group(self, group: str, tools: Iterable[Tool]) -> list[str]:
        """Make ``tools`` the whole of ``group`` (one MCP server's list, which may change while the
        server runs); returns the problems, one line per tool left out (a name another tool has, a
        schema that is not a JSON Schema). Never raises: one bad tool does not take the others."""
        for name in self._groups.pop(group, []):
            self._tools.pop(name, None)
            self._validators.pop(name, None)
        kept: list[str] = []
        problems: list[str] = []
        for tool in tools:
            try:
                self.register(tool)
            except Exception as exc:  # a server's schema can be broken in any way
                problems.append(f"{tool.name}: {type(exc).__name__}: {exc}".splitlines()[0][:300])
                continue
            kept.append(tool.name)
        self._groups[group] = kept
        return problems

    def offered(self) -> list[Tool]:
        """The tools the policy can allow (denied and, in plan mode, mutating ones are left out)."""
        return [t for t in self._tools.values() if self._policy.offers(t.name, t.kind)]

    def names(self) -> list[str]:
        """Every registered tool name, offered or not."""
        return list(self._tools)

    def specs(self) -> list[dict[str, Any]]:
        """OpenAI tool entries for the tools the policy can allow (denied and, in plan mode, mutating ones are left out)."""
        return [t.spec() for t in self.offered()]

    async def call(self, name: str, arguments: str | Mapping[str, Any] | None) -> ToolResult:
        """Run tool ``name`` with ``arguments`` (a JSON string or a mapping); never raises for tool failures."""
        tool = self._tools.get(name)
        if tool is None:
            known = ", ".join(
                sorted(t.name for t in self._tools.values() if self._policy.offers(t.name, t.kind))
            )
            return ToolResult(f"unknown tool {name!r}; available tools: {known or 'none'}", is_error=True)
        args = _parse_arguments(arguments)
        if isinstance(args, ToolResult):
            return args
        try:
            errors = sorted(self._validators[name].iter_errors(args), key=lambda e: list(e.path))
        except Exception as exc:  # a schema that checks but cannot be applied (an unresolvable $ref)
            return ToolResult(
                f"{name}'s schema cannot be checked: {type(exc).__name__}: {exc}"[:500], is_error=True
            )
        if errors:
            detail = "; ".join(_describe(e) for e in errors[:5])
            return ToolResult(f"invalid arguments for {name}: {detail}", is_error=True)
        decision = await self._policy.check(name, tool.kind, args)
        if not decision.allowed:
            log.info("tool_call_denied", tool=name, reason=decision.reason)
            return ToolResult(f"permission denied: {decision.reason}", is_error=True)
        try:
            result = await tool.handler(args)
        except TetherError as exc:
            log.info("tool_call_failed", tool=name, error=exc.message[:200])
            return ToolResult(f"{name} failed: {exc.message}", is_error=True)
        except Exception as exc:
            log.warning("tool_call_crashed", tool=name, error=repr(exc)[:200])
            return ToolResult(f"{name} failed: {type(exc).__name__}: {exc}", is_error=True)
        return result


def _parse_arguments(arguments: str | Mapping[str, Any] | None) -> dict[str, Any] | ToolResult:
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except json.JSONDecodeError as exc:
            return ToolResult(f"arguments are not valid JSON: {exc.msg} at position {exc.pos}", is_error=True)
    else:
        parsed = arguments
    if not isinstance(parsed, Mapping):
        return ToolResult("arguments must be a JSON object", is_error=True)
    return dict(parsed)


def _describe(error: jsonschema.ValidationError) -> str:
    where = "/".join(str(p) for p in error.path)
    return f"{where}: {error.message}" if where else error.message


@runtime_checkable
class ToolSource(Protocol):
    """Something that adds tools to a :class:`ToolBox` while the server runs (the MCP servers of
    ``--mcp-config``): started with the server, closed at its end."""

    async def start(self, toolbox: ToolBox) -> None: ...

    async def close(self) -> None: ...

    def snapshot(self) -> dict[str, Any]:
        """Its state for ``/health``, by name."""
        ...
