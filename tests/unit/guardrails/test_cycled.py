"""A call that would only go round a loop again is known; one after which something new was called
is not."""

from __future__ import annotations

from tether.calls import ToolCall
from tether.chat import Message
from tether.guardrails.steps.context import call_key, cycled


def _turns(*steps: tuple[str, str, str]) -> list[Message]:
    """The user's ask, then one assistant call and its result per ``(tool, path, result)``."""
    out = [Message("user", "find the logs")]
    for n, (tool, path, result) in enumerate(steps):
        out.append(Message("assistant", tool_calls=(ToolCall(tool, {"path": path}, id=f"c{n}"),)))
        out.append(Message("tool", result, tool_call_id=f"c{n}"))
    return out


def _key(tool: str, path: str) -> str:
    return call_key(ToolCall(tool, {"path": path}))


def test_an_alternating_loop_is_cut() -> None:
    history = _turns(("find", "a", "none"), ("find", "b", "none"), ("find", "a", "none"))
    assert cycled(history) == {_key("find", "b"), _key("find", "a")}
    assert cycled(history[:-2]) == {_key("find", "b")}  # a: b was new after it


def test_a_new_call_in_between_may_change_what_a_repeat_sees() -> None:
    history = _turns(("ls", ".", "a.txt"), ("mkdir", "logs", "ok"))
    assert _key("ls", ".") not in cycled(history)


def test_failures_and_earlier_asks_do_not_count() -> None:
    failed = _turns(("find", "a", "Error: no such file"), ("find", "b", "none"), ("find", "a", "none"))
    assert _key("find", "a") in cycled(failed)  # its last result is fine, and nothing new came after
    assert cycled(_turns(("find", "a", "Error: busy"))) == set()
    assert cycled(_turns(("find", "a", "none"), ("find", "a", "Error: busy"))) == set()  # retried
    asked_again = [*_turns(("find", "a", "none"), ("find", "b", "none")), Message("user", "and now?")]
    assert cycled(asked_again) == set()  # a new ask starts afresh
