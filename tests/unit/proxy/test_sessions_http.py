"""Workflow sessions through ``/v1/chat/completions``: a premature terminal call is not let through."""

from __future__ import annotations

import json

import httpx

from tether.config import ServerConfig
from tether.engine.scheduler import Scheduler
from tether.engine.scripted import ScriptedEngine
from tether.proxy.app import create_app

WORKFLOW = {"name": "report", "tools": ["read_file", "submit"], "steps": ["read_file"], "terminal": "submit"}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "submit",
            "parameters": {
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
            },
        },
    },
]


def call(name: str, args: dict[str, str]) -> str:
    return json.dumps({"tool_calls": [{"name": name, "arguments": args}]})


async def test_premature_terminal_call_is_blocked_then_allowed_after_the_step() -> None:
    engine = ScriptedEngine(
        [
            call("submit", {"text": "done"}),
            call("read_file", {"path": "a.txt"}),
            call("submit", {"text": "done"}),
        ]
    )
    app = create_app(ServerConfig(preset="full"), Scheduler([engine]))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
        made = await http.post("/v1/tether/sessions", json={"workflow": WORKFLOW, "session_id": "s1"})
        assert made.status_code == 201, made.text
        messages = [{"role": "user", "content": "write the report"}]
        headers = {"X-Tether-Session": "s1"}
        first = (
            await http.post(
                "/v1/chat/completions",
                headers=headers,
                json={"model": "scripted", "messages": messages, "tools": TOOLS},
            )
        ).json()
        calls = first["choices"][0]["message"].get("tool_calls") or []
        # submit came first and was blocked; the regeneration (with the tool error in context) read the file.
        assert [c["function"]["name"] for c in calls] == ["read_file"]
        kinds = [i["kind"] for i in first["tether"]["interventions"]]
        assert any("block" in k or "violation" in k or "workflow" in k for k in kinds), kinds
        messages += [
            {"role": "assistant", "content": "", "tool_calls": calls},
            {"role": "tool", "tool_call_id": calls[0]["id"], "content": "numbers"},
        ]
        second = (
            await http.post(
                "/v1/chat/completions",
                headers=headers,
                json={"model": "scripted", "messages": messages, "tools": TOOLS},
            )
        ).json()
        assert [c["function"]["name"] for c in second["choices"][0]["message"]["tool_calls"]] == ["submit"]
        missing = await http.post(
            "/v1/chat/completions",
            headers={"X-Tether-Session": "nope"},
            json={"model": "scripted", "messages": messages, "tools": TOOLS},
        )
        assert missing.status_code == 404


async def test_steering_session_narrows_an_open_tool_choice_to_the_next_step() -> None:
    engine = ScriptedEngine(
        [
            call("read_file", {"path": "a.txt"}),
            call("submit", {"text": "done"}),
            call("read_file", {"path": "b.txt"}),
        ]
    )
    app = create_app(ServerConfig(preset="full"), Scheduler([engine]))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
        made = await http.post(
            "/v1/tether/sessions", json={"workflow": WORKFLOW, "session_id": "s2", "steer": "next_step"}
        )
        assert made.status_code == 201 and made.json()["steer"] == "next_step", made.text
        headers = {"X-Tether-Session": "s2"}
        messages: list[dict[str, object]] = [{"role": "user", "content": "write the report"}]
        body = {"model": "scripted", "messages": messages, "tools": TOOLS, "tool_choice": "required"}
        first = (await http.post("/v1/chat/completions", headers=headers, json=body)).json()
        notes = first["tether"]["interventions"]
        assert {
            "kind": "workflow_steered",
            "detail": "tool_choice 'required' -> 'read_file'",
            "tool": "read_file",
            "before": None,
            "after": None,
        } in notes
        calls = first["choices"][0]["message"]["tool_calls"]
        messages += [
            {"role": "assistant", "content": "", "tool_calls": calls},
            {"role": "tool", "tool_call_id": calls[0]["id"], "content": "numbers"},
        ]
        second = (await http.post("/v1/chat/completions", headers=headers, json=body)).json()
        assert {
            "kind": "workflow_steered",
            "detail": "tool_choice 'required' -> 'submit'",
            "tool": "submit",
            "before": None,
            "after": None,
        } in second["tether"]["interventions"]
        # A client that names a function keeps its choice.
        named = {**body, "tool_choice": {"type": "function", "function": {"name": "read_file"}}}
        third = (await http.post("/v1/chat/completions", headers=headers, json=named)).json()
        assert third["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "read_file"
        assert not [
            i for i in third.get("tether", {}).get("interventions", []) if i["kind"] == "workflow_steered"
        ]


async def test_session_steer_value_is_validated() -> None:
    app = create_app(ServerConfig(), Scheduler([ScriptedEngine([])]))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
        bad = await http.post("/v1/tether/sessions", json={"workflow": WORKFLOW, "steer": "always"})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "steer", bad.text
