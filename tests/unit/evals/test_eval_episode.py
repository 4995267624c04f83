"""The scenario loop over the real proxy path (scripted engine), and context compaction."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from tether.engine.scripted import ScriptedEngine
from tether.evals.client import ChatClient
from tether.evals.episode import compact, run_episode
from tether.evals.scenario_spec import ScenarioFile, load_suite

ClientFactory = Callable[[Sequence[str]], tuple[ChatClient, ScriptedEngine]]


def _scenario(sid: str) -> tuple[ScenarioFile, Any]:
    for f in load_suite():
        for sc in f.scenarios:
            if sc.id == sid:
                return f, sc
    raise KeyError(sid)


def _call(name: str, **args: Any) -> str:
    return json.dumps({"tool_calls": [{"name": name, "arguments": args}]})


def _say(text: str) -> str:
    return json.dumps({"response": text})


async def test_a_solved_scenario_passes(scripted_client: ClientFactory) -> None:
    f, sc = _scenario("plumbing.weather")
    client, engine = scripted_client([_call("get_weather", city="Paris"), _say("18 °C and sunny.")])
    result = await run_episode(client, sc, f.tools, "full")
    assert result.passed, result.failures
    assert result.turns == 2 and result.model_calls == 2 and result.retries == 0
    assert [c.name for c in result.calls] == ["get_weather"]
    assert "Paris: 18 °C, sunny" in engine.prompts[-1]  # the tool result went back to the model


async def test_tool_errors_are_shown_to_the_model_and_recovery_counts(scripted_client: ClientFactory) -> None:
    f, sc = _scenario("recovery.transient")
    replies = [_call("get_weather", city="Oslo"), _call("get_weather", city="Oslo"), _say("4 °C with snow")]
    client, engine = scripted_client(replies)
    result = await run_episode(client, sc, f.tools, "bare")
    assert result.passed, result.failures
    assert result.tool_errors == 1
    assert "timed out" in engine.prompts[1]


async def test_a_wrong_run_fails_with_reasons(scripted_client: ClientFactory) -> None:
    f, sc = _scenario("arguments.thermostat")
    replies = [_call("set_thermostat", room="kitchen", temperature=21.5, unit="celsius"), _say("done")]
    client, _ = scripted_client(replies)
    result = await run_episode(client, sc, f.tools, "full")
    assert not result.passed
    assert any("terminal call" in r for r in result.failures)
    assert any("kitchen" in r for r in result.failures)


async def test_max_turns_bounds_the_loop(scripted_client: ClientFactory) -> None:
    f, sc = _scenario("recovery.busy_disk")  # max_turns 6; the model never stops calling
    client, _ = scripted_client([_call("write_file", path="g.txt", content="x")])
    result = await run_episode(client, sc, f.tools, "bare")
    assert result.turns == sc.max_turns and result.answer is None
    assert not result.passed


def _history(sizes: list[int]) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"}]
    for i, n in enumerate(sizes):
        msgs.append({"role": "assistant", "content": None, "tool_calls": [{"id": f"c{i}"}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": "x" * n})
    return msgs


def test_compaction_truncates_old_outputs_first_and_keeps_the_newest() -> None:
    msgs = _history([3000, 3000, 3000])
    assert not compact(msgs, None)
    assert not compact(msgs, 100_000)
    assert compact(msgs, 5000)
    assert msgs[3]["content"].startswith("x" * 300 + "\n[truncated 2700 chars]")
    assert msgs[-1]["content"] == "x" * 3000  # the newest result is never touched
    assert msgs[0]["role"] == "system" and msgs[1]["content"] == "task"
    assert len(json.dumps(msgs)) <= 5000


def test_compaction_elides_old_exchanges_when_truncating_is_not_enough() -> None:
    msgs = _history([3000, 3000, 3000])
    assert compact(msgs, 3600)
    assert len(json.dumps(msgs)) <= 3600
    roles = [m["role"] for m in msgs]
    assert roles[:2] == ["system", "user"] and roles[-1] == "tool"
    assert msgs[-1]["content"] == "x" * 3000
    assert any("Earlier conversation elided" in (m.get("content") or "") for m in msgs)
    ids = {c["id"] for m in msgs for c in m.get("tool_calls") or []}
    assert all(m["tool_call_id"] in ids for m in msgs if m["role"] == "tool")  # results keep their call


def test_forced_compaction_changes_something_or_reports_it_cannot() -> None:
    msgs = _history([600, 600])
    before = len(json.dumps(msgs))
    assert compact(msgs, None, force=True) and len(json.dumps(msgs)) < before
    single = _history([10])
    assert not compact(single, None, force=True)
