"""The YAML workflow (examples/workflow_notes.yaml) through the proxy's session path, on the bundled model.

The test plays an ordinary OpenAI client: it opens a session for the registered
workflow, then sends stateless ``/v1/chat/completions`` requests with the
``X-Tether-Session`` header, runs the tools itself and sends their results back.
It never tells the model which step is next; tether does: the session is created
with ``"steer": "next_step"`` (an open ``tool_choice`` is narrowed to the next
pending step's tool, as ``WorkflowRunner(steer="next_step")`` does; without it the
135M model repeats ``list_files`` forever), and its enforcement blocks calls out of
order. The first request forces the terminal tool (``tool_choice`` names
``submit_report``): the proxy must not let that premature call through.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tether.config import ServerConfig
from tether.engine.llama_cpp import LlamaCppEngine
from tether.engine.scheduler import Scheduler
from tether.proxy.app import create_app
from tether.workflows import load_workflow

EXAMPLE = Path(__file__).parents[2] / "examples" / "workflow_notes.yaml"
FILES = {"notes.txt": "The release moves to Friday.", "todo.txt": "- tag the release"}
HEADERS = {"X-Tether-Session": "notes-1"}


def run_tool(name: str, args: dict[str, Any]) -> str:
    if name == "list_files":
        return "\n".join(sorted(FILES))
    if name == "read_file":
        return FILES.get(str(args.get("path")), f"Error: no file {args.get('path')!r}")
    return "accepted"


@pytest.mark.timeout(1800)
async def test_notes_workflow_through_proxy_sessions(smollm: LlamaCppEngine) -> None:
    workflow = load_workflow(EXAMPLE)
    config = ServerConfig(workflows=(str(EXAMPLE),), constrain="strict", default_temperature=0.0)
    app = create_app(config, Scheduler([smollm]))
    tools = [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": dict(t.parameters)},
        }
        for t in workflow.tools
    ]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": workflow.system},
        {"role": "user", "content": workflow.task},
    ]
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://t", timeout=600) as http,
    ):
        made = await http.post(
            "/v1/tether/sessions",
            json={
                "workflow": workflow.name,
                "session_id": HEADERS["X-Tether-Session"],
                "steer": "next_step",
            },
        )
        assert made.status_code == 201, made.text

        names: list[str] = []
        blocked: list[dict[str, Any]] = []
        steered: list[dict[str, Any]] = []
        for turn in range(8):
            # Turn 0 forces the terminal tool; later turns only require some tool call.
            choice: Any = (
                {"type": "function", "function": {"name": "submit_report"}} if turn == 0 else "required"
            )
            body = {
                "model": "smollm2-135m-instruct",
                "messages": messages,
                "tools": tools,
                "tool_choice": choice,
                "max_tokens": 120,
            }
            reply = await http.post("/v1/chat/completions", headers=HEADERS, json=body)
            assert reply.status_code == 200, reply.text
            data = reply.json()
            notes = data.get("tether", {}).get("interventions", [])
            blocked += [i for i in notes if i["kind"] == "workflow_blocked"]
            steered += [i for i in notes if i["kind"] == "workflow_steered"]
            message = data["choices"][0]["message"]
            calls = message.get("tool_calls") or []
            if turn == 0:
                # The forced premature terminal call never reached us.
                assert "submit_report" not in [c["function"]["name"] for c in calls], data
                assert blocked, data
            if not calls:
                messages.append({"role": "assistant", "content": message.get("content") or ""})
                messages.append({"role": "user", "content": "Call the next tool."})
                continue
            messages.append({"role": "assistant", "content": "", "tool_calls": calls})
            for c in calls:
                names.append(c["function"]["name"])
                result = run_tool(c["function"]["name"], json.loads(c["function"]["arguments"]))
                messages.append({"role": "tool", "tool_call_id": c["id"], "content": result})
            if "submit_report" in names:
                break

        state = (await http.get(f"/v1/tether/sessions/{HEADERS['X-Tether-Session']}")).json()["state"]
    assert names and names[-1] == "submit_report", (names, blocked)
    assert names.index("list_files") < names.index("read_file") < names.index("submit_report"), names
    assert state["pending"] == [] and state["violations"] >= 1, state
    assert len(steered) >= 2, steered  # read_file and submit_report were steered to
    assert {"notes.txt"} <= {a.get("path") for a in state["succeeded"].get("read_file", [])}, state
