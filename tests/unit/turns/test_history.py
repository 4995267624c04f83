"""A client's history made safe: broken calls repaired or summarised, every result paired."""

from __future__ import annotations

from tether.calls import ToolCall, decode_arguments
from tether.chat import Message
from tether.grammar.formats.base import ToolSpec
from tether.turns.history import NO_RESULT, safe_history

READ = ToolSpec("read_file", "Read a file", {"type": "object", "properties": {"path": {"type": "string"}}})
ASK = Message("user", "show a.txt")


def made(name: str, arguments: str, id: str = "c1") -> Message:
    args, repairs = decode_arguments(arguments)
    return Message("assistant", "", tool_calls=(ToolCall(name, args, id, arguments, repairs),))


def result(content: str, id: str | None = "c1") -> Message:
    return Message("tool", content, tool_call_id=id)


def kinds(history: list[Message]) -> list[str]:
    return [r.kind for r in safe_history(history, [READ])[1]]


def test_a_sound_history_is_left_as_it_is() -> None:
    history = [ASK, made("read_file", '{"path": "a.txt"}'), result("hello")]
    assert safe_history(history, [READ]) == (tuple(history), ())


def test_almost_json_and_a_name_that_resolves_are_repaired() -> None:
    history = [ASK, made("Read", "{'path': 'a.txt',}"), result("hello")]
    out, repairs = safe_history(history, [READ])
    (call,) = out[1].tool_calls
    assert (call.name, dict(call.arguments)) == ("read_file", {"path": "a.txt"})
    assert call.arguments_json() == '{"path": "a.txt"}'  # not the client's broken text
    assert [r.kind for r in repairs] == ["arguments_read", "name_resolved"]
    assert out[2] == Message("tool", "hello", tool_call_id="c1", name=None)


def test_a_call_that_cannot_be_read_is_summarised_with_what_came_back() -> None:
    for broken, why in (
        (made("read_file", '{"path": '), "not valid JSON"),  # cut off: its end is unknown
        (made("read_file", "[1, 2]"), "not a JSON object"),
        (made("frobnicate", '{"path": "a.txt"}'), "no tool of that name"),
    ):
        out, repairs = safe_history([ASK, broken, result("Error: unknown tool")], [READ])
        assert len(out) == 2 and out[1].tool_calls == ()
        assert why in out[1].content and "What came back: Error: unknown tool" in out[1].content
        assert "{" not in out[1].content.split("What came back")[0]  # nothing to copy as a call
        assert [r.kind for r in repairs] == ["call_summarised"]


def test_results_are_paired_with_calls() -> None:
    # A result that answers no call becomes the user's text.
    out, _ = safe_history([ASK, result("stray", "zz")], [READ])
    assert [m.role for m in out] == ["user", "user"] and "answers no call" in out[1].content
    # A call no result answers gets one that reads as a failure, before the next message.
    out, _ = safe_history([ASK, made("read_file", '{"path": "a"}'), Message("user", "and?")], [READ])
    assert [m.role for m in out] == ["user", "assistant", "tool", "user"]
    assert out[2].content == NO_RESULT and out[2].tool_call_id == "c1"
    out, _ = safe_history([ASK, made("read_file", '{"path": "a"}')], [READ])  # at the end too
    assert out[-1].content == NO_RESULT
    # A result without an id answers the earliest waiting call.
    assert kinds([ASK, made("read_file", '{"path": "a"}'), result("hi", None)]) == ["result_paired"]


def test_ids_used_twice_get_fresh_ones_and_keep_their_results() -> None:
    twice = Message(
        "assistant",
        "",
        tool_calls=(ToolCall("read_file", {"path": "a"}, "c1"), ToolCall("read_file", {"path": "b"}, "c1")),
    )
    again = made("read_file", '{"path": "c"}')  # a later turn reuses the id too
    history = [ASK, twice, result("A"), result("B"), again, result("C")]
    out, repairs = safe_history(history, [READ])
    ids = [c.id for m in out for c in m.tool_calls]
    assert len(set(ids)) == 3 and ids[0] == "c1"
    assert [m.tool_call_id for m in out if m.role == "tool"] == ids  # A, B, C answer their own calls
    assert [r.kind for r in repairs] == ["id_renamed", "id_renamed"]


def test_names_are_not_judged_when_no_tools_are_offered() -> None:
    history = [ASK, made("anything", '{"x": 1}'), result("ok")]
    assert safe_history(history, []) == (tuple(history), ())


def test_a_failure_retried_identically_with_success_is_left_out() -> None:
    history = [
        ASK,
        made("read_file", '{"path": "a.txt"}', "c1"),
        result("Error: the disk is busy. Retry.", "c1"),
        made("read_file", '{"path": "a.txt"}', "c2"),
        result("hello", "c2"),
    ]
    out, repairs = safe_history(history, [READ])
    assert out == (ASK, history[3], history[4]) and [r.kind for r in repairs] == ["failure_retried"]
    # Retried with other values, or failing again, the failure stays: it says what went wrong.
    other = [*history[:3], made("read_file", '{"path": "b.txt"}', "c2"), result("hello", "c2")]
    again = [*history[:4], result("Error: the disk is busy. Retry.", "c2")]
    assert safe_history(other, [READ])[0] == tuple(other)
    assert safe_history(again, [READ])[0] == tuple(again)
    # A later request's retry does not reach back past its user message.
    later = [*history[:3], Message("user", "try again"), *history[3:]]
    assert safe_history(later, [READ])[0] == tuple(later)
