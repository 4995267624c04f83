"""Binding a workflow's tools to code: trusted Python callables and sandbox tools.

``workflow_toolbox(workflow, handlers=..., toolbox=...)`` returns a
``tether.sandbox.ToolBox`` holding exactly the workflow's tools. A tool with a
handler runs that trusted Python callable in-process (sync or async, called with
the arguments as keywords); any other tool is delegated to ``toolbox`` (e.g. from
``tether.sandbox.make_toolbox``), whose own permission policy and sandbox still
apply. Either way failures come back as ``ToolResult(is_error=True)``.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any

from tether.errors import ConfigError
from tether.grammar.formats.base import ToolSpec
from tether.sandbox import PermissionMode, PermissionPolicy, Tool, ToolBox, ToolKind, ToolResult
from tether.workflows.spec import Workflow, schema_of

__all__ = ["PythonHandler", "python_tool", "workflow_toolbox"]

PythonHandler = Callable[..., Any]


def _as_result(value: Any) -> ToolResult:
    if isinstance(value, ToolResult):
        return value
    if isinstance(value, str):
        return ToolResult(value)
    return ToolResult(json.dumps(value, ensure_ascii=False, default=str))


def python_tool(
    name: str,
    fn: PythonHandler,
    *,
    parameters: Mapping[str, Any] | None = None,
    description: str = "",
    kind: ToolKind = "read",
) -> Tool:
    """A ``sandbox.Tool`` running the trusted callable ``fn(**arguments)``; its return value (str,
    ``ToolResult`` or anything JSON-serializable) is the result, an exception an error result."""

    async def handler(args: dict[str, Any]) -> ToolResult:
        value = fn(**args)
        if inspect.isawaitable(value):
            value = await value
        return _as_result(value)

    return Tool(name, description or (fn.__doc__ or "").strip(), schema_of(parameters), kind, handler)


def _delegate(toolbox: ToolBox, name: str) -> Callable[[dict[str, Any]], Any]:
    async def handler(args: dict[str, Any]) -> ToolResult:
        return await toolbox.call(name, args)

    return handler


def workflow_toolbox(
    workflow: Workflow,
    *,
    handlers: Mapping[str, PythonHandler] | None = None,
    toolbox: ToolBox | None = None,
) -> tuple[ToolBox, tuple[ToolSpec, ...]]:
    """The workflow's tools as one ``ToolBox`` plus their specs for the model.

    The outer box runs in mode ``auto``: handlers are the operator's own code, and
    delegated tools are still gated by ``toolbox``'s policy. A tool that has neither a
    handler nor an offered toolbox entry is a ``ConfigError``.
    """
    handlers = dict(handlers or {})
    unknown = sorted(set(handlers) - {t.name for t in workflow.tools})
    if unknown:
        raise ConfigError(f"handlers: {unknown[0]!r} is not a tool of workflow {workflow.name!r}")
    offered = {s["function"]["name"]: s["function"] for s in (toolbox.specs() if toolbox else [])}
    tools: list[Tool] = []
    specs: list[ToolSpec] = []
    for tdef in workflow.tools:
        if tdef.name in handlers:
            fn = handlers[tdef.name]
            tool = python_tool(tdef.name, fn, parameters=tdef.parameters, description=tdef.description)
        elif toolbox is not None and tdef.name in offered:
            entry = offered[tdef.name]
            params = tdef.parameters if tdef.parameters is not None else entry.get("parameters")
            desc = tdef.description or str(entry.get("description") or "")
            tool = Tool(tdef.name, desc, schema_of(params), "read", _delegate(toolbox, tdef.name))
        else:
            where = "is not offered by the toolbox (permission mode?)" if toolbox else "has no handler"
            raise ConfigError(f"tools: {tdef.name!r} of workflow {workflow.name!r} {where}")
        tools.append(tool)
        specs.append(ToolSpec(tool.name, tool.description, dict(tool.parameters)))
    box = ToolBox(tools, policy=PermissionPolicy(mode=PermissionMode.AUTO))
    return box, tuple(specs)
