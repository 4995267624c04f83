"""MCP servers as server-side tools, with real servers in the real sandbox (no model): the SDK-written
test server over stdio and streamable HTTP, and the reference filesystem server. A call reaches the
server and its result comes back shaped; a server that crashes, hangs or writes malformed JSON-RPC
ends that one call with an error and is back for the next; the sandbox keeps it off the network and
out of everything but its work dir; the permission modes hold for MCP tools."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.support.processes import stop
from tests.support.socket_server import free_port
from tether.errors import ConfigError
from tether.mcp import parse_mcp_servers
from tether.mcp.tools import McpTools
from tether.sandbox import PermissionPolicy, SandboxConfig, ToolBox
from tether.sandbox.bwrap import prepare

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed (make setup)"
)

ROOT = Path(__file__).resolve().parents[2]
SERVER = str(ROOT / "tests" / "support" / "mcp_server.py")
FILESYSTEM = ROOT / ".cache" / "clients" / "node_modules" / ".bin" / "mcp-server-filesystem"


def _test_server(**extra: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [SERVER], "timeout": 3, **extra}


async def _started(work_dir: Path, servers: dict[str, Any], mode: str = "auto") -> tuple[McpTools, ToolBox]:
    specs = parse_mcp_servers({"mcpServers": servers})
    plan = prepare(SandboxConfig(work_dir=work_dir))
    source = McpTools(specs, work_dir=work_dir, plan=plan, result_chars=300, startup_wait_s=30)
    box = ToolBox(policy=PermissionPolicy.from_settings(mode))
    await source.start(box)
    return source, box


@pytest_asyncio.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[McpTools, ToolBox, Path]]:
    work = tmp_path / "work"
    work.mkdir()
    source, box = await _started(work, {"test": _test_server()})
    try:
        yield source, box, work
    finally:
        await source.close()


async def test_tools_are_offered_by_server_and_name_and_a_call_comes_back(
    served: tuple[McpTools, ToolBox, Path],
) -> None:
    source, box, _ = served
    tools = {t.name: t for t in box.offered()}
    assert {"test_get_weather", "test_add", "test_write_note", "test_hang"} <= set(tools)
    assert tools["test_add"].aliases == ("add", "mcp__test__add", "test.add")
    assert tools["test_add"].kind == "read" and tools["test_write_note"].kind == "command"
    assert (await box.call("test_add", {"a": 2, "b": 3})).content == "5"
    assert (await box.call("test_get_weather", {"city": "Paris"})).content == "Paris: 21 C, sunny"
    assert source.snapshot()["mcp"]["test"]["state"] == "ready"


async def test_results_are_shaped_for_a_small_model(served: tuple[McpTools, ToolBox, Path]) -> None:
    _, box, _ = served
    assert (await box.call("test_picture", {})).content == "[image: image/png, 2.0 KB]"
    long = await box.call("test_long_text", {"lines": 200})
    assert long.content.endswith("chars]") and len(long.content) < 330
    failed = await box.call("test_fail", {"reason": "nope"})
    assert failed.is_error and "fail" in failed.content


async def test_writes_land_in_the_work_dir_and_nowhere_else(served: tuple[McpTools, ToolBox, Path]) -> None:
    _, box, work = served
    assert not (await box.call("test_write_note", {"name": "note.txt", "text": "abc"})).is_error
    assert (work / "note.txt").read_text() == "abc"
    outside = work.parent / "outside.txt"
    assert (await box.call("test_write_outside", {"path": str(outside)})).content.startswith("refused")
    assert (await box.call("test_write_outside", {"path": "/usr/escape.txt"})).content.startswith("refused")
    assert not outside.exists() and not Path("/usr/escape.txt").exists()


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP port on the host's loopback that accepts connections."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock.getsockname()[1]


async def test_no_network_unless_the_entry_grants_it(tmp_path: Path, listener: int) -> None:
    source, box = await _started(tmp_path, {"closed": _test_server(), "open": _test_server(network=True)})
    try:
        args = {"host": "127.0.0.1", "port": listener}
        assert (await box.call("closed_reach_network", args)).content.startswith("no network")
        assert (await box.call("open_reach_network", args)).content == "connected"
    finally:
        await source.close()


@pytest.mark.parametrize(
    ("tool", "said", "within_s"),
    [("crash", "connection closed", 2.0), ("hang", "did not answer", 5.0), ("garble", "not JSON-RPC", 2.0)],
)
async def test_a_failing_server_ends_one_call_with_an_error_and_comes_back(
    served: tuple[McpTools, ToolBox, Path], tool: str, said: str, within_s: float
) -> None:
    source, box, _ = served
    started = time.monotonic()
    result = await box.call(f"test_{tool}", {})
    assert (
        result.is_error and result.content.startswith("Error: MCP server 'test'") and said in result.content
    )
    assert time.monotonic() - started < within_s
    assert (await box.call("test_add", {"a": 1, "b": 1})).content == "2"  # restarted for the next call
    state = source.snapshot()["mcp"]["test"]
    assert state["state"] == "ready" and state["restarts"] == 1 and state["failed_calls"] == 1


async def test_a_changed_tool_list_is_offered(served: tuple[McpTools, ToolBox, Path]) -> None:
    _, box, _ = served
    await box.call("test_grow", {})
    for _ in range(50):
        if "test_late_tool" in box.names():
            break
        await asyncio.sleep(0.1)
    assert (await box.call("test_late_tool", {})).content == "late tool ran"


async def test_plan_offers_only_read_only_tools_and_ask_needs_an_approver(tmp_path: Path) -> None:
    for mode, offered, refusal in (("plan", False, "read-only"), ("ask", True, "needs approval")):
        source, box = await _started(tmp_path, {"test": _test_server()}, mode=mode)
        try:
            assert ("test_write_note" in {t.name for t in box.offered()}) is offered
            assert "test_add" in {t.name for t in box.offered()}
            denied = await box.call("test_write_note", {"name": "n.txt", "text": "x"})
            assert denied.is_error and refusal in denied.content
            assert not (tmp_path / "n.txt").exists()
        finally:
            await source.close()


async def test_streamable_http_server(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, SERVER, "--http", str(port), "--only", "add"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        source, box = await _started(tmp_path, {"remote": {"url": f"http://127.0.0.1:{port}/mcp"}})
        try:
            assert [t.name for t in box.offered()] == ["remote_add"]
            assert (await box.call("remote_add", {"a": 20, "b": 22})).content == "42"
        finally:
            await source.close()
    finally:
        stop(proc)


@pytest.mark.skipif(
    not FILESYSTEM.exists(), reason="the filesystem server is not installed (scripts/install_clients.sh)"
)
async def test_the_reference_filesystem_server_works_in_the_work_dir(tmp_path: Path) -> None:
    (tmp_path / "hello.txt").write_text("hi there")
    servers = {"fs": {"command": str(FILESYSTEM), "args": [str(tmp_path)]}}
    source, box = await _started(tmp_path, servers)
    try:
        assert (await box.call("fs_read_text_file", {"path": "/workspace/hello.txt"})).content == "hi there"
        listed = await box.call("fs_list_allowed_directories", {})
        assert "/workspace" in listed.content and str(tmp_path) not in listed.content
        wrote = await box.call("fs_write_file", {"path": "/workspace/out.txt", "content": "ok"})
        assert not wrote.is_error and (tmp_path / "out.txt").read_text() == "ok"
        escaped = await box.call("fs_write_file", {"path": "/etc/escape.txt", "content": "x"})
        assert escaped.is_error and not Path("/etc/escape.txt").exists()
    finally:
        await source.close()


def test_a_command_that_is_not_there_fails_the_start(tmp_path: Path) -> None:
    specs = parse_mcp_servers({"mcpServers": {"gone": {"command": "no-such-mcp-server-here"}}})
    with pytest.raises(ConfigError, match=r"'gone'.*not found"):
        McpTools(specs, work_dir=tmp_path, plan=prepare(SandboxConfig(work_dir=tmp_path)), result_chars=100)


async def test_a_banner_at_start_is_not_a_failure_and_a_mute_server_is_restarted(tmp_path: Path) -> None:
    servers = {
        "loud": _test_server(args=[SERVER, "--banner"]),
        "mute": _test_server(args=[SERVER, "--mute"], timeout=2),
    }
    source, box = await _started(tmp_path, servers)
    try:
        assert (await box.call("loud_add", {"a": 1, "b": 2})).content == "3"
        state = source.snapshot()["mcp"]
        assert state["loud"]["restarts"] == 0
        assert state["mute"]["state"] != "ready" and "did not start within 2 s" in state["mute"]["last_error"]
        assert state["mute"]["restarts"] >= 1  # tried again, not stuck in its first handshake
    finally:
        await source.close()


async def test_the_entrys_env_reaches_the_server_and_not_a_command_line(tmp_path: Path) -> None:
    from tether.mcp.launch import server_command

    secret = {"MCP_TEST_TOKEN": "tok-5f0c1e"}
    specs = parse_mcp_servers({"mcpServers": {"test": _test_server(env=secret)}})
    command = server_command(specs[0], prepare(SandboxConfig(work_dir=tmp_path)), tmp_path)
    assert not any("tok-5f0c1e" in arg for arg in command.argv)
    assert command.env["HOME"] == "/tmp" and command.env["USER"] == "nobody"
    source, box = await _started(tmp_path, {"test": _test_server(env=secret)})
    try:
        assert (await box.call("test_read_env", {"name": "MCP_TEST_TOKEN"})).content == "tok-5f0c1e"
        assert (await box.call("test_read_env", {"name": "SSH_AUTH_SOCK"})).content == "(unset)"
    finally:
        await source.close()


def test_paths_the_sandbox_must_not_show_are_refused(tmp_path: Path) -> None:
    from tether.mcp.launch import server_command

    plan = prepare(SandboxConfig(work_dir=tmp_path))
    (tmp_path / "out").symlink_to("/etc")
    for entry, said in (
        ({"readOnlyPaths": ["/"]}, "cannot be shown"),
        ({"readOnlyPaths": [str(Path.home())]}, "cannot be shown"),
        ({"args": [SERVER, "/dev/null"]}, "cannot be shown"),
        ({"args": [SERVER, str(tmp_path / "out")]}, "links out of it"),
    ):
        (spec,) = parse_mcp_servers({"mcpServers": {"test": _test_server(**entry)}})
        with pytest.raises(ConfigError, match=said):
            server_command(spec, plan, tmp_path)
    (spec,) = parse_mcp_servers({"mcpServers": {"test": _test_server(args=[SERVER, str(tmp_path)])}})
    argv = server_command(spec, plan, tmp_path).argv
    assert argv[-1] == "/workspace"  # the work dir, as the server sees it
    binds = {
        argv[k + 1] for k in range(len(argv) - 2) if argv[k] == "--ro-bind" and argv[k + 1] == argv[k + 2]
    }
    assert SERVER in binds and str(Path(SERVER).parent) not in binds  # the file, not its folder


def test_a_checkout_under_tmp_may_be_shown_but_not_tmp_itself(tmp_path: Path) -> None:
    from tether.mcp.launch import server_command

    plan = prepare(SandboxConfig(work_dir=tmp_path))
    inside = tmp_path.parent / "checkout-under-tmp.py"
    inside.write_text("")
    (spec,) = parse_mcp_servers({"mcpServers": {"t": _test_server(readOnlyPaths=[str(inside)])}})
    assert str(inside) in server_command(spec, plan, tmp_path).argv
    (spec,) = parse_mcp_servers({"mcpServers": {"t": _test_server(readOnlyPaths=["/tmp"])}})
    with pytest.raises(ConfigError, match="cannot be shown"):
        server_command(spec, plan, tmp_path)
