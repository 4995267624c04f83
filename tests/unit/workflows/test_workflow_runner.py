"""WorkflowRunner over a scripted engine: every rule, budget, guardrail and event."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs
from workflow_support import Files, PromptEngine, call, calls, edit_workflow, say, scripted_core

from tether.chat import Message
from tether.config import ServerConfig
from tether.engine.scheduler import Scheduler
from tether.engine.scripted import ScriptedEngine
from tether.errors import ConfigError
from tether.proxy.app import create_app
from tether.sandbox import CallableExecutor, make_toolbox
from tether.workflows import (
    Budgets,
    Compacted,
    CompactionPolicy,
    CoreClient,
    Finished,
    HttpClient,
    InterventionEvent,
    ModelCalled,
    RunEvent,
    Step,
    ToolDef,
    ToolResultEvent,
    Workflow,
    WorkflowRunner,
)


def make(
    replies: Sequence[str],
    *,
    files: Files | None = None,
    wf: Workflow | None = None,
    parallel: bool = False,
    **kwargs: Any,
) -> tuple[WorkflowRunner, Files, list[RunEvent], ScriptedEngine]:
    core, engine = scripted_core(replies)
    files = files or Files()
    events: list[RunEvent] = []
    runner = WorkflowRunner(
        wf or edit_workflow(),
        CoreClient(core, constrain="off", parallel_tool_calls=parallel),
        handlers=files.handlers(),
        on_event=events.append,
        **kwargs,
    )
    return runner, files, events, engine


def tool_messages(messages: Sequence[Message]) -> list[str]:
    return [m.content for m in messages if m.role == "tool"]


def assert_paired(messages: Sequence[Message]) -> None:
    results = {m.tool_call_id for m in messages if m.role == "tool"}
    for m in messages:
        for c in m.tool_calls:
            assert c.id in results, f"tool call {c.id} has no result"


HAPPY = [
    call("read_file", path="a.txt"),
    call("edit_file", path="a.txt", text="fixed"),
    call("run_tests"),
    call("submit", summary="fixed it"),
]


async def test_happy_path_runs_to_the_terminal_tool() -> None:
    runner, files, events, _ = make(HAPPY)
    result = await runner.run()
    assert result.ok and result.reason == "terminal_succeeded" and result.iterations == 4
    assert [n for n, _ in files.executed] == ["read_file", "edit_file", "run_tests", "submit"]
    assert files.files["a.txt"] == "fixed"
    assert result.terminal_call is not None and result.terminal_call.name == "submit"
    assert result.terminal_result == "accepted"
    assert result.state["steps"] == [{"step": "run_tests", "done": True}] and result.state["finished"]
    kinds = [type(e).__name__ for e in events]
    assert kinds.count("ModelCalled") == 4 and kinds.count("ToolResultEvent") == 4
    assert kinds[-1] == "Finished" and isinstance(events[-1], Finished) and events[-1].result is result
    done = [e for e in events if isinstance(e, ToolResultEvent) and e.completed_step]
    assert [e.completed_step for e in done] == ["run_tests"]
    assert '{"passed": 3, "failed": 0}' in tool_messages(result.messages)
    assert_paired(result.messages)


async def test_premature_terminal_is_not_executed_and_names_the_missing_step() -> None:
    runner, files, events, _ = make(
        [call("submit", summary="early"), call("run_tests"), call("submit", summary="ok")]
    )
    result = await runner.run()
    assert result.ok and [n for n, _ in files.executed] == ["run_tests", "submit"]
    first = tool_messages(result.messages)[0]
    assert first.startswith("Not executed: submit finishes the task") and "run_tests" in first
    blocked = [e for e in events if isinstance(e, InterventionEvent) and e.kind == "premature_terminal"]
    assert len(blocked) == 1 and blocked[0].tool == "submit"
    # After the block the runner names the missing tool in tool_choice.
    assert [e.tool_choice for e in events if isinstance(e, ModelCalled)] == [
        "required",
        "run_tests",
        "required",
    ]
    assert_paired(result.messages)


async def test_arg_matched_prerequisite_blocks_the_edit_until_the_same_path_is_read() -> None:
    replies = [
        call("read_file", path="b.txt"),
        call("edit_file", path="a.txt", text="x"),
        call("read_file", path="a.txt"),
        call("edit_file", path="a.txt", text="x"),
        call("run_tests"),
        call("submit", summary="s"),
    ]
    runner, files, events, _ = make(replies)
    result = await runner.run()
    assert result.ok
    assert [a.get("path") for n, a in files.executed if n in ("read_file", "edit_file")] == [
        "b.txt",
        "a.txt",
        "a.txt",
    ]
    msg = tool_messages(result.messages)[1]
    assert "requires read_file(path='a.txt') first" in msg
    assert any(isinstance(e, InterventionEvent) and e.kind == "missing_prerequisite" for e in events)


async def test_repeated_violations_escalate_then_hit_the_limit() -> None:
    wf = edit_workflow(budgets=Budgets(max_violations=2))
    runner, files, _, _ = make([call("submit", summary="now")], wf=wf, steer="off")
    result = await runner.run()
    assert result.status == "failed" and result.reason == "violation_limit"
    assert files.executed == [] and result.iterations == 3
    texts = tool_messages(result.messages)
    assert "Do not call submit" not in texts[0]
    assert "Do not call submit" in texts[1] and "Last warning" not in texts[1]
    assert "Last warning" in texts[2]


async def test_blocked_calls_count_against_the_step_retry_budget() -> None:
    wf = edit_workflow(budgets=Budgets(max_retries_per_step=1, max_violations=10))
    runner, _, _, _ = make([call("submit", summary="now")], wf=wf, steer="off")
    result = await runner.run()
    assert (result.status, result.reason, result.iterations) == (
        "failed",
        "retries_exhausted: blocked_calls",
        2,
    )


async def test_tool_exceptions_come_back_as_results_and_count_against_the_error_budget() -> None:
    files = Files()
    files.fail_tests = True
    wf = edit_workflow(budgets=Budgets(max_consecutive_tool_errors=1))
    runner, _, events, _ = make([call("run_tests")], files=files, wf=wf)
    result = await runner.run()
    assert (result.status, result.reason, result.iterations) == ("failed", "tool_error_limit", 2)
    errors = [e for e in events if isinstance(e, ToolResultEvent)]
    assert (
        all(e.is_error for e in errors)
        and errors[0].content == "run_tests failed: RuntimeError: tests crashed"
    )
    assert result.state["failures"] == 2 and result.state["pending"] == ["run_tests"]


async def test_a_success_resets_the_consecutive_error_count() -> None:
    replies = [
        call("read_file", path="zzz"),
        call("read_file", path="a.txt"),
        call("read_file", path="zzz"),
        call("run_tests"),
        call("submit", summary="s"),
    ]
    wf = edit_workflow(budgets=Budgets(max_consecutive_tool_errors=1))
    runner, _, _, _ = make(replies, wf=wf)
    result = await runner.run()
    assert result.ok and "read_file failed: KeyError: 'zzz'" in tool_messages(result.messages)


async def test_iteration_limit() -> None:
    wf = edit_workflow(budgets=Budgets(max_iterations=2))
    runner, _, _, _ = make([call("read_file", path="a.txt")], wf=wf)
    result = await runner.run()
    assert (result.status, result.reason, result.iterations) == ("failed", "iteration_limit", 2)


async def test_guardrails_resolve_names_and_nudge_text_replies() -> None:
    replies = [say("I think it is fine."), call("RunTests"), call("submit", summary="s")]
    runner, files, events, _ = make(replies)
    result = await runner.run()
    assert result.ok and [n for n, _ in files.executed] == ["run_tests", "submit"]
    kinds = [e.kind for e in events if isinstance(e, InterventionEvent)]
    assert "guardrail_retry" in kinds and "guardrail_name_resolved" in kinds
    nudge = next(
        m for m in result.messages if m.role == "user" and m.content.startswith("This step requires")
    )
    assert "read_file, edit_file, run_tests, submit" in nudge.content


async def test_guardrail_retries_run_out() -> None:
    wf = edit_workflow(budgets=Budgets(max_retries_per_step=1))
    runner, _, _, _ = make([say("no")], wf=wf)
    result = await runner.run()
    assert (result.status, result.reason) == ("failed", "retries_exhausted: tool_required")


async def test_invalid_arguments_are_retried_not_executed() -> None:
    replies = [call("edit_file", path="a.txt"), call("run_tests"), call("submit", summary="s")]
    runner, files, _, _ = make(replies)
    result = await runner.run()
    assert result.ok and "edit_file" not in [n for n, _ in files.executed]
    assert any(
        "invalid arguments for tool 'edit_file'" in t and "text" in t for t in tool_messages(result.messages)
    )


async def test_several_calls_in_one_turn_are_checked_in_order() -> None:
    replies = [
        calls(
            ("read_file", {"path": "a.txt"}),
            ("edit_file", {"path": "a.txt", "text": "y"}),
            ("submit", {"summary": "x"}),
        ),
        call("run_tests"),
        call("submit", summary="s"),
    ]
    runner, files, _, _ = make(replies, parallel=True)
    result = await runner.run()
    assert result.ok
    assert [n for n, _ in files.executed] == ["read_file", "edit_file", "run_tests", "submit"]
    first_turn = tool_messages(result.messages)[:3]
    assert first_turn[2].startswith("Not executed: submit finishes the task")
    assert_paired(result.messages)


async def test_cancel_stops_the_run_and_frees_the_slot() -> None:
    engine = PromptEngine(lambda prompt: call("run_tests") + " " * 200, delay=0.01)
    core, _ = scripted_core(engine=engine)
    files = Files()
    started = asyncio.Event()
    runner = WorkflowRunner(
        edit_workflow(),
        CoreClient(core, constrain="off"),
        handlers=files.handlers(),
        on_event=lambda e: started.set() if isinstance(e, ModelCalled) else None,
    )
    task = asyncio.create_task(runner.run())
    await started.wait()
    await asyncio.sleep(0.05)
    runner.cancel()
    result = await asyncio.wait_for(task, 10)
    assert (result.status, result.reason) == ("cancelled", "cancelled") and files.executed == []
    snap = core.scheduler.snapshot()
    assert snap["busy_slots"] == 0 and snap["cancelled"] == 1


def _count(messages: Sequence[Message]) -> int:
    return sum(len(m.content) + 8 + sum(len(c.arguments) + 20 for c in m.tool_calls) for m in messages)


async def test_compaction_never_erases_progress() -> None:
    files = Files(**{"a.txt": "x" * 900, "big.txt": "y" * 900})
    replies = [call("run_tests")] + [call("read_file", path="big.txt")] * 5 + [call("submit", summary="s")]
    runner, _, events, _ = make(
        replies,
        files=files,
        count_tokens=_count,
        context_tokens=1500,
        reserve_tokens=0,
        compaction=CompactionPolicy(keep_last=2, tool_result_chars=50),
    )
    with capture_logs() as logs:
        result = await runner.run()
    assert result.ok, result.reason
    compacted = [e for e in events if isinstance(e, Compacted)]
    assert compacted and all(e.tokens <= 1500 for e in compacted)
    assert "elide" in {t for e in compacted for t in e.tiers}
    # The run_tests turn was elided from the history, yet submit was allowed: the state remembers.
    assert not any(c.name == "run_tests" for m in result.messages for c in m.tool_calls)
    marker = next(m for m in result.messages if m.content.startswith("[Earlier conversation elided"))
    assert "done: run_tests" in marker.content
    assert not any(isinstance(e, InterventionEvent) for e in events)
    assert any(entry["event"] == "context_compacted" for entry in logs)
    assert_paired(result.messages)


async def test_event_callback_failures_do_not_break_the_run() -> None:
    core, _ = scripted_core(HAPPY)
    seen: list[str] = []

    async def callback(event: RunEvent) -> None:
        seen.append(type(event).__name__)
        raise RuntimeError("observer bug")

    runner = WorkflowRunner(
        edit_workflow(), CoreClient(core, constrain="off"), handlers=Files().handlers(), on_event=callback
    )
    with capture_logs() as logs:
        result = await runner.run()
    assert result.ok and seen[-1] == "Finished"
    assert any(entry["event"] == "workflow_event_callback_failed" for entry in logs)


async def test_http_client_against_an_openai_compatible_server() -> None:
    engine = ScriptedEngine(HAPPY)
    app = create_app(ServerConfig(), Scheduler([engine]))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as http:
        client = HttpClient(
            "http://test/v1", "scripted", client=http, extra_body={"tether": {"constrain": "off"}}
        )
        files = Files()
        result = await WorkflowRunner(
            edit_workflow(), client, handlers=files.handlers(), context_tokens=4096
        ).run()
        assert result.ok and [n for n, _ in files.executed] == [
            "read_file",
            "edit_file",
            "run_tests",
            "submit",
        ]
        body = client.body([Message("user", "hi")], [ToolDef("submit").spec()], "submit")
        assert body["tool_choice"] == {"type": "function", "function": {"name": "submit"}}
        bad = HttpClient("http://test/v1", "no-such-model", client=http)
        failed = await WorkflowRunner(edit_workflow(), bad, handlers=files.handlers()).run()
        assert failed.status == "failed" and failed.reason.startswith(
            "model_error: model server answered HTTP 404"
        )
    assert any("Result of read_file" in p for p in engine.prompts)


async def test_sandbox_toolbox_tools_and_missing_handlers(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello from the sandbox\n")
    box = make_toolbox(tmp_path, CallableExecutor({}))
    wf = Workflow(
        "w",
        (ToolDef("read_file"), ToolDef.of("done", None)),
        ("done",),
        steps=(Step("read_file", {"path": "notes.txt"}),),
    )
    core, _ = scripted_core([call("read_file", path="notes.txt"), call("done")])
    got: list[str] = []
    runner = WorkflowRunner(
        wf,
        CoreClient(core, constrain="off"),
        toolbox=box,
        handlers={"done": lambda: "bye"},
        on_event=lambda e: got.append(e.content) if isinstance(e, ToolResultEvent) else None,
    )
    assert runner.specs[0].parameters["required"] == ["path"]  # schema taken from the toolbox
    result = await runner.run("Read notes.txt.")
    assert result.ok and "hello from the sandbox" in got[0]
    with pytest.raises(ConfigError, match="'edit_file' of workflow 'w' is not offered by the toolbox"):
        WorkflowRunner(
            Workflow("w", (ToolDef("edit_file"), ToolDef("done")), ("done",)),
            CoreClient(core),
            toolbox=box,
            handlers={"done": lambda: ""},
        )
    with pytest.raises(ConfigError, match="'done' of workflow 'w' has no handler"):
        WorkflowRunner(Workflow("w", (ToolDef("done"),), ("done",)), CoreClient(core))
    with pytest.raises(ConfigError, match="handlers: 'nope' is not a tool"):
        WorkflowRunner(
            Workflow("w", (ToolDef("done"),), ("done",)),
            CoreClient(core),
            handlers={"done": str, "nope": str},
        )


READ_SUBMIT = Workflow(
    "read_then_submit",
    tools=(
        ToolDef.of("read_file", {"type": "object", "properties": {"path": {"type": "string"}}}),
        ToolDef.of("submit", {"type": "object", "properties": {"summary": {"type": "string"}}}),
    ),
    terminal=("submit",),
    steps=(Step("read_file"),),
)


def _agent(prompt: str) -> str:
    """A deterministic 'model': read the run's own file, then submit what it said."""
    name = prompt.split("Task for ", 1)[1].split(".", 1)[0]
    if "Result of read_file:" not in prompt:
        return call("read_file", path=f"{name}.txt")
    content = prompt.rsplit("Result of read_file:\n", 1)[1].split("<|im_end|>", 1)[0]
    return call("submit", summary=content)


async def test_eight_concurrent_runs_share_one_preempting_slot() -> None:
    engine = PromptEngine(_agent, hold=True)
    core, _ = scripted_core(engine=engine, preempt=True, queue_limit=16)
    contents = {f"r{i}": f"content of r{i}" for i in range(8)}

    async def one(i: int) -> tuple[str, Any]:
        handlers = {
            "read_file": lambda path: contents[path.removesuffix(".txt")],
            "submit": lambda summary: "ok",
        }
        runner = WorkflowRunner(
            READ_SUBMIT, CoreClient(core, constrain="off", priority=7 - i), handlers=handlers
        )
        return f"r{i}", await runner.run(f"Task for r{i}. Read your file, then submit it.")

    first = asyncio.create_task(one(0))
    await asyncio.to_thread(engine.blocked.wait, 10)
    rest = [asyncio.create_task(one(i)) for i in range(1, 8)]
    while core.scheduler.queue_depth < 7:
        await asyncio.sleep(0.005)
    engine.go.set()
    results = await asyncio.gather(first, *rest)
    for name, result in results:
        assert result.ok, (name, result.reason)
        assert dict(result.terminal_call.arguments) == {"summary": contents[name]}
    snap = core.scheduler.snapshot()
    assert snap["completed"] == 16 and snap["busy_slots"] == 0 and snap["queue_depth"] == 0
    # r0 (lowest priority) holds the slot until seven runs that outrank it are queued: it is preempted.
    assert snap["preempted"] >= 1 and snap["resumed"] == snap["preempted"] and not engine.overlap
