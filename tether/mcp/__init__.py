"""MCP servers as server-side tools: the ``mcpServers`` file of ``--mcp-config``, each stdio server
in the sandbox, its tools offered beside the built-ins under names a small model can hit.

The package imports the MCP SDK (an extra: ``pip install 'tether[mcp]'``) only in
:mod:`tether.mcp.connection` and :mod:`tether.mcp.tools`; reading the file needs nothing more.
See docs/mcp.md.
"""

from __future__ import annotations

from tether.mcp.config import McpServerSpec, load_mcp_config, parse_mcp_servers, read_mcp_config, tool_name

__all__ = ["McpServerSpec", "load_mcp_config", "parse_mcp_servers", "read_mcp_config", "tool_name"]
