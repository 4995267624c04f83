"""``tether launch opencode`` against a scripted server, with the real opencode.

The config launch prints with ``--dry-run`` (merged into a user's config) drives a tool round trip
as opencode's whole config; a real ``launch`` writes it, backs up the user's file and runs opencode
with the arguments after ``--``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.clients.harness import CLIENTS, ROOT, Netns, Server, client_env, run_client
from tests.clients.test_scripted_clients import FINAL, round_trip_turn, tool_requests

pytestmark = pytest.mark.clients

# What a user might already have: launch must keep it (and the run needs the permissions).
USER_CONFIG: dict[str, Any] = {
    "autoupdate": False,
    "share": "disabled",
    "permission": {"edit": "allow", "bash": "allow", "webfetch": "deny"},
}


def launch_command(server: Server, config: Path, *extra: str, client: str = "opencode") -> list[str]:
    """``tether launch CLIENT --no-start`` on ``server``, merging into ``config``."""
    return [
        sys.executable,
        "-m",
        "tether.cli",
        "launch",
        client,
        "--no-start",
        "--port",
        str(server.port),
        "--config-path",
        str(config),
        *extra,
    ]


def dry_run(
    netns: Netns, server: Server, config: Path, client: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    """``tether launch CLIENT --dry-run --no-start EXTRA`` against ``server``; it must succeed."""
    printed = subprocess.run(
        netns.wrap(launch_command(server, config, "--dry-run", *extra, client=client)),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert printed.returncode == 0, printed.stderr
    return printed


def start_server(scripted_server: Any, target: Path) -> tuple[Server, Path, dict[str, str]]:
    arguments = {"filePath": str(target), "content": "written by opencode through tether launch\n"}
    server, log = scripted_server("--tool", "write", "--arguments", json.dumps(arguments), "--final", FINAL)
    return server, log, arguments


def test_opencode_runs_on_the_config_launch_prints(netns, scripted_server, workdir, installed) -> None:
    target = workdir["project"] / "hello.txt"
    server, log, arguments = start_server(scripted_server, target)
    config = workdir["home"] / "opencode.json"
    config.write_text(json.dumps(USER_CONFIG))
    printed = dry_run(netns, server, config, "opencode")
    assert json.loads(config.read_text()) == USER_CONFIG  # a dry run writes nothing
    launched = json.loads(printed.stdout)  # stdout is the merged config alone
    assert {key: launched[key] for key in USER_CONFIG} == USER_CONFIG
    assert launched["model"] == "tether/scripted"  # the name the running server reported

    env = client_env(workdir["home"], OPENCODE_CONFIG_CONTENT=printed.stdout)
    cmd = [str(CLIENTS / "node_modules/.bin/opencode"), "run", "--format", "json", "Create hello.txt"]
    run = run_client(netns, cmd, env=env, cwd=workdir["project"], timeout=120)
    assert not run.timed_out and run.returncode == 0, run.tail()
    assert target.read_text() == arguments["content"], run.tail()
    requests = tool_requests(log)
    assert requests and all(r["model"] == "scripted" for r in requests)
    round_trip_turn(requests, "write")


def test_launch_writes_the_config_and_runs_opencode(netns, scripted_server, workdir, installed) -> None:
    target = workdir["project"] / "hello.txt"
    server, log, arguments = start_server(scripted_server, target)
    config = workdir["home"] / "opencode.json"
    config.write_text(json.dumps(USER_CONFIG))
    env = client_env(workdir["home"], PATH=f"{CLIENTS / 'node_modules/.bin'}:{os.environ.get('PATH', '')}")
    cmd = launch_command(server, config, "--", "run", "--format", "json", "Create hello.txt")
    run = run_client(netns, cmd, env=env, cwd=workdir["project"], timeout=180)
    assert not run.timed_out and run.returncode == 0, run.tail()
    assert target.read_text() == arguments["content"], run.tail()
    events = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert any(e.get("part", {}).get("text") == FINAL for e in events), run.tail()
    (backup,) = workdir["home"].glob("opencode.json.*.bak")
    assert json.loads(backup.read_text()) == USER_CONFIG
    written = json.loads(config.read_text())
    assert {key: written[key] for key in USER_CONFIG} == USER_CONFIG
    assert written["model"] == "tether/scripted"
    round_trip_turn(tool_requests(log), "write")


def test_opencode_connects_to_the_mcp_servers_launch_writes(
    netns, scripted_server, workdir, installed
) -> None:
    server, _, _ = start_server(scripted_server, workdir["project"] / "unused.txt")
    mcp = workdir["home"] / "mcp.json"
    weather = [str(ROOT / "tests" / "support" / "mcp_server.py"), "--only", "get_weather"]
    mcp.write_text(json.dumps({"mcpServers": {"weather": {"command": sys.executable, "args": weather}}}))
    config = workdir["home"] / "opencode.json"
    printed = dry_run(netns, server, config, "opencode", "--mcp-config", str(mcp))
    assert json.loads(printed.stdout)["mcp"]["weather"]["command"] == [sys.executable, *weather]
    env = client_env(workdir["home"], OPENCODE_CONFIG_CONTENT=printed.stdout)
    run = run_client(
        netns,
        [str(CLIENTS / "node_modules/.bin/opencode"), "mcp", "list"],
        env=env,
        cwd=workdir["project"],
        timeout=60,
    )
    assert run.returncode == 0 and "weather" in run.stdout and "connected" in run.stdout, run.tail()
