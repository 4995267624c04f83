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
    app = create_app(ServerConfig(), Scheduler([engine]))
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
