"""The servers of ``--mcp-config`` as server-side tools: each server's tools join the tool box as one
group, named ``<server>_<tool>``, classified for the permission modes, and called through the
server's connection.

Names: the model sees ``<server>_<tool>``; the tool's own MCP name, ``mcp__<server>__<tool>`` and
``<server>.<tool>`` are declared aliases, so a call written in any of them resolves (layer 1).
Kinds: a tool the server marks ``readOnlyHint`` is ``read`` (``plan`` mode runs it); any other is a
``command``, which ``plan`` refuses, ``ask`` sends to the approval path and ``auto`` runs.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import structlog
from mcp import StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from tether.mcp.config import McpServerSpec, tool_name
from tether.mcp.connection import McpConnection
from tether.mcp.launch import SERVER_LIMITS, ServerCommand, server_command
from tether.sandbox.bwrap import SandboxPlan
from tether.sandbox.permissions import ToolKind
from tether.sandbox.toolbox import Tool, ToolBox

__all__ = ["McpTools", "mcp_tool"]

log = structlog.get_logger(__name__)

_MAX_DESCRIPTION = 1024  # a server's essay on its tool; the tool view shortens it further in a small context
_EMPTY = {"type": "object", "properties": {}}


def mcp_tool(server: str, tool: types.Tool, call: Any) -> Tool:
    """``tool`` of ``server`` as a tool-box entry whose handler is ``call(tool_name, arguments)``."""
    read_only = tool.annotations is not None and tool.annotations.read_only_hint is True
    kind: ToolKind = "read" if read_only else "command"
    params = tool.input_schema if tool.input_schema.get("type") == "object" else _EMPTY
    params = json.loads(json.dumps(params))  # the tool's own copy
    description = (tool.description or tool.title or "").strip()[:_MAX_DESCRIPTION]
    return Tool(
        name=tool_name(server, tool.name),
        description=description,
        parameters=dict(params),
        kind=kind,
        handler=partial(call, tool.name),
        aliases=(tool.name, f"mcp__{server}__{tool.name}", f"{server}.{tool.name}"),
    )


class McpTools:
    """The configured servers as a :class:`~tether.sandbox.toolbox.ToolSource`. ``plan``: the sandbox
    stdio servers start in (None: this configuration has none); ``result_chars``: where a result is
    cut; ``startup_wait_s``: how long the server's start waits for them."""

    def __init__(
        self,
        specs: Sequence[McpServerSpec],
        *,
        work_dir: Path,
        plan: SandboxPlan | None,
        result_chars: int,
        startup_wait_s: float = 30.0,
    ) -> None:
        self.specs = tuple(specs)
        self.work_dir = work_dir
        self.plan = plan
        self.result_chars = result_chars
        self.startup_wait_s = startup_wait_s
        self.connections: list[McpConnection] = []
        self._toolbox: ToolBox | None = None
        # Fixed now, before any tool runs (tether.mcp.launch); a bad command or path fails the start.
        self._commands: dict[str, ServerCommand] = {}
        for spec in self.specs:
            if spec.transport == "stdio":
                if plan is None:
                    raise ValueError("stdio MCP servers need a sandbox plan")
                self._commands[spec.name] = server_command(spec, plan, work_dir)

    async def start(self, toolbox: ToolBox) -> None:
        self._toolbox = toolbox
        self.connections = [
            McpConnection(spec, self._transport(spec), on_tools=self._tools, result_chars=self.result_chars)
            for spec in self.specs
        ]
        await asyncio.gather(*(c.start(self.startup_wait_s) for c in self.connections))
        for conn in self.connections:
            if conn.state != "ready":
                log.warning("mcp_server_not_ready", server=conn.spec.name, error=conn.last_error or None)

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self.connections))

    def snapshot(self) -> dict[str, Any]:
        return {"mcp": {c.spec.name: c.snapshot() for c in self.connections}}

    def _tools(self, conn: McpConnection, tools: list[types.Tool]) -> None:
        assert self._toolbox is not None
        server = conn.spec.name
        problems = self._toolbox.replace_group(
            f"mcp:{server}", [mcp_tool(server, t, conn.call) for t in tools]
        )
        for problem in problems:
            log.warning("mcp_tool_skipped", server=server, problem=problem)

    def _transport(self, spec: McpServerSpec) -> Any:
        if spec.transport == "http":
            return partial(_http, spec)
        assert self.plan is not None
        return partial(_sandboxed, self._commands[spec.name], self.plan)


@asynccontextmanager
async def _http(spec: McpServerSpec) -> AsyncIterator[tuple[Any, Any]]:
    async with (
        httpx2.AsyncClient(
            headers=dict(spec.headers), timeout=httpx2.Timeout(30.0, read=spec.timeout_s)
        ) as http,
        streamable_http_client(spec.url, http_client=http) as streams,
    ):
        yield streams


@asynccontextmanager
async def _sandboxed(command: ServerCommand, plan: SandboxPlan) -> AsyncIterator[tuple[Any, Any]]:
    """The server's process in bubblewrap, in a pids cgroup of its own where the host has one."""
    cgroup = None
    if plan.controller is not None and SERVER_LIMITS.max_processes is not None:
        cgroup = plan.controller.create(SERVER_LIMITS.max_processes + 2)  # + bwrap's monitor and init
    try:
        argv = command.joining(str(cgroup.procs_file) if cgroup else None)
        params = StdioServerParameters(command=argv[0], args=argv[1:], env=command.env)
        transport: AbstractAsyncContextManager[Any] = stdio_client(params, errlog=sys.stderr)
        async with transport as streams:
            yield streams
    finally:
        if cgroup is not None:
            cgroup.kill_all()
            await cgroup.remove()
