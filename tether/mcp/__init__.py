"""MCP servers as server-side tools: the ``mcpServers`` file of ``--mcp-config``, each stdio server
in the sandbox, its tools offered beside the built-ins under names a small model can hit.

See docs/mcp.md.
"""

from __future__ import annotations

from tether.mcp.config import McpServerSpec, load_mcp_config, parse_mcp_servers, tool_name
from tether.mcp.connection import McpConnection
from tether.mcp.tools import McpTools, mcp_tool

__all__ = [
    "McpConnection",
    "McpServerSpec",
    "McpTools",
    "load_mcp_config",
    "mcp_tool",
    "parse_mcp_servers",
    "tool_name",
]
