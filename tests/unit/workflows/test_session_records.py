"""The explicit JSON form of workflows, workflow states and sessions (what the Redis store keeps)."""

from __future__ import annotations

import json
from collections import OrderedDict

import pytest
from workflow_support import edit_workflow

from tether.errors import SessionStoreUnavailableError
from tether.workflows import Prerequisite, Workflow, WorkflowState, workflow_from_mapping
from tether.workflows.session_backends import Session

WF = edit_workflow()


def through_json(data: object) -> object:
    return json.loads(json.dumps(data))


def test_workflow_to_dict_reads_back_equal() -> None:
    renamed = Workflow.build(
        "copy",
        tools=["read_file", "copy_file", "submit"],
        terminal="submit",
        steps=["read_file"],
        prerequisites=[Prerequisite("copy_file", "read_file", (("src", "path"),))],
        ordered=True,
        error_pattern="^nope",
    )
    for wf in (WF, renamed):
        assert workflow_from_mapping(through_json(wf.to_dict())) == wf
    assert renamed.to_dict()["prerequisites"] == [
        {"tool": "copy_file", "requires": "read_file", "match": {"src": "path"}}
    ]


def progressed() -> WorkflowState:
    state = WorkflowState(WF)
    state.record("read_file", {"path": "b.txt"}, ok=True)
    state.record("read_file", {"path": " a.txt "}, ok=True)
    state.record("run_tests", {}, ok=False)
    state.record("run_tests", {}, ok=True)
    violation = state.check("submit", {"summary": "x"})
    assert violation is None  # run_tests done: submit is allowed now
    edit = state.check("edit_file", {"path": "c.txt", "text": "x"})
    assert edit is not None
    state.escalate(edit)
    state.escalate(edit)
    state.record("submit", {"summary": "done"}, ok=True, result="submitted")
    return state


def test_workflow_state_round_trip_keeps_progress_order_and_tiers() -> None:
    state = progressed()
    back = WorkflowState.from_dict(WF, through_json(state.to_dict()))  # type: ignore[arg-type]
    assert back.snapshot() == state.snapshot()
    assert back.to_dict() == state.to_dict()
    assert back.succeeded_with("read_file") == [{"path": "b.txt"}, {"path": " a.txt "}]
    assert back.finished and back.terminal_result == "submitted" and back.violations == 2
    # Behaviour, not only data: argument matching (stripped strings) and the next tier.
    assert back.check("edit_file", {"path": "a.txt", "text": "x"}) is None
    repeat = back.check("edit_file", {"path": "c.txt", "text": "y"})
    assert repeat is not None and back.escalate(repeat) == 3


def test_workflow_state_from_a_workflow_with_other_steps_is_refused() -> None:
    data = progressed().to_dict()
    other = Workflow.build("fix_bug", tools=["a", "b"], terminal="b")
    with pytest.raises(ValueError, match="saved state has 1 steps, workflow 'fix_bug' has 0"):
        WorkflowState.from_dict(other, data)


def session(workflow: Workflow = WF) -> Session:
    seen: OrderedDict[str, None] = OrderedDict.fromkeys(["c2", "c1"])
    state = progressed() if workflow is WF else WorkflowState(workflow)
    return Session("s1", workflow, state, 10.5, 12.25, seen, "next_step")


def test_session_round_trip_names_a_registered_workflow_and_carries_an_inline_one() -> None:
    registered = {WF.name: WF}
    named = session().to_dict(registered)
    assert named["workflow"] == "fix_bug" and "definition" not in named
    back = Session.from_dict(through_json(named), registered)  # type: ignore[arg-type]
    assert back.workflow is WF and list(back.seen) == ["c2", "c1"] and back.steer == "next_step"
    assert (back.id, back.created, back.last_used) == ("s1", 10.5, 12.25)
    assert back.state.to_dict() == session().state.to_dict()

    inline = Workflow.build("mini", tools=["a", "b"], terminal="b", steps=["a"])
    record = session(inline).to_dict(registered)
    assert record["definition"]["steps"] == [{"tool": "a", "args": {}, "description": ""}]
    assert Session.from_dict(through_json(record), {}).workflow == inline  # type: ignore[arg-type]
    # Same name as a registered workflow but a different definition: stored in full, not by name.
    changed = edit_workflow(ordered=True)
    assert "definition" in session(changed).to_dict(registered)


def test_session_record_naming_an_unregistered_workflow_is_a_503() -> None:
    record = session().to_dict({WF.name: WF})
    with pytest.raises(SessionStoreUnavailableError, match="same --workflow files") as err:
        Session.from_dict(record, {})
    assert err.value.status == 503 and err.value.retryable
    with pytest.raises(ValueError, match="version"):
        Session.from_dict({**record, "v": 99}, {WF.name: WF})
