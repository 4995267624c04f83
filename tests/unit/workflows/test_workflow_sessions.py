"""Proxy sessions: state from stateless histories, blocked calls, regeneration, TTL/LRU, the router."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx
import pytest
from workflow_support import call, edit_workflow, say, scripted_core

from tether.calls import ToolCall
from tether.chat import Message
from tether.config import ServerConfig
from tether.engine.scheduler import Scheduler
from tether.engine.scripted import ScriptedEngine
from tether.errors import InvalidRequestError
from tether.guardrails.presets import PRESETS
from tether.proxy.app import create_app
from tether.turns.events import ChatJob, FinishOut, TextOut, TurnEvent
from tether.turns.stages import Turn, TurnPipeline
from tether.workflows import Budgets
from tether.workflows.enforcement import Enforcement
from tether.workflows.sessions import SessionNotFoundError, SessionStore
from tether.workflows.stage import SessionStage

WF = edit_workflow()
USER = Message("user", "Fix a.txt")


def done(name: str, cid: str, result: str = "ok", **args: Any) -> list[Message]:
    return [
        Message("assistant", "", (ToolCall(name, args, cid),)),
        Message("tool", result, tool_call_id=cid, name=name),
    ]


def out(name: str, cid: str = "call_new", **args: Any) -> ToolCall:
    return ToolCall(name, args, cid)


async def check_reply(
    store: SessionStore, sid: str, history: Sequence[Message], calls: Sequence[ToolCall]
) -> Enforcement:
    """What a request does: observe its history once, then check the reply's calls."""
    return await store.check(await store.observe(sid, history), calls)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_check_reply_blocks_a_premature_terminal_call_until_the_step_has_a_result() -> None:
    store = SessionStore([WF])
    await store.create("fix_bug", "s1")
    early = await check_reply(store, "s1", [USER], [out("submit", summary="x")])
    assert not early.ok and early.allowed_calls == ()
    (blocked,) = early.blocked
    assert blocked.reason == "terminal tool called early: submit(summary='x') needs run_tests"
    assert blocked.text.startswith("Not executed: submit finishes the task")
    history = [USER, *done("run_tests", "c1")]
    later = await check_reply(store, "s1", history, [out("submit", summary="x")])
    assert later.ok and [c.name for c in later.allowed_calls] == ["submit"]


async def test_state_survives_a_client_that_trims_its_history() -> None:
    store = SessionStore([WF])
    await store.create("fix_bug", "s1")
    await store.observe("s1", [USER, *done("run_tests", "c1")])
    assert (await check_reply(store, "s1", [USER], [out("submit", summary="x")])).ok  # c1 no longer sent


async def test_error_results_do_not_count_and_each_call_id_counts_once() -> None:
    store = SessionStore([WF])
    session = await store.create("fix_bug", "s1")
    failed = [USER, *done("run_tests", "c1", result="Error: 2 tests failed")]
    assert not (await check_reply(store, "s1", failed, [out("submit", summary="x")])).ok
    assert session.state.failures == 1
    await store.observe("s1", failed)
    await store.observe("s1", failed)
    assert session.state.calls == 1  # the same call id is never recorded twice


async def test_arg_matched_prerequisite_and_same_reply_calls() -> None:
    store = SessionStore([WF])
    await store.create("fix_bug", "s1")
    history = [USER, *done("read_file", "c1", path="b.txt")]
    verdict = await check_reply(store, "s1", history, [out("edit_file", path="a.txt", text="x")])
    assert "requires read_file(path='a.txt') first" in verdict.blocked[0].text
    assert (await check_reply(store, "s1", history, [out("edit_file", path="b.txt", text="x")])).ok
    both = await check_reply(
        store,
        "s1",
        history,
        [out("read_file", "r", path="a.txt"), out("edit_file", "e", path="a.txt", text="x")],
    )
    assert [c.name for c in both.allowed_calls] == ["read_file"] and both.blocked[0].call.name == "edit_file"
    retry = both.retry_messages("thinking")
    assert [m.role for m in retry] == ["assistant", "tool", "tool"] and retry[0].content == "thinking"
    assert retry[1].content.startswith("Not executed: another tool call in this turn was rejected")
    assert retry[2].tool_call_id == "e" and "read_file(path='a.txt')" in retry[2].content
    assert "[tether] workflow 'fix_bug' blocked edit_file" in both.fallback_text()
    assert both.interventions()[0].kind == "workflow_blocked"


async def test_sessions_resolve_expire_and_evict() -> None:
    clock = Clock()
    store = SessionStore([WF], ttl_s=60, max_sessions=2, clock=clock)
    with pytest.raises(SessionNotFoundError) as err:
        await store.resolve("nope")
    assert err.value.status == 404 and "X-Tether-Workflow" in err.value.message
    lazy = await store.resolve("a", "fix_bug")  # X-Tether-Session + X-Tether-Workflow
    assert lazy.workflow is WF and await store.resolve("a") is lazy
    with pytest.raises(InvalidRequestError, match="runs workflow 'fix_bug', not 'other'"):
        await store.resolve("a", "other")
    with pytest.raises(InvalidRequestError, match="unknown workflow 'zzz'; registered: fix_bug"):
        await store.create("zzz")
    clock.now += 59
    assert await store.get("a") is lazy  # touching slides the TTL
    clock.now += 59
    await store.create(WF, "b")
    clock.now += 1
    await store.get("a")
    await store.create(WF, "c")  # cap 2: "b" is the least recently used
    assert await store.get("b") is None and await store.get("a") is not None and await store.count() == 2
    clock.now += 61
    assert await store.count() == 0 and await store.get("a") is None
    assert not await store.drop("a")


# -- the streaming wrapper over the core ----------------------------------------------------


async def run(
    store: SessionStore, replies: Sequence[str], messages: Sequence[Message], sid: str = "s1"
) -> tuple[list[TurnEvent], ScriptedEngine]:
    core, engine = scripted_core(replies)
    # The stage under test alone: the core's own guard off (it has its own tests).
    tools = tuple(t.spec() for t in WF.tools)
    job = ChatJob(messages=tuple(messages), tools=tools, tool_choice="auto", guard=PRESETS["bare"])
    pipeline = TurnPipeline(core, [SessionStage(store)])
    events = [ev async for ev in pipeline.start(Turn(job, sid))]
    return events, engine


def finish_of(events: Sequence[TurnEvent]) -> FinishOut:
    last = events[-1]
    assert isinstance(last, FinishOut)
    return last


async def test_blocked_call_is_regenerated_once_with_the_error_in_context() -> None:
    store = SessionStore([WF])
    await store.create("fix_bug", "s1")
    events, engine = await run(store, [call("submit", summary="early"), call("run_tests")], [USER])
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [c.name for c in calls] == ["run_tests"]
    fin = finish_of(events)
    assert fin.finish_reason == "tool_calls"
    assert [n.kind for n in fin.interventions] == ["workflow_blocked", "workflow_regenerated"]
    assert fin.usage.completion_tokens > len(call("run_tests"))  # both generations counted
    second = engine.prompts[1]
    assert "Not executed: submit finishes the task" in second
    assert (
        "\nrun_tests: Run" in second and "\nsubmit: Finish" not in second
    )  # tool_choice named the missing tool


async def test_still_blocked_after_regeneration_becomes_text_naming_what_is_missing() -> None:
    store = SessionStore([WF])
    await store.create("fix_bug", "s1")
    events, engine = await run(store, [call("submit", summary="early")], [USER])
    assert not any(isinstance(e, ToolCall) for e in events)
    text = "".join(e.text for e in events if isinstance(e, TextOut))
    assert (
        text
        == "[tether] workflow 'fix_bug' blocked submit(summary='early'): run_tests must succeed first. Next: run_tests."
    )
    fin = finish_of(events)
    assert fin.finish_reason == "stop" and len(engine.prompts) == 2
    assert [n.kind for n in fin.interventions][-1] == "workflow_fallback_text"
    assert [n.tier for n in fin.interventions if n.kind == "workflow_blocked"] == [1, 2]


async def test_allowed_replies_pass_through_untouched() -> None:
    store = SessionStore([WF])
    await store.create("fix_bug", "s1")
    events, engine = await run(store, [call("submit", summary="done")], [USER, *done("run_tests", "c1")])
    assert [e.name for e in events if isinstance(e, ToolCall)] == ["submit"]
    assert finish_of(events).interventions == () and len(engine.prompts) == 1
    text_events, _ = await run(store, [say("All good.")], [USER])
    assert "".join(e.text for e in text_events if isinstance(e, TextOut)) == "All good."


async def test_no_regeneration_once_the_violation_budget_is_spent() -> None:
    store = SessionStore([edit_workflow(budgets=Budgets(max_violations=0))])
    await store.create("fix_bug", "s1")
    events, engine = await run(store, [call("submit", summary="x"), call("run_tests")], [USER])
    assert len(engine.prompts) == 1 and not any(isinstance(e, ToolCall) for e in events)


# -- HTTP: /v1/tether/sessions --------------------------------------------------------------


async def test_session_routes() -> None:
    app = create_app(ServerConfig(), Scheduler([ScriptedEngine()]))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
        # The app always has a store; a workflow that is neither configured nor inline is a 400.
        off = await http.post("/v1/tether/sessions", json={"workflow": "fix_bug"})
        assert off.status_code == 400 and "fix_bug" in off.json()["error"]["message"]
        app.state.tether.sessions = SessionStore([WF])
        made = await http.post("/v1/tether/sessions", json={"workflow": "fix_bug", "session_id": "abc"})
        assert made.status_code == 201, made.text
        body = made.json()
        assert body["session_id"] == "abc" and body["state"]["pending"] == ["run_tests"]
        inline = {"name": "mini", "tools": ["a", "b"], "terminal": "b", "steps": ["a"]}
        auto = (await http.post("/v1/tether/sessions", json={"workflow": inline})).json()
        assert auto["workflow"] == "mini" and len(auto["session_id"]) > 10
        bad = await http.post("/v1/tether/sessions", json={"workflow": {**inline, "terminal": "zzz"}})
        assert bad.status_code == 400
        assert bad.json()["error"]["message"] == "workflow: terminal[0]: 'zzz' is not a declared tool"
        assert bad.json()["error"]["param"] == "workflow"
        assert (await http.get("/v1/tether/sessions/abc")).json()["workflow"] == "fix_bug"
        listed = (await http.get("/v1/tether/workflows")).json()["workflows"]
        assert listed == [{"name": "fix_bug", "description": "", "terminal": ["submit"]}]
        assert (await http.delete("/v1/tether/sessions/abc")).json() == {"session_id": "abc", "deleted": True}
        gone = await http.get("/v1/tether/sessions/abc")
        assert gone.status_code == 404
        assert (
            await http.post("/v1/tether/sessions", json={"workflow": "x", "session_id": "a b"})
        ).status_code == 400
