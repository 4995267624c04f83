"""``Guardrails.check`` / ``acheck`` on chat completions: decisions, retry messages, interventions."""

from __future__ import annotations

import json
from typing import Any

import pytest
from guardrails_support import READ, TOOLS, WRITE, call, completion, tool
from openai.types.chat import ChatCompletion
from structlog.testing import capture_logs

from tether.chat import Message
from tether.errors import FormatError, InvalidRequestError, QueueFullError, QueueTimeoutError
from tether.grammar.formats.base import ToolSpec
from tether.guardrails import (
    KINDS,
    Guardrails,
    GuardrailStats,
    Intervention,
    Regenerated,
    Regenerator,
    finalize,
    interventions_of,
    unknown_tool_text,
)

AVAILABLE = "Available tools: read_file, write_file."


def kinds(decision: Any) -> list[str]:
    return [i.kind for i in decision.interventions]


def test_forge_regression_text_reply_is_an_answer_with_zero_retries() -> None:
    # Forge re-asks on every text reply and returns a degraded last attempt; "thanks, bye" is a good reply.
    guard = Guardrails(TOOLS, max_retries=5)
    response = completion("thanks, bye")
    decision = guard.check(response, tool_choice="auto")
    assert (decision.action, decision.reason) == ("answer", "text_answer")
    assert decision.retry_messages == () and decision.interventions == () and decision.tool_calls == ()
    assert decision.content == "thanks, bye"
    assert guard.stats.actions == {"answer": 1} and guard.stats.interventions == {}
    final = finalize(response, decision, decision.interventions)
    assert final["choices"] == response["choices"] and interventions_of(final) == []


def test_exact_call_executes_untouched() -> None:
    raw = '{"path":"a.txt"}'
    decision = Guardrails(TOOLS).check(completion(None, [call("read_file", raw, "call_abc")]))
    assert decision.action == "execute" and decision.interventions == ()
    (checked,) = decision.tool_calls
    assert checked.to_openai() == call("read_file", raw, "call_abc")  # the model's own text, byte for byte
    assert checked.arguments == {"path": "a.txt"} and decision.verdicts[0].status == "ok"


def test_alias_and_coercion_are_applied_and_recorded() -> None:
    response = completion(None, [call("Read", {"path": "a.txt", "limit": "5"}, "call_7")])
    decision = Guardrails(TOOLS).check(response)
    assert decision.action == "execute"
    assert kinds(decision) == ["name_resolved", "args_coerced"]
    assert decision.interventions[0] == Intervention(
        "name_resolved", "alias match: 'Read' -> 'read_file'", "read_file", "Read", "read_file"
    )
    (checked,) = decision.tool_calls
    assert (
        checked.id == "call_7" and checked.name == "read_file" and decision.verdicts[0].written_name == "Read"
    )
    assert json.loads(checked.to_openai()["function"]["arguments"]) == {"path": "a.txt", "limit": 5}
    json.dumps([i.to_dict() for i in decision.interventions])  # JSON-serializable


def test_unknown_tool_retries_with_a_tool_role_error_turn() -> None:
    response = completion("let me try", [call("frobnicate", {"x": 1}, "call_9")])
    decision = Guardrails(TOOLS).check(response)
    assert (decision.action, decision.reason) == ("retry", "unknown_tool")
    assert kinds(decision) == ["name_unresolved", "retry"]
    assistant, tool_turn = decision.retry_messages
    assert assistant == {
        "role": "assistant",
        "content": "let me try",
        "tool_calls": [call("frobnicate", {"x": 1}, "call_9")],
    }
    assert tool_turn == {
        "role": "tool",
        "tool_call_id": "call_9",
        "content": f"Error: unknown tool 'frobnicate'. {AVAILABLE}",
    }


def test_retry_wording_escalates_and_then_fails() -> None:
    guard = Guardrails(TOOLS, max_retries=2)
    response = completion(None, [call("frobnicate", {})])
    texts = [guard.check(response, attempt=a).retry_messages[-1]["content"] for a in (0, 1)]
    assert texts[0] != texts[1] and all(
        t.startswith(f"Error: unknown tool 'frobnicate'. {AVAILABLE}") for t in texts
    )
    final = guard.check(response, attempt=2)
    assert (final.action, final.reason) == ("fail", "unknown_tool") and final.retry_messages == ()
    assert kinds(final) == ["name_unresolved", "failed"]
    assert final.tool_calls[0].name == "frobnicate" and not final.verdicts[0].resolved  # no guess
    assert guard.stats.actions == {"retry": 2, "fail": 1}


def test_unknown_tool_as_text() -> None:
    guard = Guardrails(TOOLS, unknown_tool="text")
    response = completion(None, [call("frobnicate", {})])
    decision = guard.check(response)
    assert (decision.action, decision.reason) == ("answer", "unknown_tool")
    assert decision.content == unknown_tool_text("frobnicate", ["read_file", "write_file"])
    assert decision.tool_calls == () and decision.retry_messages == ()
    final = finalize(response, decision, decision.interventions)
    message = final["choices"][0]["message"]
    assert (
        message["content"] == f"Error: unknown tool 'frobnicate'. {AVAILABLE}" and "tool_calls" not in message
    )
    assert final["choices"][0]["finish_reason"] == "stop"
    assert [i["kind"] for i in interventions_of(final)] == ["name_unresolved", "unknown_tool_text"]


def test_invalid_arguments_retry_answers_every_call_id() -> None:
    good = call("write_file", {"path": "b", "content": "x"}, "call_good")
    bad = call("read_file", {"path": True, "limit": "2.5"}, "call_bad")
    decision = Guardrails(TOOLS).check(completion(None, [good, bad]))
    assert (decision.action, decision.reason) == ("retry", "invalid_arguments")
    assert kinds(decision) == ["args_invalid", "retry"]
    assistant, *turns = decision.retry_messages
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_good", "call_bad"]
    by_id = {t["tool_call_id"]: t["content"] for t in turns}
    assert by_id["call_good"].startswith("Not executed")
    assert by_id["call_bad"].startswith("Error: invalid arguments for tool 'read_file':")
    assert '- limit: expected integer, got "2.5" (string); schema: {"type":"integer"}' in by_id["call_bad"]
    assert "- path: expected string, got true (boolean)" in by_id["call_bad"]


def test_truncated_arguments_are_invalid_not_completed() -> None:
    decision = Guardrails(TOOLS).check(completion(None, [call("read_file", '{"path": "a.t')]))
    assert decision.action == "retry" and "not valid JSON" in decision.interventions[0].detail
    assert decision.retry_messages[0]["tool_calls"][0]["function"]["arguments"] == '{"path": "a.t'


@pytest.mark.parametrize(
    ("tool_choice", "require_tool", "needle"),
    [
        ("required", False, "read_file, write_file"),
        ({"type": "function", "function": {"name": "write_file"}}, False, "'write_file'"),
        ("auto", True, "read_file, write_file"),  # an active workflow step needs a tool
    ],
)
def test_text_when_a_tool_is_required_is_retried(tool_choice: Any, require_tool: bool, needle: str) -> None:
    decision = Guardrails(TOOLS).check(
        completion("I'd rather chat"), tool_choice=tool_choice, require_tool=require_tool
    )
    assert (decision.action, decision.reason) == ("retry", "tool_required")
    assistant, nudge = decision.retry_messages
    assert assistant == {"role": "assistant", "content": "I'd rather chat"}
    assert nudge["role"] == "user" and needle in nudge["content"]


def test_named_tool_choice_narrows_the_offer() -> None:
    guard = Guardrails(TOOLS)
    named = {"type": "function", "function": {"name": "write_file"}}
    decision = guard.check(completion(None, [call("read_file", {"path": "a"})]), tool_choice=named)
    assert decision.action == "retry" and kinds(decision)[0] == "name_unresolved"
    assert "Available tools: write_file." in decision.retry_messages[-1]["content"]
    with pytest.raises(InvalidRequestError):
        guard.check(completion("x"), tool_choice="delete_everything")


def test_tool_choice_none_keeps_text_as_text() -> None:
    text = '<tool_call>{"name": "read_file", "arguments": {"path": "a"}}</tool_call>'
    decision = Guardrails(TOOLS).check(completion(text), tool_choice="none")
    assert decision.action == "answer" and decision.content == text and decision.tool_calls == ()


@pytest.mark.parametrize(
    ("content", "name", "leftover"),
    [
        ('<tool_call>{"name": "read_file", "arguments": {"path": "a"}}</tool_call>', "read_file", None),
        (
            'Reading it.\n<tool_call>\n{"name": "read_file", "arguments": {"path": "a"}}\n</tool_call>',
            "read_file",
            "Reading it.",
        ),
        ('{"name": "write_file", "arguments": {"path": "a", "content": "b"}}', "write_file", None),
        ('{"tool_calls": [{"name": "Read", "arguments": {"path": "a"}}]}', "read_file", None),
    ],
)
def test_calls_written_as_text_are_rescued(content: str, name: str, leftover: str | None) -> None:
    decision = Guardrails(TOOLS).check(completion(content))
    assert decision.action == "execute" and decision.content == leftover
    (checked,) = decision.tool_calls
    assert checked.name == name and checked.id.startswith("call_")
    assert any(r.startswith("from_text:") for r in checked.repairs)
    assert kinds(decision)[0] == "rescued"
    assert json.loads(checked.to_openai()["function"]["arguments"])["path"] == "a"


@pytest.mark.parametrize(
    "content",
    [
        "thanks, bye",
        'You could call {"name": "read_file", "arguments": {"path": "a"}} later.',  # prose about a call
        '{"name": "Bob", "age": 3}',  # data, not a call
        '```json\n{"path": "a"}\n```',
    ],
)
def test_prose_is_not_rescued(content: str) -> None:
    decision = Guardrails(TOOLS).check(completion(content))
    assert decision.action == "answer" and decision.content == content and decision.interventions == ()


def test_sdk_objects_in_sdk_objects_out() -> None:
    response = ChatCompletion.model_validate(completion(None, [call("READ_FILE", {"path": "a"}, "call_x")]))
    decision = Guardrails(TOOLS).check(response)
    assert decision.action == "execute"
    final = finalize(response, decision, decision.interventions)
    assert isinstance(final, ChatCompletion)
    (out,) = final.choices[0].message.tool_calls or []
    assert out.id == "call_x" and out.function.name == "read_file"
    assert [i["kind"] for i in final.tether["interventions"]] == ["name_resolved"]


def test_stats_belong_to_the_caller_and_events_are_logged() -> None:
    shared = GuardrailStats()
    one, two = Guardrails(TOOLS, stats=shared), Guardrails(TOOLS, stats=shared)
    alone = Guardrails(TOOLS)
    with capture_logs() as logs:
        one.check(completion(None, [call("Read", {"path": "a"})]))
        two.check(completion(None, [call("ReadFile", {"path": "a"})]))
    assert shared.interventions == {"name_resolved": 2} and shared.actions == {"execute": 2}
    assert alone.stats.snapshot() == {"interventions": {}, "actions": {}}
    events = [e for e in logs if e["event"].startswith("guardrail_")]
    assert [e["event"] for e in events] == ["guardrail_name_resolved"] * 2
    assert events[0]["tool"] == "read_file"


class FakeRegenerator:
    """A stand-in for the proxy's grammar-constrained re-pick (a collaborator, not the code under test)."""

    def __init__(self, answer: str | None) -> None:
        self.answer = answer
        self.seen: list[tuple[tuple[Message, ...], tuple[str, ...], str]] = []

    async def regenerate(self, request: Any) -> Regenerated:
        self.seen.append((request.messages, tuple(t.name for t in request.tools), request.call.name))
        return Regenerated(self.answer)


async def test_repick_fixes_an_unresolved_name() -> None:
    picker: Regenerator = FakeRegenerator("read_file")
    history = [{"role": "user", "content": "open a"}]
    decision = await Guardrails(TOOLS).acheck(
        completion(None, [call("open_thing", {"path": "a", "limit": "3"})]),
        messages=history,
        regenerator=picker,
    )
    assert decision.action == "execute"
    assert kinds(decision) == ["repick", "args_coerced"]
    (checked,) = decision.tool_calls
    assert checked.name == "read_file" and "repicked" in checked.repairs
    assert checked.arguments == {"path": "a", "limit": 3}
    assert picker.seen == [((Message("user", "open a"),), ("read_file", "write_file"), "open_thing")]  # type: ignore[attr-defined]


@pytest.mark.parametrize("answer", [None, "rm_rf"])
async def test_repick_answer_is_untrusted(answer: str | None) -> None:
    decision = await Guardrails(TOOLS).acheck(
        completion(None, [call("open_thing", {})]), regenerator=FakeRegenerator(answer)
    )
    assert decision.action == "retry"
    assert kinds(decision) == ["repick", "name_unresolved", "retry"]
    assert decision.interventions[0].after is None


class BusyRegenerator:
    """A regenerator whose server has no slot free for the extra generation."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def regenerate(self, request: Any) -> Regenerated:
        raise self.error


@pytest.mark.parametrize(
    "error", [QueueFullError("busy", retry_after=1), QueueTimeoutError("slow", retry_after=1)]
)
async def test_a_busy_server_means_the_repick_found_nothing_not_a_failed_reply(error: Exception) -> None:
    decision = await Guardrails(TOOLS).acheck(
        completion(None, [call("open_thing", {})]), regenerator=BusyRegenerator(error)
    )
    assert decision.action == "retry"
    assert kinds(decision) == ["repick", "name_unresolved", "retry"]
    # Anything else is a fault and is not swallowed.
    with pytest.raises(RuntimeError):
        await Guardrails(TOOLS).acheck(
            completion(None, [call("open_thing", {})]), regenerator=BusyRegenerator(RuntimeError("boom"))
        )


async def test_repick_not_called_when_names_resolve() -> None:
    picker = FakeRegenerator("write_file")
    decision = await Guardrails(TOOLS).acheck(
        completion(None, [call("Read", {"path": "a"})]), regenerator=picker
    )
    assert decision.action == "execute" and picker.seen == []


@pytest.mark.parametrize(
    ("tools", "options", "error"),
    [
        ([READ, READ], {}, InvalidRequestError),
        (TOOLS, {"max_retries": -1}, InvalidRequestError),
        (TOOLS, {"unknown_tool": "shrug"}, InvalidRequestError),
        (TOOLS, {"rescue_formats": ("no_such_format",)}, FormatError),
        ([{"type": "custom", "custom": {"name": "grammar_tool"}}], {}, InvalidRequestError),
    ],
)
def test_bad_options_are_refused(tools: list[Any], options: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        Guardrails(tools, **options)


def test_toolspecs_and_openai_dicts_are_both_accepted() -> None:
    guard = Guardrails([ToolSpec.from_openai(READ), WRITE, tool("ls")])
    assert [t.name for t in guard.tools] == ["read_file", "write_file", "ls"]
    assert guard.check(completion(None, [call("LS", {})])).tool_calls[0].name == "ls"


def test_every_emitted_kind_is_declared() -> None:
    stats = GuardrailStats()
    guard = Guardrails(TOOLS, stats=stats, max_retries=1, fill_defaults=True)
    text_guard = Guardrails(TOOLS, stats=stats, unknown_tool="text")
    guard.check(
        completion('<tool_call>{"name": "Read", "arguments": {"path": "a", "limit": "1"}}</tool_call>')
    )
    guard.check(completion(None, [call("frobnicate", {})]))
    guard.check(completion(None, [call("read_file", {"path": 1.5})]), attempt=1)
    text_guard.check(completion(None, [call("frobnicate", {})]))
    emitted = {
        "rescued",
        "name_resolved",
        "args_coerced",
        "name_unresolved",
        "retry",
        "args_invalid",
        "failed",
        "unknown_tool_text",
    }
    assert set(stats.interventions) == emitted and emitted <= KINDS
