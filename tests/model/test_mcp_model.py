"""MCP end to end on the bundled model: ``tether serve --mcp-config`` with the SDK-written test server
and the reference filesystem server, both in the sandbox. A plain chat request, with no tools of its
own, gets its answer from a tool round trip through MCP, on the OpenAI and Anthropic routes,
streamed and not; ``/health`` shows the servers and their calls."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.processes import tether_serve

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed (make setup)"
)

ROOT = Path(__file__).resolve().parents[2]
FILESYSTEM = ROOT / ".cache" / "clients" / "node_modules" / ".bin" / "mcp-server-filesystem"
MODEL = "smollm2-135m-instruct"
ASK = {
    "model": MODEL,
    "max_tokens": 200,
    "temperature": 0,
    "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
}


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not FILESYSTEM.exists():
        pytest.fail("the reference filesystem server is not installed: run scripts/install_clients.sh")
    work = tmp_path_factory.mktemp("work")
    servers = {
        "weather": {
            "command": sys.executable,
            "args": [str(ROOT / "tests" / "support" / "mcp_server.py"), "--only", "get_weather"],
        },
        "fs": {"command": str(FILESYSTEM), "args": [str(work)]},
    }
    config = work.parent / "mcp.json"
    config.write_text(json.dumps({"mcpServers": servers}))
    with tether_serve("--work-dir", str(work), "--mcp-config", str(config), "--ctx", "8192") as (url, _):
        yield url


def _ran(interventions: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(i["tool"], i["detail"]) for i in interventions if i["kind"] == "server_tool"]


def test_a_plain_chat_request_is_answered_through_an_mcp_tool(base: str) -> None:
    body = httpx.post(f"{base}/v1/chat/completions", json=ASK, timeout=120).json()
    choice = body["choices"][0]
    assert ("weather_get_weather", "ok") in _ran(body["tether"]["interventions"])
    assert choice["finish_reason"] == "stop" and "21 C" in choice["message"]["content"]


def test_the_answer_streams_after_the_round_trip(base: str) -> None:
    text = ""
    with httpx.stream("POST", f"{base}/v1/chat/completions", json={**ASK, "stream": True}, timeout=120) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                for choice in json.loads(line[6:])["choices"]:
                    text += choice["delta"].get("content") or ""
    assert "21 C" in text


def test_the_anthropic_route_gets_the_same_round_trip(base: str) -> None:
    body = httpx.post(f"{base}/v1/messages", json=ASK, timeout=120).json()
    assert body["stop_reason"] == "end_turn"
    assert "21 C" in body["content"][0]["text"]
    assert ("weather_get_weather", "ok") in _ran(body["tether"]["interventions"])


def test_health_shows_the_servers_and_their_calls(base: str) -> None:
    sources = httpx.get(f"{base}/health", timeout=10).json()["tool_sources"]["mcp"]
    assert sources["weather"]["state"] == sources["fs"]["state"] == "ready"
    assert sources["weather"]["calls"] >= 1 and sources["weather"]["failed_calls"] == 0
    offered = httpx.get(f"{base}/v1/models", timeout=10).json()["data"][0]["tether"]["server_tools"]
    assert "weather_get_weather" in offered and "fs_read_text_file" in offered
