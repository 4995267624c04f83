"""The serving path's post-sampling guardrails over a scripted engine (tests the proxy, not the model)."""

from __future__ import annotations

import json
from typing import Any

from tests.conftest import sse_events

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


def mid_task(ask: str, tool: str, args: dict[str, Any], result: str) -> list[dict[str, Any]]:
    """A conversation in which one call was made and its result came back."""
    made = {"id": "c1", "type": "function", "function": {"name": tool, "arguments": json.dumps(args)}}
    return [
        {"role": "user", "content": ask},
        {"role": "assistant", "content": None, "tool_calls": [made]},
        {"role": "tool", "tool_call_id": "c1", "content": result},
    ]


def kinds(response: dict[str, Any]) -> list[str]:
    return [i["kind"] for i in response.get("tether", {}).get("interventions", [])]


async def test_alias_resolves_and_string_number_is_coerced(scripted) -> None:
    client, _ = scripted([call("Read", {"path": "a.txt", "limit": "5"})])
    r = (await client.post("/v1/chat/completions", json=body())).json()
    (tc,) = r["choices"][0]["message"]["tool_calls"]
    assert tc["function"]["name"] == "read_file"
    assert json.loads(tc["function"]["arguments"]) == {"path": "a.txt", "limit": 5}
    assert kinds(r) == ["name_resolved", "args_coerced"]
    assert "generations" not in r["tether"]  # one model run


async def test_unknown_name_goes_to_a_constrained_repick(scripted) -> None:
    client, engines = scripted([call("frobnicate", {"command": "ls"}), "run_command"])
    r = (await client.post("/v1/chat/completions", json=body())).json()
    (tc,) = r["choices"][0]["message"]["tool_calls"]
    assert tc["function"]["name"] == "run_command"
    assert "repick" in kinds(r)
    assert "There is no tool named 'frobnicate'" in engines[0].prompts[-1]
    assert r["tether"]["generations"] == len(engines[0].prompts) == 2
    # The usage a client reads as its context's fill is the larger prompt, not the two runs' sum
    # (which can pass the window: opencode then compacts a history that fits).
    sizes = [len(p.encode()) for p in engines[0].prompts]
    assert r["usage"]["prompt_tokens"] == max(sizes) < sum(sizes)
    assert r["usage"]["total_tokens"] == max(sizes) + r["usage"]["completion_tokens"]


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


async def test_a_repeated_call_is_repaired_once(scripted) -> None:
    """The model's habit of writing its call twice costs one repair, not two: regenerations are
    greedy, so the repeat gets the first answer (and is then dropped as a duplicate)."""
    broken = ("read_file", {"limit": 3})
    reply = calls(broken, broken, ("run_command", {}))
    client, engines = scripted([reply, '{"path": "a.txt"}', '{"command": "ls"}'])
    r = (await client.post("/v1/chat/completions", json=body())).json()
    message = r["choices"][0]["message"]
    got = [(tc["function"]["name"], json.loads(tc["function"]["arguments"])) for tc in message["tool_calls"]]
    assert got == [("read_file", {"path": "a.txt"}), ("run_command", {"command": "ls"})]
    assert kinds(r) == ["args_repaired", "args_repaired", "duplicate_dropped", "args_repaired"]
    assert len(engines[0].prompts) == 3 and r["tether"]["generations"] == 3  # the turn and two repairs


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


async def test_a_call_whose_values_nobody_said_is_abstained_and_answered_in_text(scripted) -> None:
    """A wrong guess is worse than no guess: with tool_choice auto, a call whose values the
    conversation lacks is not made, and the model is asked for a text answer instead."""
    invented = call("read_file", {"path": "/etc/passwd", "limit": 7})
    client, engines = scripted([invented, "I cannot tell which file you mean."])
    r = (await client.post("/v1/chat/completions", json=body(preset="strict"))).json()
    choice = r["choices"][0]
    assert not choice["message"].get("tool_calls") and choice["finish_reason"] == "stop"
    assert choice["message"]["content"] == "I cannot tell which file you mean."
    assert kinds(r) == ["call_abstained", "answer_redecided"]
    assert r["tether"]["interventions"][0]["detail"] == "0% of its values occur in the conversation"
    assert len(engines[0].prompts) == 2 and r["usage"]["completion_tokens"] > 0
    # The same call is made when the conversation holds its values ("a.txt", "seven" lines).
    said = {
        **body(preset="strict"),
        "messages": [{"role": "user", "content": "show /etc/passwd, seven lines"}],
    }
    client, _ = scripted([invented])
    r = (await client.post("/v1/chat/completions", json=said)).json()
    assert len(r["choices"][0]["message"]["tool_calls"]) == 1 and kinds(r) == []
    # A client that demands a call gets it: abstaining is only for tool_choice auto.
    client, _ = scripted([invented])
    r = (
        await client.post("/v1/chat/completions", json={**body(preset="strict"), "tool_choice": "required"})
    ).json()
    assert len(r["choices"][0]["message"]["tool_calls"]) == 1 and kinds(r) == []
    # Nor mid-task, after a tool result; nor under the default preset (a coding agent's values are composed).
    mid = mid_task("show a file", "run_command", {"command": "ls"}, "notes.md")
    client, _ = scripted([invented])
    r = (await client.post("/v1/chat/completions", json={**body(preset="strict"), "messages": mid})).json()
    assert len(r["choices"][0]["message"]["tool_calls"]) == 1
    client, _ = scripted([invented])
    r = (await client.post("/v1/chat/completions", json=body(preset="full"))).json()
    assert len(r["choices"][0]["message"]["tool_calls"]) == 1


async def test_an_optional_value_nobody_said_is_left_to_the_tools_default(scripted) -> None:
    guessed = call("read_file", {"path": "a.txt", "limit": 7})
    client, engines = scripted([guessed])
    r = (await client.post("/v1/chat/completions", json=body(preset="strict"))).json()
    tc = r["choices"][0]["message"]["tool_calls"]
    assert [json.loads(t["function"]["arguments"]) for t in tc] == [{"path": "a.txt"}]
    assert kinds(r) == ["args_dropped"] and "limit" in r["tether"]["interventions"][0]["detail"]
    assert len(engines[0].prompts) == 1  # no model run: the value is left out, not asked for
    said = {**body(preset="strict"), "messages": [{"role": "user", "content": "show 7 lines of a.txt"}]}
    client, _ = scripted([guessed])
    r = (await client.post("/v1/chat/completions", json=said)).json()
    assert json.loads(r["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"])["limit"] == 7
    client, _ = scripted([guessed])  # below strict the value passes as written
    r = (await client.post("/v1/chat/completions", json=body(preset="full"))).json()
    assert kinds(r) == [] and len(r["choices"][0]["message"]["tool_calls"]) == 1


async def test_a_call_missing_a_required_value_nobody_said_is_abstained(scripted) -> None:
    """Half the values said passes the share rule, but a required value the user never gave is a
    guess: under ``strict`` the model answers (or asks) instead."""
    team = {
        "type": "function",
        "function": {
            "name": "top_scorer",
            "description": "A team's top scorer in a season",
            "parameters": {
                "type": "object",
                "properties": {"team": {"type": "string"}, "season": {"type": "string"}},
                "required": ["team", "season"],
            },
        },
    }
    ask = {"messages": [{"role": "user", "content": "Who is the top scorer of Manchester United?"}]}
    guess = call("top_scorer", {"team": "Manchester United", "season": "2020-2021"})
    client, _ = scripted([guess, "Which season do you mean?"])
    r = (
        await client.post("/v1/chat/completions", json={**body(preset="strict"), **ask, "tools": [team]})
    ).json()
    assert r["choices"][0]["message"]["content"] == "Which season do you mean?"
    assert kinds(r) == ["call_abstained", "answer_redecided"]
    assert r["tether"]["interventions"][0]["detail"] == "the conversation does not say its season"
    assert r["tether"]["generations"] == 2
    said = {"messages": [{"role": "user", "content": "Manchester United's top scorer in 2020-2021?"}]}
    client, _ = scripted([guess])
    r = (
        await client.post("/v1/chat/completions", json={**body(preset="strict"), **said, "tools": [team]})
    ).json()
    assert len(r["choices"][0]["message"]["tool_calls"]) == 1 and kinds(r) == []


async def test_a_call_the_previous_turn_made_and_has_the_result_of_is_not_made_again(scripted) -> None:
    """A small model loops on a call whose result it already has: under strict the repeat is dropped
    and the model answers from the result. A failed result may be retried, and another call in
    between (a read after an edit) is a new situation."""
    looped = mid_task("show a.txt", "read_file", {"path": "a.txt"}, "hello")
    client, engines = scripted([call("read_file", {"path": "a.txt"}), "a.txt says hello"])
    r = (await client.post("/v1/chat/completions", json={**body(preset="strict"), "messages": looped})).json()
    assert r["choices"][0]["message"]["content"] == "a.txt says hello"
    assert kinds(r) == ["call_repeated", "answer_redecided"] and len(engines[0].prompts) == 2
    failed = mid_task("show a.txt", "read_file", {"path": "a.txt"}, "Error: the disk is busy, try again")
    edited = [
        *looped,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "run_command", "arguments": '{"command": "ls"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c2", "content": "a.txt"},
    ]
    for preset, messages in (("strict", failed), ("strict", edited), ("full", looped)):
        client, _ = scripted([call("read_file", {"path": "a.txt"})])
        r = (
            await client.post("/v1/chat/completions", json={**body(preset=preset), "messages": messages})
        ).json()
        assert len(r["choices"][0]["message"]["tool_calls"]) == 1 and "call_repeated" not in kinds(r), preset
    # ... but not past two retries: the third failure in a row is the answer.
    made = failed[1]["tool_calls"][0]
    thrice = [
        failed[0],
        *[
            m
            for n in range(3)
            for m in (
                {"role": "assistant", "content": None, "tool_calls": [{**made, "id": f"f{n}"}]},
                {"role": "tool", "tool_call_id": f"f{n}", "content": "Error: the disk is busy, try again"},
            )
        ],
    ]
    client, _ = scripted([call("read_file", {"path": "a.txt"}), "The disk stays busy."])
    r = (await client.post("/v1/chat/completions", json={**body(preset="strict"), "messages": thrice})).json()
    assert r["choices"][0]["message"]["content"] == "The disk stays busy."
    assert kinds(r) == ["call_repeated", "answer_redecided"]
    assert "failed in each of the last 3 turns" in r["tether"]["interventions"][0]["detail"]


async def test_the_lone_call_gets_the_optional_choices_the_request_names(scripted) -> None:
    """ "Pediatrics department" names an optional enum value the model left out: strict adds it,
    recorded; a reply of several calls, or another preset, is left as written."""
    hospital = {
        "type": "function",
        "function": {
            "name": "find_hospital",
            "description": "Find a hospital",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "department": {"type": "string", "enum": ["General", "Pediatrics", "Cardiology"]},
                },
                "required": ["city"],
            },
        },
    }
    ask = {"messages": [{"role": "user", "content": "A hospital in Denver with a pediatrics department"}]}
    request = {**body(preset="strict"), **ask, "tools": [hospital]}
    client, _ = scripted([call("find_hospital", {"city": "Denver"})])
    r = (await client.post("/v1/chat/completions", json=request)).json()
    (tc,) = r["choices"][0]["message"]["tool_calls"]
    assert json.loads(tc["function"]["arguments"]) == {"city": "Denver", "department": "Pediatrics"}
    assert kinds(r) == ["args_filled"]
    # The model's habit of writing its one call twice does not make it two calls.
    twice = json.dumps({"tool_calls": [{"name": "find_hospital", "arguments": {"city": "Denver"}}] * 2})
    client, _ = scripted([twice])
    r = (await client.post("/v1/chat/completions", json=request)).json()
    (tc,) = r["choices"][0]["message"]["tool_calls"]
    assert json.loads(tc["function"]["arguments"])["department"] == "Pediatrics"
    assert kinds(r) == ["args_filled", "duplicate_dropped"]
    two = (
        '{"tool_calls": ['
        + ", ".join(
            json.dumps({"name": "find_hospital", "arguments": {"city": c}}) for c in ("Denver", "Boulder")
        )
        + "]}"
    )
    for preset, reply in (("strict", two), ("full", call("find_hospital", {"city": "Denver"}))):
        client, _ = scripted([reply])
        r = (
            await client.post(
                "/v1/chat/completions", json={**body(preset=preset), **ask, "tools": [hospital]}
            )
        ).json()
        args = [json.loads(t["function"]["arguments"]) for t in r["choices"][0]["message"]["tool_calls"]]
        assert all("department" not in a for a in args) and "args_filled" not in kinds(r)
    # A single choice the request does not name gives way to the one it names; a named one stays.
    for wrote, kept in (("Cardiology", "Pediatrics"), ("General", "Pediatrics")):
        client, _ = scripted([call("find_hospital", {"city": "Denver", "department": wrote})])
        r = (await client.post("/v1/chat/completions", json=request)).json()
        (tc,) = r["choices"][0]["message"]["tool_calls"]
        assert json.loads(tc["function"]["arguments"])["department"] == kept and kinds(r) == ["args_filled"]
    general = {"messages": [{"role": "user", "content": "General or pediatrics department in Denver?"}]}
    client, _ = scripted([call("find_hospital", {"city": "Denver", "department": "General"})])
    r = (await client.post("/v1/chat/completions", json={**request, **general})).json()
    (tc,) = r["choices"][0]["message"]["tool_calls"]
    assert json.loads(tc["function"]["arguments"])["department"] == "General" and kinds(r) == []


async def test_after_a_tool_result_an_option_nobody_said_gives_way_to_the_one_it_names(scripted) -> None:
    report = {
        "type": "function",
        "function": {
            "name": "submit_report",
            "description": "Report the release day.",
            "parameters": {
                "type": "object",
                "properties": {"day": {"type": "string", "enum": ["Monday", "Friday"]}},
                "required": ["day"],
            },
        },
    }
    history = mid_task(
        "Read notes.txt, then report the release day.",
        "read_file",
        {"path": "notes.txt"},
        "The release moves to Friday.",
    )
    request = {**body(preset="strict"), "messages": history, "tools": [report, *TOOLS]}
    client, _ = scripted([call("submit_report", {"day": "Monday"})])
    r = (await client.post("/v1/chat/completions", json=request)).json()
    (tc,) = r["choices"][0]["message"]["tool_calls"]
    assert json.loads(tc["function"]["arguments"]) == {"day": "Friday"} and kinds(r) == ["args_filled"]
    # A value somebody said stays, and nothing is added in a loop (only a choice is replaced).
    said = [*history[:-1], {**history[-1], "content": "Friday, or Monday if the review slips."}]
    client, _ = scripted([call("submit_report", {"day": "Monday"})])
    r = (await client.post("/v1/chat/completions", json={**request, "messages": said})).json()
    assert json.loads(r["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]) == {"day": "Monday"}
    optional = json.loads(json.dumps(report))
    optional["function"]["parameters"]["required"] = []
    client, _ = scripted([call("submit_report", {})])
    r = (await client.post("/v1/chat/completions", json={**request, "tools": [optional, *TOOLS]})).json()
    assert json.loads(r["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]) == {}


async def test_a_reply_left_empty_is_redecided_as_text_never_null(scripted) -> None:
    """Nothing said and no call left (an empty reply, or every call dropped) must not come back
    as ``content: null`` without calls: the model is asked for a text answer."""
    client, engines = scripted(['{"tool_calls": []}', "Which file should I read?"])
    r = (await client.post("/v1/chat/completions", json=body())).json()
    assert r["choices"][0]["message"]["content"] == "Which file should I read?"
    assert kinds(r) == ["answer_redecided"] and len(engines[0].prompts) == 2
    # Streaming gets the same after an abstained call: text deltas, then stop.
    client, _ = scripted([call("read_file", {"path": "/nowhere/x"}), "Which file should I read?"])
    request = {**body(preset="strict"), "stream": True}
    chunks = [
        e for e in sse_events((await client.post("/v1/chat/completions", json=request)).text) if e != "[DONE]"
    ]
    deltas = [c["choices"][0] for c in chunks if c.get("choices")]
    assert "".join(d["delta"].get("content") or "" for d in deltas) == "Which file should I read?"
    assert [d["finish_reason"] for d in deltas if d["finish_reason"]] == ["stop"]
    # bare is the model as it is: no second generation.
    client, engines = scripted(['{"tool_calls": []}', "never asked"])
    r = (await client.post("/v1/chat/completions", json=body(preset="bare"))).json()
    assert len(engines[0].prompts) == 1 and "never asked" not in json.dumps(r)


async def test_bare_preset_passes_the_model_output_through(scripted) -> None:
    client, engines = scripted([call("Read", {"path": "a.txt", "limit": "5"})])
    r = (await client.post("/v1/chat/completions", json=body(preset="bare"))).json()
    (tc,) = r["choices"][0]["message"]["tool_calls"]
    assert tc["function"]["name"] == "Read"
    assert json.loads(tc["function"]["arguments"]) == {"path": "a.txt", "limit": "5"}
    assert "interventions" not in r["tether"] and len(engines[0].prompts) == 1


async def test_text_reply_with_tools_costs_one_generation(scripted) -> None:
    """The Forge regression: a legitimate text answer is returned as is, with no retries."""
    client, engines = scripted(['{"response": "thanks, bye"}'])
    r = (await client.post("/v1/chat/completions", json=body())).json()
    assert r["choices"][0]["message"]["content"] == "thanks, bye"
    assert r["choices"][0]["finish_reason"] == "stop" and "interventions" not in r["tether"]
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


async def test_a_looping_reply_is_cut_with_finish_length(scripted) -> None:
    """A greedy small model that repeats itself is stopped long before the context ends."""
    looping = "The answer is " + "6-point " * 400
    client, _ = scripted([looping])
    r = (await client.post("/v1/chat/completions", json={**body(), "tools": None})).json()
    choice = r["choices"][0]
    assert choice["finish_reason"] == "length"
    assert choice["message"]["content"].startswith("The answer is 6-point")
    assert 0 < r["usage"]["completion_tokens"] < len(looping) // 4  # cut after ~400 of 3,214 characters
    assert "repetition_stopped" in kinds(r)


async def test_a_decided_text_answer_is_asked_without_the_tools(scripted) -> None:
    """When layer 0's call-or-answer decision picks a text answer on a fresh conversation, the
    answer comes from the prompt without the tool block (the model answers as a chat model, not
    inside the format's JSON envelope); the first generation's tokens still count."""
    request = {
        "model": "scripted",
        "messages": [{"role": "user", "content": "Thanks, that is all. Bye!"}],
        "tools": TOOLS,
        "tether": {"preset": "strict"},
    }
    client, engines = scripted(['{"response": "inside the envelope"}', "Goodbye, have a nice day!"])
    r = (await client.post("/v1/chat/completions", json=request)).json()
    message = r["choices"][0]["message"]
    assert message["content"] == "Goodbye, have a nice day!" and not message.get("tool_calls")
    prompts = engines[0].prompts
    assert len(prompts) == 2 and "read_file" in prompts[0] and "read_file" not in prompts[1]
    assert r["usage"]["completion_tokens"] > len("Goodbye, have a nice day!")  # + the decision's tokens
    # Streaming: the same text, nothing of the envelope.
    client, _ = scripted(['{"response": "inside the envelope"}', "Goodbye, have a nice day!"])
    events = sse_events((await client.post("/v1/chat/completions", json={**request, "stream": True})).text)
    deltas = [
        e["choices"][0]["delta"].get("content") or "" for e in events if e != "[DONE]" and e.get("choices")
    ]
    assert "".join(deltas) == "Goodbye, have a nice day!"
    # Without the decision (the default preset) the model's own answer stands: one generation.
    client, engines = scripted(['{"response": "inside the envelope"}', "never asked"])
    r = (await client.post("/v1/chat/completions", json={**request, "tether": {"preset": "full"}})).json()
    assert r["choices"][0]["message"]["content"] == "inside the envelope" and len(engines[0].prompts) == 1
    # Mid-task (a tool result came back) the answer stays in the format's prompt: one generation.
    mid = mid_task("show a.txt", "read_file", {"path": "a.txt"}, "hello")
    client, engines = scripted(['{"response": "It says hello."}', "never asked"])
    r = (await client.post("/v1/chat/completions", json={**request, "messages": mid})).json()
    assert r["choices"][0]["message"]["content"] == "It says hello." and len(engines[0].prompts) == 1


CAPITAL = {
    "type": "function",
    "function": {
        "name": "country_capital",
        "description": "The capital city of a country",
        "parameters": {
            "type": "object",
            "properties": {"country": {"type": "string"}},
            "required": ["country"],
        },
    },
}


async def test_a_fitting_call_with_a_made_up_name_is_asked_again_within_the_request(scripted) -> None:
    """The right tool with an invented value: strict asks once more with the value limited to the
    request's words; the answer counts only when the conversation says it."""
    ask = {"messages": [{"role": "user", "content": "What is the capital of Brazil?"}], "tools": [CAPITAL]}
    request = {**body(preset="strict"), **ask}
    client, engines = scripted([call("country_capital", {"country": "Bahia"}), '{"country": "Brazil"}'])
    r = (await client.post("/v1/chat/completions", json=request)).json()
    (tc,) = r["choices"][0]["message"]["tool_calls"]
    assert json.loads(tc["function"]["arguments"]) == {"country": "Brazil"} and kinds(r) == ["args_grounded"]
    assert (
        "does not say 'Bahia'; copy the words of the request that give the country" in engines[0].prompts[1]
    )
    assert r["usage"]["prompt_tokens"] > len(engines[0].prompts[0]) // 8  # the re-ask is counted
    # A re-ask that still says nobody's value is abstained from, as before.
    client, _ = scripted([call("country_capital", {"country": "Bahia"}), '{"country": "Bahia"}', "Brasilia."])
    r = (await client.post("/v1/chat/completions", json=request)).json()
    assert r["choices"][0]["message"]["content"] == "Brasilia."
    assert kinds(r) == ["call_abstained", "answer_redecided"]
    assert r["tether"]["generations"] == 3  # the turn, the re-ask that failed, the answer
    # A tool that does not fit the request is not asked again.
    other = {"messages": [{"role": "user", "content": "Who painted the Mona Lisa?"}], "tools": [CAPITAL]}
    client, engines = scripted([call("country_capital", {"country": "Italy"}), "Leonardo da Vinci."])
    r = (await client.post("/v1/chat/completions", json={**body(preset="strict"), **other})).json()
    assert kinds(r) == ["call_abstained", "answer_redecided"] and len(engines[0].prompts) == 2
    assert r["tether"]["generations"] == 2


async def test_variants_of_one_call_merge_into_it(scripted) -> None:
    """Two calls that differ only in what nobody said are one request hedged: strict keeps one, the
    disputed value left to the tool's default; a reordering of the same values is dropped."""
    dividends = {
        "type": "function",
        "function": {
            "name": "dividends",
            "description": "Dividend history of a company",
            "parameters": {
                "type": "object",
                "properties": {
                    "company": {"type": "string"},
                    "rival": {"type": "string"},
                    "frequency": {"type": "string", "enum": ["quarterly", "annually"]},
                },
                "required": ["company"],
            },
        },
    }
    ask = {"messages": [{"role": "user", "content": "Dividends of Apple vs Samsung"}], "tools": [dividends]}
    hedged = [
        {"name": "dividends", "arguments": {"company": "Apple", "frequency": f}}
        for f in ("quarterly", "annually", "quarterly")
    ]
    client, _ = scripted([json.dumps({"tool_calls": hedged})])
    r = (await client.post("/v1/chat/completions", json={**body(preset="strict"), **ask})).json()
    (tc,) = r["choices"][0]["message"]["tool_calls"]
    assert json.loads(tc["function"]["arguments"]) == {"company": "Apple"}
    assert kinds(r) == ["variant_merged", "duplicate_dropped"]
    swapped = [
        {"name": "dividends", "arguments": {"company": a, "rival": b}}
        for a, b in (("Apple", "Samsung"), ("Samsung", "Apple"))
    ]
    client, _ = scripted([json.dumps({"tool_calls": swapped})])
    r = (await client.post("/v1/chat/completions", json={**body(preset="strict"), **ask})).json()
    (tc,) = r["choices"][0]["message"]["tool_calls"]
    assert json.loads(tc["function"]["arguments"]) == {"company": "Apple", "rival": "Samsung"}
    # The request says both values: two requests, kept; other presets leave the reply as written.
    said = {"messages": [{"role": "user", "content": "Apple's dividends, quarterly and annually"}]}
    for preset, extra in (("strict", said), ("full", {})):
        client, _ = scripted([json.dumps({"tool_calls": hedged[:2]})])
        r = (await client.post("/v1/chat/completions", json={**body(preset=preset), **ask, **extra})).json()
        assert len(r["choices"][0]["message"]["tool_calls"]) == 2, preset


def _tool(name: str, description: str, **props: dict[str, Any]) -> dict[str, Any]:
    parameters = {"type": "object", "properties": props, "required": list(props)}
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


FIND = _tool("find_orders", "Find the user's orders for an item; returns order ids.", item={"type": "string"})
CANCEL = _tool(
    "cancel_order",
    "Cancel an order by its numeric id (use find_orders to get it).",
    order_id={"type": "integer"},
)


async def test_a_call_missing_a_value_another_tool_gives_becomes_that_tools_call(scripted) -> None:
    """Nobody said the order id: find_orders gives it, so its call comes first (when the conversation
    says its own values); otherwise the call is abstained from as before."""
    ask = {
        "messages": [{"role": "user", "content": "Cancel my order for the lamp."}],
        "tools": [CANCEL, FIND],
    }
    request = {**body(preset="strict"), **ask}
    client, engines = scripted([call("cancel_order", {"order_id": 7}), '{"item": "lamp"}'])
    r = (await client.post("/v1/chat/completions", json=request)).json()
    (tc,) = r["choices"][0]["message"]["tool_calls"]
    assert (tc["function"]["name"], json.loads(tc["function"]["arguments"])) == (
        "find_orders",
        {"item": "lamp"},
    )
    assert kinds(r) == ["call_redirected"] and r["tether"]["generations"] == 2
    assert "find_orders gives it first" in engines[0].prompts[1]
    assert '["lamp"]' in engines[0].prompts[1]  # asked for within the request's own words
    # The source's own values must be said too.
    vague = {**request, "messages": [{"role": "user", "content": "Cancel my order."}]}
    client, _ = scripted([call("cancel_order", {"order_id": 7}), '{"item": "sofa"}', "Which order?"])
    r = (await client.post("/v1/chat/completions", json=vague)).json()
    assert r["choices"][0]["message"]["content"] == "Which order?"
    assert kinds(r) == ["call_abstained", "answer_redecided"]
