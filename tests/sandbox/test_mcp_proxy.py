"""MCP tools through the proxy on a real socket, with a scripted engine (the model's side is
tests/model/test_mcp_model.py): a call in any MCP spelling reaches the server; a server that crashes,
hangs or writes malformed JSON-RPC gives that call an error result the model reads, the request
still gets its answer, and the proxy stays healthy for the next one."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.socket_server import serving
from tether.config import Settings
from tether.engine.scheduler import Scheduler
from tether.engine.scripted import ScriptedEngine
from tether.proxy.app import create_app
from tether.server import server_tools

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed (make setup)"
)

SERVER = str(Path(__file__).resolve().parents[2] / "tests" / "support" / "mcp_server.py")


def _call(name: str, args: dict[str, Any]) -> str:
    return json.dumps({"tool_calls": [{"name": name, "arguments": args}]})


def _ask(text: str) -> dict[str, Any]:
    # No layer 0: the name as written reaches layer 1 (a remote engine without grammars sees this).
    guard = {"preset": "resolve", "constrain": "off"}
    return {"model": "scripted", "messages": [{"role": "user", "content": text}], "tether": guard}


def test_mcp_calls_and_failures_through_the_proxy(tmp_path: Path) -> None:
    mcp = {"mcpServers": {"test": {"command": sys.executable, "args": [SERVER], "timeout": 3}}}
    config = Settings(work_dir=str(tmp_path), mcp_config=json.dumps(mcp)).to_config()
    replies = [_call("mcp__test__add", {"a": 2, "b": 3}), '{"response": "It is 5."}']
    for tool in ("crash", "hang", "garble"):
        replies += [_call(f"test.{tool}", {}), '{"response": "The tool failed."}']
    engine = ScriptedEngine(replies, n_ctx=32768)
    app = create_app(config, Scheduler([engine]), server_tools=server_tools(config))
    with serving(app, lifespan="on") as base:
        added = httpx.post(f"{base}/v1/chat/completions", json=_ask("add 2 and 3"), timeout=60).json()
        assert added["choices"][0]["message"]["content"] == "It is 5."
        notes = added["tether"]["interventions"]
        assert ("name_resolved", "test_add") in [(n["kind"], n["tool"]) for n in notes]
        assert ("server_tool", "ok", "5") in [(n["kind"], n["detail"], n.get("after")) for n in notes]
        for tool, said in (
            ("crash", "connection closed"),
            ("hang", "did not answer"),
            ("garble", "not JSON-RPC"),
        ):
            started = time.monotonic()
            body = httpx.post(f"{base}/v1/chat/completions", json=_ask(f"run {tool}"), timeout=60).json()
            assert body["choices"][0]["message"]["content"] == "The tool failed.", body
            (ran,) = [n for n in body["tether"]["interventions"] if n["kind"] == "server_tool"]
            assert ran["tool"] == f"test_{tool}" and ran["detail"] == "error" and said in ran["after"]
            assert time.monotonic() - started < 20
            assert "Error: MCP server 'test'" in engine.prompts[-1]  # the model read the error
            health = httpx.get(f"{base}/health", timeout=10)
            assert health.status_code == 200 and health.json()["status"] == "ok"
        deadline, state = time.monotonic() + 30, dict[str, Any]()
        while (state.get("state"), state.get("restarts")) != ("ready", 3):  # back after the last one
            assert time.monotonic() < deadline, f"the server did not come back: {state}"
            time.sleep(0.2)
            state = httpx.get(f"{base}/health", timeout=10).json()["tool_sources"]["mcp"]["test"]
        assert state["calls"] == 4 and state["failed_calls"] == 3
