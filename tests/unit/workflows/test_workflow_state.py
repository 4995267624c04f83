"""The rules: premature terminal calls, arg-matched prerequisites, ordered steps, escalation."""

from __future__ import annotations

from workflow_support import edit_workflow

from tether.workflows import Prerequisite, Step, ToolDef, Workflow, WorkflowState, violation_text


def test_terminal_before_steps_is_a_violation_naming_the_missing_steps() -> None:
    state = WorkflowState(edit_workflow())
    v = state.check("submit", {"summary": "done"})
    assert v is not None and v.kind == "premature_terminal"
    assert v.missing == ("run_tests",) and v.next_tool == "run_tests"
    state.record("run_tests", {}, ok=True)
    assert state.check("submit", {"summary": "done"}) is None
    state.record("submit", {"summary": "done"}, ok=True, result="accepted")
    assert state.finished and state.terminal_result == "accepted"


def test_failed_calls_complete_nothing() -> None:
    state = WorkflowState(edit_workflow())
    assert state.record("run_tests", {}, ok=False) == []
    assert state.pending_steps() == (Step("run_tests"),) and state.failures == 1
    assert state.check("submit", {"summary": "x"}) is not None


def test_prerequisite_matches_arguments() -> None:
    state = WorkflowState(edit_workflow())
    v = state.check("edit_file", {"path": "a.txt", "text": "x"})
    assert v is not None and v.kind == "missing_prerequisite"
    assert v.missing == ("read_file(path='a.txt')",) and v.next_tool == "read_file"
    state.record("read_file", {"path": "b.txt"}, ok=True)
    still = state.check("edit_file", {"path": "a.txt", "text": "x"})
    assert still is not None and still.missing == ("read_file(path='a.txt')",)
    assert state.check("edit_file", {"path": " b.txt ", "text": "x"}) is None  # strings compare stripped
    state.record("read_file", {"path": "a.txt"}, ok=False)
    assert state.check("edit_file", {"path": "a.txt", "text": "x"}) is not None
    state.record("read_file", {"path": "a.txt"}, ok=True)
    assert state.check("edit_file", {"path": "a.txt", "text": "x"}) is None


def test_prerequisite_without_match_and_with_renamed_arguments() -> None:
    wf = Workflow(
        "w",
        tools=(ToolDef("open"), ToolDef("write"), ToolDef("close")),
        terminal=("close",),
        prerequisites=(Prerequisite("write", "open", (("file", "name"),)), Prerequisite("close", "write")),
    )
    state = WorkflowState(wf)
    v = state.check("close", {})
    assert v is not None and v.missing == ("write",)
    state.record("open", {"name": "f"}, ok=True)
    assert state.check("write", {"file": "f"}) is None
    missing = state.check("write", {"file": "g"})
    assert missing is not None and missing.missing == ("open(name='g')",)


def test_steps_with_arguments_and_order() -> None:
    tools = (ToolDef("read"), ToolDef("done"))
    steps = (Step("read", {"path": "a"}), Step("read", {"path": "b"}))
    loose = WorkflowState(Workflow("w", tools, ("done",), steps=steps))
    assert loose.record("read", {"path": "b"}, ok=True) == [steps[1]]
    assert loose.record("read", {"path": "c"}, ok=True) == []
    assert loose.pending_steps() == (steps[0],)
    ordered = WorkflowState(Workflow("w", tools, ("done",), steps=steps, ordered=True))
    assert ordered.record("read", {"path": "b"}, ok=True) == []  # b before a does not count
    assert ordered.record("read", {"path": "a"}, ok=True) == [steps[0]]
    assert ordered.next_step() == steps[1]
    v = ordered.check("done", {})
    assert v is not None and v.missing == ("read(path='b')",) and v.next_call == "read(path='b')"


def test_escalation_tiers_and_texts() -> None:
    state = WorkflowState(edit_workflow())
    v = state.check("submit", {"summary": "s"})
    assert v is not None
    texts = [violation_text(v, state.escalate(v)) for _ in range(4)]
    assert texts[0].startswith("Not executed: submit finishes the task")
    assert "run_tests" in texts[0] and "Do not call submit" not in texts[0]
    assert "Call run_tests now. Do not call submit until every step is done." in texts[1]
    assert "Last warning" in texts[2] and texts[3] == texts[2]
    p = state.check("edit_file", {"path": "a.txt", "text": ""})
    assert p is not None
    first = violation_text(p, state.escalate(p))
    assert first == (
        "Not executed: edit_file(path='a.txt', text='') requires read_file(path='a.txt') first, "
        "and that has not succeeded yet."
    )
    assert "Call read_file(path='a.txt') now, then call edit_file again." in violation_text(p, 2)
    assert state.violations == 5
    snap = state.snapshot()
    assert snap["violations"] == 5 and snap["pending"] == ["run_tests"]


def test_error_pattern_and_bounded_memory() -> None:
    state = WorkflowState(edit_workflow())
    assert state.is_error_text("Error: no such file")
    assert state.is_error_text("  permission denied: plan mode")
    assert not state.is_error_text("the error rate is 0")
    for i in range(300):
        state.record("read_file", {"path": f"f{i}"}, ok=True)
    seen = state.succeeded_with("read_file")
    assert len(seen) == 256 and seen[-1] == {"path": "f299"} and {"path": "f0"} not in seen
