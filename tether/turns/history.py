"""A client's history made safe to render: every call readable and offered, every result paired.

Agents send back whatever was said before, a small model's broken calls included, and some lose
track of call ids. Refused, such a history turns into an error the agent retries with the same
history, forever (llama.cpp #25510, OpenHands #13949); rendered as it is, a broken call is a pattern
the model copies. So every protocol's history passes through :func:`safe_history` once.

Repaired, where the intent is clear:

* arguments written as almost-JSON (single quotes, trailing commas, Python literals) are read
  leniently (:func:`tether.jsonscan.loads_lenient`; never a truncated text, whose end is unknown);
* a name that is not offered but resolves to exactly one tool that is (normalization, the alias
  table: :func:`tether.guardrails.names.resolve_name`) is called by that name;
* an id used twice is given a fresh one, each result keeping the call it answers (a result answers
  the earliest call still waiting with its id; one without an id, the earliest call still waiting);
* a call no result answers gets one that says so, written as a failure ("Error: …");
* a lone call that failed and then succeeded when made again, identically, is left out with its
  failure: the model answers from the result it has, not the error before it.

Otherwise summarised as text the model cannot copy as a call:

* a call whose arguments cannot be read, or whose name is no offered tool's, leaves the assistant's
  calls; the assistant's text says what was tried, and what came back for it;
* a tool result that answers no call becomes a user message that says so.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import structlog

from tether.calls import ToolCall, new_call_id
from tether.chat import Message, reads_as_failure
from tether.grammar.formats.base import ToolSpec
from tether.guardrails.names import declared_aliases, resolve_name
from tether.jsonscan import loads_lenient
from tether.turns.events import ChatJob

__all__ = ["HistoryRepair", "safe_history", "safe_job"]

log = structlog.get_logger(__name__)

_SHOWN = 500  # characters of a summarised call's result kept in the text
NO_RESULT = "Error: no result came back for this call."


@dataclass(frozen=True)
class HistoryRepair:
    """One change :func:`safe_history` made: where (the message's index), what and why."""

    index: int
    # arguments_read, name_resolved, id_renamed, result_paired, result_missing, call_summarised,
    # result_unpaired
    kind: str
    detail: str


@dataclass
class _Call:
    call: ToolCall | None  # None: summarised as text
    name: str
    why: str = ""
    result: str | None = None


def _readable(
    call: ToolCall, offered: Sequence[str], aliases: Mapping[str, str]
) -> tuple[ToolCall | None, str, list[str]]:
    """(the call as it can be rendered, or None; why not; what was repaired)."""
    done: list[str] = []
    args = dict(call.arguments)
    if "arguments_not_object" in call.repairs:
        return None, "its arguments were not a JSON object", done
    if "arguments_invalid" in call.repairs:
        try:
            value, _ = loads_lenient(str(args.get("_raw", "")))
        except ValueError:
            return None, "its arguments were not valid JSON", done
        if not isinstance(value, dict):
            return None, "its arguments were not a JSON object", done
        args = value
        done.append("arguments_read")
    name = call.name
    if offered and name not in offered:
        resolved = resolve_name(name, offered, aliases).name
        if resolved is None:
            return None, "no tool of that name is offered", done
        name = resolved
        done.append("name_resolved")
    if not done:
        return call, "", done
    return replace(call, name=name, arguments=args, raw=""), "", done


def _summary(entry: _Call) -> str:
    said = f"(I tried to use {json.dumps(entry.name)}, but {entry.why}"
    if entry.result is None:
        return said + ".)"
    shown = entry.result if len(entry.result) <= _SHOWN else entry.result[:_SHOWN] + "…"
    return f"{said}. What came back: {shown})"


def safe_history(
    messages: Sequence[Message], tools: Sequence[ToolSpec]
) -> tuple[tuple[Message, ...], tuple[HistoryRepair, ...]]:
    """``messages`` with every call readable and offered and every result paired (see the module doc)."""
    offered = [t.name for t in tools]
    aliases = declared_aliases(tools)
    repairs: list[HistoryRepair] = []
    made: dict[int, list[_Call]] = {}  # assistant message index -> its calls
    waiting: list[tuple[str, _Call]] = []  # calls no result answers yet, by the id the client wrote
    answered: dict[int, _Call | None] = {}  # tool message index -> the call it answers
    used: set[str] = set()
    for i, msg in enumerate(messages):
        if msg.role == "assistant" and msg.tool_calls:
            made[i] = []
            for call in msg.tool_calls:
                fixed, why, done = _readable(call, offered, aliases)
                repairs += [HistoryRepair(i, kind, call.name) for kind in done]
                if fixed is not None and fixed.id in used:
                    repairs.append(HistoryRepair(i, "id_renamed", fixed.id))
                    fixed = replace(fixed, id=new_call_id())
                if fixed is not None:
                    used.add(fixed.id)
                else:
                    repairs.append(HistoryRepair(i, "call_summarised", f"{call.name}: {why}"))
                made[i].append(_Call(fixed, call.name, why))
                waiting.append((call.id, made[i][-1]))
        elif msg.role == "tool":
            # A result answers the earliest waiting call with its id; one without an id, the earliest.
            at = next((n for n, (cid, _) in enumerate(waiting) if cid == msg.tool_call_id), None)
            if at is None and not msg.tool_call_id and waiting:
                at = 0
                repairs.append(HistoryRepair(i, "result_paired", waiting[0][1].name))
            paired = waiting.pop(at)[1] if at is not None else None
            answered[i] = paired
            if paired is not None and paired.call is None:
                paired.result = msg.content
    unanswered = {id(e) for _, e in waiting}
    out: list[Message] = []
    pending: list[ToolCall] = []  # results to add once the run of tool messages ends

    def flush(before: int) -> None:
        for call in pending:
            repairs.append(HistoryRepair(before, "result_missing", call.name))
            out.append(Message("tool", NO_RESULT, tool_call_id=call.id, name=call.name))
        pending.clear()

    for i, msg in enumerate(messages):
        if msg.role != "tool":
            flush(i)
        if i in made:
            entries = made[i]
            calls = tuple(e.call for e in entries if e.call is not None)
            notes = [_summary(e) for e in entries if e.call is None]
            content = "\n".join(part for part in (msg.content, *notes) if part)
            out.append(replace(msg, content=content, tool_calls=calls))
            pending += [e.call for e in entries if e.call is not None and id(e) in unanswered]
        elif msg.role == "tool":
            entry = answered[i]
            if entry is None:
                repairs.append(HistoryRepair(i, "result_unpaired", msg.tool_call_id or "no tool_call_id"))
                out.append(Message("user", f"(A tool result that answers no call made here:)\n{msg.content}"))
            elif entry.call is not None:
                out.append(replace(msg, tool_call_id=entry.call.id))
        else:
            out.append(msg)
    flush(len(messages))
    dropped = _retried_failures(out)
    repairs += [HistoryRepair(i, "failure_retried", out[i].tool_calls[0].name) for i in sorted(dropped)[::2]]
    return tuple(m for i, m in enumerate(out) if i not in dropped), tuple(repairs)


def _retried_failures(out: Sequence[Message]) -> set[int]:
    """The indices to leave out: a lone call that failed and was then made again, identically, with
    a result that did not fail, goes together with its failure (the model otherwise answers from
    the error it no longer has: "the service timed out" after the retry's reading)."""
    drop: set[int] = set()
    for i, msg in enumerate(out[:-1]):
        result = out[i + 1]
        if msg.role != "assistant" or len(msg.tool_calls) != 1 or msg.content.strip():
            continue
        call = msg.tool_calls[0]
        if result.role != "tool" or result.tool_call_id != call.id or not reads_as_failure(result.content):
            continue
        for j in range(i + 2, len(out) - 1):
            later, answer = out[j], out[j + 1]
            if later.role == "user":
                break
            again = [c for c in later.tool_calls if (c.name, c.arguments) == (call.name, call.arguments)]
            if again and answer.role == "tool" and answer.tool_call_id == again[0].id:
                if not reads_as_failure(answer.content):
                    drop |= {i, i + 1}
                break
    return drop


def safe_job(job: ChatJob) -> ChatJob:
    """``job`` with its history made safe (:func:`safe_history`); each repair is logged."""
    messages, repairs = safe_history(job.messages, job.tools)
    if not repairs:
        return job
    for r in repairs:
        log.info("history_repaired", kind=r.kind, message=r.index, detail=r.detail)
    return replace(job, messages=messages)
