"""One turn pipeline for every protocol, bare that is bare, and usage that counts every generation.

Scripted engine behind the real app: this tests the proxy's pipeline, not the model.
The protocol tests are parametrized over OpenAI chat completions, Anthropic messages,
Ollama's chat and OpenAI's Responses, so a stage that one protocol skipped would fail
here for that protocol.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tether.config import ServerConfig
from tether.engine.scheduler import Scheduler
from tether.engine.scripted import ScriptedEngine
from tether.proxy.app import create_app
from tether.server import server_tools

NUMBER_TOOL = {
    "name": "set_volume",
    "description": "Set the volume",
    "parameters": {"type": "object", "properties": {"level": {"type": "integer"}}, "required": ["level"]},
}


def generic(name: str, args: dict[str, Any]) -> str:
    return json.dumps({"tool_calls": [{"name": name, "arguments": args}]})


# -- bare is bare -------------------------------------------------------------------------


@pytest.mark.parametrize("preset", ["bare", "names", "resolve"])
async def test_a_string_for_an_integer_comes_back_untouched_as_a_call(scripted, preset: str) -> None:
    """No layer below ``full`` checks values, and parsing never coerces: the call is the model's."""
    client, _ = scripted([generic("set_volume", {"level": "7"})])
    body = {
        "model": "scripted",
        "messages": [{"role": "user", "content": "volume 7"}],
        "tools": [{"type": "function", "function": NUMBER_TOOL}],
        "tether": {"preset": preset, "constrain": "off"},
    }
    r = (await client.post("/v1/chat/completions", json=body)).json()
    (call,) = r["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "set_volume" and r["choices"][0]["finish_reason"] == "tool_calls"
    assert json.loads(call["function"]["arguments"]) == {"level": "7"}
    assert r["choices"][0]["message"]["content"] is None
    assert "interventions" not in r["tether"]  # nothing was done to it


async def test_full_coerces_it_and_records_the_coercion(scripted) -> None:
    client, _ = scripted([generic("set_volume", {"level": "7"})])
    body = {
        "model": "scripted",
        "messages": [{"role": "user", "content": "volume 7"}],
        "tools": [{"type": "function", "function": NUMBER_TOOL}],
        "tether": {"preset": "full", "constrain": "off"},
    }
    r = (await client.post("/v1/chat/completions", json=body)).json()
    (call,) = r["choices"][0]["message"]["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == {"level": 7}
    (note,) = r["tether"]["interventions"]
    assert note["kind"] == "args_coerced" and "string to integer" in note["detail"]
    assert (note["before"], note["after"]) == ({"level": "7"}, {"level": 7})


# -- both protocols, one pipeline ------------------------------------------------------------


@dataclass(frozen=True)
class Protocol:
    """How one protocol asks for a turn and reads the answer back."""

    name: str
    path: str
    body: Callable[[list[dict[str, Any]], list[dict[str, Any]], int], dict[str, Any]]
    calls: Callable[[dict[str, Any]], list[str]]
    text: Callable[[dict[str, Any]], str]
    tokens: Callable[[dict[str, Any]], int]


def notes(reply: dict[str, Any]) -> list[str]:
    """The kinds of the interventions: in tether's own field, the same in every protocol."""
    return [i["kind"] for i in reply.get("tether", {}).get("interventions", [])]


def _openai_body(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]], max_tokens: int
) -> dict[str, Any]:
    return {
        "model": "scripted",
        "messages": messages,
        "tools": [{"type": "function", "function": t} for t in tools],
        "max_tokens": max_tokens,
    }


def _anthropic_body(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]], max_tokens: int
) -> dict[str, Any]:
    out = [{"role": m["role"], "content": m["content"]} for m in messages if m["role"] != "system"]
    body: dict[str, Any] = {"model": "scripted", "max_tokens": max_tokens, "messages": out}
    if tools:
        body["tools"] = [
            {"name": t["name"], "description": t.get("description", ""), "input_schema": t["parameters"]}
            for t in tools
        ]
    return body


OPENAI = Protocol(
    "openai",
    "/v1/chat/completions",
    _openai_body,
    lambda r: [c["function"]["name"] for c in r["choices"][0]["message"].get("tool_calls") or []],
    lambda r: r["choices"][0]["message"]["content"] or "",
    lambda r: r["usage"]["completion_tokens"],
)
ANTHROPIC = Protocol(
    "anthropic",
    "/v1/messages",
    _anthropic_body,
    lambda r: [b["name"] for b in r["content"] if b["type"] == "tool_use"],
    lambda r: "".join(b["text"] for b in r["content"] if b["type"] == "text"),
    lambda r: r["usage"]["output_tokens"],
)
OLLAMA = Protocol(
    "ollama",
    "/api/chat",
    lambda messages, tools, max_tokens: {
        "model": "scripted",
        "messages": messages,
        "tools": [{"type": "function", "function": t} for t in tools],
        "options": {"num_predict": max_tokens},
        "stream": False,
    },
    lambda r: [c["function"]["name"] for c in r["message"].get("tool_calls") or []],
    lambda r: r["message"]["content"],
    lambda r: r["eval_count"],
)
RESPONSES = Protocol(
    "responses",
    "/v1/responses",
    lambda messages, tools, max_tokens: {
        "model": "scripted",
        "input": messages,
        "tools": [{"type": "function", **t} for t in tools],
        "max_output_tokens": max_tokens,
    },
    lambda r: [o["name"] for o in r["output"] if o["type"] == "function_call"],
    lambda r: "".join(c["text"] for o in r["output"] if o["type"] == "message" for c in o["content"]),
    lambda r: r["usage"]["output_tokens"],
)
PROTOCOLS = pytest.mark.parametrize("proto", [OPENAI, ANTHROPIC, OLLAMA, RESPONSES], ids=lambda p: p.name)

WORKFLOW_TOOLS = [
    {"name": "run_tests", "description": "Run the tests", "parameters": {"type": "object", "properties": {}}},
    {
        "name": "submit",
        "description": "Finish",
        "parameters": {
            "type": "object",
            "properties": {"summary": {"type": "string"}},
            "required": ["summary"],
        },
    },
]


@PROTOCOLS
async def test_step_enforcement_blocks_a_premature_terminal_call(tmp_path: Path, proto: Protocol) -> None:
    wf = tmp_path / "wf.yaml"
    wf.write_text(
        "name: ship\ntools:\n"
        "  - name: run_tests\n    parameters: {type: object, properties: {}}\n"
        "  - name: submit\n    parameters: {type: object, properties: {summary: {type: string}}}\n"
        "steps: [run_tests]\nterminal: submit\n",
        encoding="utf-8",
    )
    engine = ScriptedEngine([generic("submit", {"summary": "done"})])
    app = create_app(ServerConfig(workflows=(str(wf),), preset="full", constrain="off"), Scheduler([engine]))
    headers = {"X-Tether-Session": f"s-{proto.name}", "X-Tether-Workflow": "ship"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
        body = proto.body([{"role": "user", "content": "ship it"}], WORKFLOW_TOOLS, 200)
        r = (await http.post(proto.path, json=body, headers=headers)).json()
    # submit before run_tests never reaches the client: the turn is regenerated with the blocked call and
    # its error in context and tool_choice naming run_tests; the model writes submit again, which is not
    # offered then, so the guard's constrained re-pick lands on run_tests.
    assert proto.calls(r) == ["run_tests"]
    assert notes(r) == ["workflow_blocked", "workflow_regenerated", "repick"]
    assert len(engine.prompts) == 3
    assert "Not executed: submit finishes the task" in engine.prompts[1]
    assert "There is no tool named 'submit'" in engine.prompts[2]


@PROTOCOLS
async def test_compaction_fits_an_overlong_history(proto: Protocol) -> None:
    engine = ScriptedEngine(["fits now"], n_ctx=2048)
    app = create_app(ServerConfig(compaction=True), Scheduler([engine]))
    filler = "word " * 120
    history: list[dict[str, Any]] = [{"role": "user", "content": "start"}]
    for i in range(12):
        history += [
            {"role": "assistant", "content": f"{i} {filler}"},
            {"role": "user", "content": f"more {i}"},
        ]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
        r = await http.post(proto.path, json=proto.body(history, [], 64))
    assert r.status_code == 200, r.text
    assert proto.text(r.json()) == "fits now"
    assert "Earlier conversation elided" in engine.prompts[0] and len(engine.prompts[0]) < 2048


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed (make setup)")
@PROTOCOLS
async def test_server_side_tools_run_for_either_protocol(tmp_path: Path, proto: Protocol) -> None:
    (tmp_path / "notes.txt").write_text("the code is 42\n")
    config = ServerConfig(work_dir=str(tmp_path), server_tools=("read_file",), permission="plan")
    engine = ScriptedEngine([generic("read_file", {"path": "notes.txt"}), '{"response": "It says 42."}'])
    app = create_app(config, Scheduler([engine]), server_tools=server_tools(config))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
        r = (
            await http.post(proto.path, json=proto.body([{"role": "user", "content": "read notes"}], [], 200))
        ).json()
    assert proto.text(r) == "It says 42." and proto.calls(r) == []
    assert "server_tool" in notes(r)
    assert "the code is 42" in engine.prompts[1]


# -- usage counts every generation ------------------------------------------------------------

READ_TOOL = {
    "name": "read_file",
    "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
}


@PROTOCOLS
async def test_usage_counts_the_repick_and_the_repair(proto: Protocol) -> None:
    main = generic("frobnicate", {"limit": 3})  # an unknown name, then arguments without the required path
    repick, repair = "read_file", '{"path": "a.txt"}'
    engine = ScriptedEngine([main, repick, repair])
    app = create_app(ServerConfig(constrain="off"), Scheduler([engine]))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
        r = (
            await http.post(
                proto.path, json=proto.body([{"role": "user", "content": "show a.txt"}], [READ_TOOL], 300)
            )
        ).json()
    assert proto.calls(r) == ["read_file"]
    assert notes(r) == ["repick", "args_repaired"]
    assert len(engine.prompts) == 3 and r["tether"]["generations"] == 3
    assert proto.tokens(r) == len(main) + len(repick) + len(repair)  # one token per byte, every generation


async def test_the_default_preset_brings_its_own_layer_0() -> None:
    """A ``ServerConfig`` that names no ``constrain`` gets the preset's: strict arguments under ``strict``."""
    for config, mode in (
        (ServerConfig(), "strict"),
        (ServerConfig(preset="full"), "names"),
        (ServerConfig(preset="bare"), "off"),
        (ServerConfig(constrain="off"), "off"),
    ):
        app = create_app(config, Scheduler([ScriptedEngine([])]))
        assert app.state.tether.default_guard.constrain == mode, config
