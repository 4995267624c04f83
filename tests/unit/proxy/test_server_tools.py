"""Server-side tools: the proxy runs configured tools in the sandbox and keeps generating."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import pytest

from tether.config import ServerConfig, Settings
from tether.engine.scheduler import Scheduler
from tether.engine.scripted import ScriptedEngine
from tether.proxy.app import create_app
from tether.server import server_tools

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed (make setup)"
)


def call(name: str, args: dict[str, object]) -> str:
    return json.dumps({"tool_calls": [{"name": name, "arguments": args}]})


def app_for(
    tmp_path: Path, replies: list[str], tools: str = "all", permission: str = "plan"
) -> tuple[httpx.AsyncClient, ScriptedEngine]:
    config = Settings(
        work_dir=str(tmp_path), server_tools=tools.split(","), permission=permission
    ).to_config()
    # One scripted token per byte: the seven tools' prompt alone is over 4 KiB.
    engine = ScriptedEngine(replies, n_ctx=16384)
    app = create_app(config, Scheduler([engine]), server_tools=server_tools(config))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t"), engine


BROWSER = {
    "type": "function",
    "function": {
        "name": "open_browser",
        "parameters": {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]},
    },
}


def ask(text: str, **extra: object) -> dict[str, object]:
    return {"model": "scripted", "messages": [{"role": "user", "content": text}], **extra}


async def test_plain_chat_client_gets_a_final_answer(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("the launch code is 42\n")
    client, engine = app_for(
        tmp_path, [call("read_file", {"path": "notes.txt"}), '{"response": "It says 42."}']
    )
    async with client:
        r = (await client.post("/v1/chat/completions", json=ask("what is in notes.txt?"))).json()
    assert r["choices"][0]["message"]["content"] == "It says 42."
    assert r["choices"][0]["finish_reason"] == "stop"
    assert "the launch code is 42" in engine.prompts[-1]
    kinds = [(i["kind"], i["tool"]) for i in r["tether"]["interventions"]]
    assert ("server_tool", "read_file") in kinds
    assert r["usage"]["prompt_tokens"] > len(engine.prompts[0])


async def test_a_required_tool_choice_is_met_by_the_server_tool_then_the_model_answers(
    tmp_path: Path,
) -> None:
    (tmp_path / "notes.txt").write_text("the launch code is 42\n")
    client, engine = app_for(
        tmp_path, [call("read_file", {"path": "notes.txt"}), '{"response": "It says 42."}']
    )
    async with client:
        r = await client.post(
            "/v1/chat/completions",
            json=ask("what is in notes.txt?", tools=[BROWSER], tool_choice="required"),
        )
    body = r.json()
    assert body["choices"][0]["message"]["content"] == "It says 42.", body
    assert body["choices"][0]["finish_reason"] == "stop" and len(engine.prompts) == 2


async def test_commands_run_inside_the_sandbox(tmp_path: Path) -> None:
    client, engine = app_for(
        tmp_path,
        [call("bash", {"command": "echo made > out.txt; cat /etc/hostname"}), '{"response": "done"}'],
        permission="auto",
    )
    async with client:
        r = (await client.post("/v1/chat/completions", json=ask("run it"))).json()
    assert r["choices"][0]["message"]["content"] == "done"
    assert (tmp_path / "out.txt").read_text() == "made\n"
    assert "sandbox" in engine.prompts[-1]  # the sandbox's own hostname, not the host's


async def test_client_tools_still_pass_through(tmp_path: Path) -> None:
    client_tool = BROWSER
    client, _ = app_for(tmp_path, [call("open_browser", {"url": "http://x"})])
    async with client:
        r = (await client.post("/v1/chat/completions", json=ask("open x", tools=[client_tool]))).json()
    (tc,) = r["choices"][0]["message"]["tool_calls"]
    assert tc["function"]["name"] == "open_browser"


async def test_invalid_permission_lands_on_plan(tmp_path: Path) -> None:
    client, _ = app_for(tmp_path, [call("read_file", {"path": "x"})], permission="yolo")
    async with client:
        models = (await client.get("/v1/models")).json()
    offered = models["data"][0]["tether"]["server_tools"]
    assert "read_file" in offered and "write_file" not in offered and "bash" not in offered


def test_server_tools_need_a_work_dir() -> None:
    from tether.errors import ConfigError

    with pytest.raises(ConfigError, match="work-dir"):
        Settings(server_tools=["read_file"]).to_config()
    assert server_tools(ServerConfig()) is None
