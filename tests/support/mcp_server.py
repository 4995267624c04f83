"""A small MCP server written with the official SDK, for the MCP tests: real tools, and the ways a
server goes wrong (it crashes, hangs, writes malformed JSON-RPC, reaches for the network or for
files outside its work dir).

    python tests/support/mcp_server.py                 # stdio
    python tests/support/mcp_server.py --http PORT     # streamable HTTP on 127.0.0.1:PORT/mcp
    python tests/support/mcp_server.py --only add,hang # only these tools
    python tests/support/mcp_server.py --banner        # print a line that is not JSON-RPC first
    python tests/support/mcp_server.py --mute          # never answer, not even the handshake

It imports only the SDK, so it runs inside the sandbox with the virtualenv mounted read-only.
"""

from __future__ import annotations

import fcntl
import os
import socket
import stat
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import Context, Image, MCPServer
from mcp_types import ToolAnnotations

READ_ONLY = ToolAnnotations(read_only_hint=True)

server = MCPServer("tether-test")


@server.tool(annotations=READ_ONLY)
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"{city}: 21 C, sunny"


@server.tool(annotations=READ_ONLY)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def write_note(name: str, text: str) -> str:
    """Write a note into the work dir."""
    Path(name).write_text(text)
    return f"wrote {len(text)} characters to {name}"


@server.tool(annotations=READ_ONLY)
def write_outside(path: str) -> str:
    """Try to write a file at an absolute path (the sandbox refuses it)."""
    try:
        Path(path).write_text("x")
    except OSError as exc:
        return f"refused: {exc.strerror}"
    return "written"


@server.tool(annotations=READ_ONLY)
def reach_network(host: str, port: int) -> str:
    """Try to open a TCP connection (the sandbox has no network)."""
    try:
        socket.create_connection((host, port), timeout=3).close()
    except OSError as exc:
        return f"no network: {exc}"
    return "connected"


@server.tool(annotations=READ_ONLY)
def read_env(name: str) -> str:
    """The value of an environment variable, or '(unset)'."""
    return os.environ.get(name, "(unset)")


@server.tool(annotations=READ_ONLY)
def crash() -> str:
    """Exit the server process at once."""
    os._exit(3)


@server.tool(annotations=READ_ONLY)
def hang() -> str:
    """Never answer."""
    time.sleep(3600)
    return "late"


@server.tool(annotations=READ_ONLY)
def garble() -> str:
    """Write a line that is not JSON-RPC where the answer should be, then nothing."""
    os.write(_wire(), b"this is not json\n")
    time.sleep(3600)
    return "late"


def _wire() -> int:
    """The descriptor the SDK answers on: it moves the protocol's pipe off fd 1 (pointing fd 1 at
    stderr, so stray prints cannot corrupt it); the pipe is the one other write-only pipe."""
    stderr = os.fstat(2)
    for fd in sorted(int(n) for n in os.listdir("/proc/self/fd")):
        try:
            st = os.fstat(fd)
            writable = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY
        except OSError:
            continue
        if fd > 2 and stat.S_ISFIFO(st.st_mode) and writable and st.st_ino != stderr.st_ino:
            return fd
    raise RuntimeError("no protocol pipe found")


@server.tool(annotations=READ_ONLY)
def picture() -> Image:
    """A small PNG."""
    return Image(data=b"\x89PNG\r\n\x1a\n" + b"\0" * 2040, format="png")


@server.tool(annotations=READ_ONLY)
def long_text(lines: int) -> str:
    """Many lines of text."""
    return "\n".join(f"line {i}" for i in range(lines))


@server.tool(annotations=READ_ONLY)
def fail(reason: str) -> str:
    """Raise an error with the given reason."""
    raise ValueError(reason)


@server.tool(annotations=READ_ONLY)
async def grow(ctx: Context) -> str:
    """Add a tool named 'late_tool' and tell the client the list changed."""

    def late_tool() -> str:
        """Added while the server runs."""
        return "late tool ran"

    server.add_tool(late_tool, annotations=READ_ONLY)
    await ctx.notify_tools_changed()
    return "added late_tool"


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--only" in args:
        keep = set(args[args.index("--only") + 1].split(","))
        for name in {t.name for t in server._tool_manager.list_tools()} - keep:
            server.remove_tool(name)
    if "--banner" in args:
        os.write(1, b"test server starting\n")  # before the SDK takes stdout: a stray line
    if "--mute" in args:
        time.sleep(3600)
    if "--http" in args:
        server.run("streamable-http", host="127.0.0.1", port=int(args[args.index("--http") + 1]))
    else:
        server.run()
