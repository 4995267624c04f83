"""The serving path's post-sampling guardrails over a scripted engine (tests the proxy, not the model)."""

from __future__ import annotations

import json
from typing import Any

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run_command",
            "description": "Run a command",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    },
]


def call(name: str, args: dict[str, Any]) -> str:
    return json.dumps({"tool_calls": [{"name": name, "arguments": args}]})


def body(**tether: Any) -> dict[str, Any]:
    return {
        "model": "scripted",
        "messages": [{"role": "user", "content": "show a.txt"}],
        "tools": TOOLS,
        "tether": {"constrain": "off", **tether},
    }


def kinds(response: dict[str, Any]) -> list[str]:
    return [i["kind"] for i in response.get("tether", {}).get("interventions", [])]


async def test_alias_resolves_and_string_number_is_coerced(scripted) -> None:
    client, _ = scripted([call("Read", {"path": "a.txt", "limit": "5"})])
    r = (await client.post("/v1/chat/completions", json=body())).json()
    (tc,) = r["choices"][0]["message"]["tool_calls"]
    assert tc["function"]["name"] == "read_file"
    assert json.loads(tc["function"]["arguments"]) == {"path": "a.txt", "limit": 5}
    assert kinds(r) == ["name_resolved", "args_coerced"]


async def test_unknown_name_goes_to_a_constrained_repick(scripted) -> None:
    client, engines = scripted([call("frobnicate", {"command": "ls"}), "run_command"])
    r = (await client.post("/v1/chat/completions", json=body())).json()
    (tc,) = r["choices"][0]["message"]["tool_calls"]
    assert tc["function"]["name"] == "run_command"
    assert "repick" in kinds(r)
    assert "There is no tool named 'frobnicate'" in engines[0].prompts[-1]


async def test_repick_can_only_land_on_an_offered_name(scripted) -> None:
    # The scripted engine "wants" to answer Frobnicate; the grammar lets it write only an offered name.
    client, _ = scripted([call("frobnicate", {}), "Frobnicate"])
    r = (await client.post("/v1/chat/completions", json=body())).json()
    names = [tc["function"]["name"] for tc in r["choices"][0]["message"].get("tool_calls") or []]
    assert all(n in ("read_file", "run_command") for n in names)


async def test_missing_required_argument_is_repaired_under_the_schema(scripted) -> None:
    client, engines = scripted([call("read_file", {"limit": 3}), '{"path": "a.txt"}'])
    r = (await client.post("/v1/chat/completions", json=body())).json()
    (tc,) = r["choices"][0]["message"]["tool_calls"]
    assert json.loads(tc["function"]["arguments"]) == {"path": "a.txt"}
    assert kinds(r) == ["args_repaired"]
    assert "path" in engines[0].prompts[-1]


async def test_unrepairable_arguments_are_reported_precisely(scripted) -> None:
    client, _ = scripted(
        [call("read_file", {"limit": 3})],
    )
    r = (await client.post("/v1/chat/completions", json=body(preset="rescue"))).json()
    assert kinds(r) == []  # validation is off below "full": the call passes as written
    client, _ = scripted([call("read_file", {"limit": 3}), "{}"])
    r = (await client.post("/v1/chat/completions", json=body())).json()
    notes = r["tether"]["interventions"]
    assert notes[-1]["kind"] == "args_invalid"
    assert "path" in notes[-1]["detail"] and "required" in notes[-1]["detail"]


def calls(*pairs: tuple[str, dict[str, Any]]) -> str:
    return json.dumps({"tool_calls": [{"name": n, "arguments": a} for n, a in pairs]})


async def test_identical_calls_in_one_reply_are_dropped(scripted) -> None:
    a, b = ("read_file", {"path": "a.txt", "limit": 2}), ("read_file", {"path": "b.txt"})
    looping = calls(a, b, ("read_file", {"limit": 2, "path": "a.txt"}), a, b)
    client, _ = scripted([looping])
    r = (await client.post("/v1/chat/completions", json=body())).json()
    got = [json.loads(tc["function"]["arguments"]) for tc in r["choices"][0]["message"]["tool_calls"]]
    assert got == [a[1], b[1]]
    assert kinds(r) == ["duplicate_dropped"] * 3
    # Below "full" the copies pass as written (the eval's ablation presets keep layers apart).
    client, _ = scripted([looping])
    r = (await client.post("/v1/chat/completions", json=body(preset="rescue"))).json()
    assert len(r["choices"][0]["message"]["tool_calls"]) == 5


async def test_a_call_holding_the_prompts_placeholder_is_dropped(scripted) -> None:
    """The generic prompt's example call shows "example" for strings; a model without a value copies it."""
    copied = call("read_file", {"path": "example", "limit": 2})
    client, _ = scripted([copied])
    r = (await client.post("/v1/chat/completions", json=body())).json()
    message = r["choices"][0]["message"]
    assert not message.get("tool_calls") and r["choices"][0]["finish_reason"] == "stop"
    assert kinds(r) == ["placeholder_dropped"]
    assert "path" in r["tether"]["interventions"][0]["detail"]
    # A value the conversation mentions is the user's, not the prompt's.
    said = {**body(), "messages": [{"role": "user", "content": "Show the file named Example"}]}
    client, _ = scripted([copied])
    r = (await client.post("/v1/chat/completions", json=said)).json()
    assert len(r["choices"][0]["message"]["tool_calls"]) == 1 and kinds(r) == []
    # When the client demands a call it gets one, flagged.
    client, _ = scripted([copied])
    r = (await client.post("/v1/chat/completions", json={**body(), "tool_choice": "required"})).json()
    assert len(r["choices"][0]["message"]["tool_calls"]) == 1 and kinds(r) == ["args_invalid"]
    # Its number placeholder (1.5) counts too, in nested values, unless the conversation says it.
    nested = call("run_command", {"command": "ls", "opts": {"scale": 1.5}})
    client, _ = scripted([nested])
    r = (await client.post("/v1/chat/completions", json=body())).json()
    assert kinds(r) == ["placeholder_dropped"] and "opts.scale" in r["tether"]["interventions"][0]["detail"]
    said = {**body(), "messages": [{"role": "user", "content": "run ls at scale 1.5"}]}
    client, _ = scripted([nested])
    r = (await client.post("/v1/chat/completions", json=said)).json()
    assert len(r["choices"][0]["message"]["tool_calls"]) == 1
    # Below "full" arguments are not checked at all.
    client, _ = scripted([copied])
    r = (await client.post("/v1/chat/completions", json=body(preset="rescue"))).json()
    assert len(r["choices"][0]["message"]["tool_calls"]) == 1


async def test_bare_preset_passes_the_model_output_through(scripted) -> None:
    client, engines = scripted([call("Read", {"path": "a.txt", "limit": "5"})])
    r = (await client.post("/v1/chat/completions", json=body(preset="bare"))).json()
    (tc,) = r["choices"][0]["message"]["tool_calls"]
    assert tc["function"]["name"] == "Read"
    assert json.loads(tc["function"]["arguments"]) == {"path": "a.txt", "limit": "5"}
    assert "tether" not in r and len(engines[0].prompts) == 1


async def test_text_reply_with_tools_costs_one_generation(scripted) -> None:
    """The Forge regression: a legitimate text answer is returned as is, with no retries."""
    client, engines = scripted(['{"response": "thanks, bye"}'])
    r = (await client.post("/v1/chat/completions", json=body())).json()
    assert r["choices"][0]["message"]["content"] == "thanks, bye"
    assert r["choices"][0]["finish_reason"] == "stop" and "tether" not in r
    assert len(engines[0].prompts) == 1


async def test_streaming_reports_interventions_in_the_final_chunk(scripted) -> None:
    from tests.conftest import sse_events

    client, _ = scripted([call("Read", {"path": "a.txt"})])
    events = sse_events((await client.post("/v1/chat/completions", json={**body(), "stream": True})).text)
    finals = [e for e in events[:-1] if e["choices"] and e["choices"][0]["finish_reason"]]
    assert finals[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert [i["kind"] for i in finals[-1]["tether"]["interventions"]] == ["name_resolved"]
    deltas = [
        d for e in events[:-1] if e["choices"] for d in e["choices"][0]["delta"].get("tool_calls") or []
    ]
    assert deltas[0]["function"]["name"] == "read_file" and deltas[0]["id"].startswith("call_")


async def test_health_counts_interventions(scripted) -> None:
    client, _ = scripted([call("Read", {"path": "a.txt"})])
    await client.post("/v1/chat/completions", json=body())
    health = (await client.get("/health")).json()
    assert health["interventions"] == {"name_resolved": 1}
