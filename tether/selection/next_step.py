"""The next step after a tool result: call again while the request still asks for a tool, answer once
every tool it asks for has answered.

After a tool result the model's own log-odds alone used to decide, and a small model rarely takes a
second step on its own ("log in as jdoe and tell me my balance" ends after ``login``). The evidence
here, all from the conversation:

* the tools the request asks for: per part of the request, in its order, the tool the part asks for
  (:func:`tether.selection.clauses.request_steps`); where no part asks for one, each offered tool
  whose fit to the whole request alone would call on a fresh ask (the fresh-ask prior of
  :class:`~tether.selection.decision.DecisionModel` over that one tool above 0);
* the tools that have answered: called since the user's last message, with a result that does not
  read as a failure (:func:`tether.chat.reads_as_failure`); each such call serves one part, first to
  last, so "read a.txt, then read b.txt" has a step left after one read;
* the last results: a failure that names an offered tool ("Error: not logged in. Call login first.")
  points to that tool.

A tool the request asks for that has not answered, or a failure that names a tool, is a step left:
the prior is ``+in_loop_step_prior`` and those tools are the name prior's favourites (a tool a
failure names most of all: the model otherwise asks again for what was refused), while a tool whose
every part has answered is not (the model otherwise sets again, with a value from the result, what
it just set). Every tool the
request asks for having answered, with no failure since, is a finished task: ``-in_loop_done_prior``.
When the request's words ask for no tool by themselves, the tools called for it are the ones it asked
for (the fresh ask's decision judged the request to want them): their having answered is a finished
task too. Otherwise (a failure that names nothing) the model's log-odds decide.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tether.chat import Message, elided_calls, is_request, reads_as_failure
from tether.grammar.formats.base import ToolSpec
from tether.selection.relevance import ToolRelevance

if TYPE_CHECKING:
    from tether.selection.decision import DecisionModel

__all__ = ["NextStep", "answered_values", "latest_round", "next_step"]


@dataclass(frozen=True)
class NextStep:
    """The prior after a tool result (model log-odds units) and the tools still to call."""

    prior: float
    pending: tuple[str, ...] = ()
    named: tuple[str, ...] = ()  # the pending tools a failure named: the prerequisite comes first
    served: tuple[str, ...] = ()  # tools whose every part has answered: not the next step while one is left
    todo: tuple[str, ...] = ()  # the request's steps left, in order, repeats kept


def _task(messages: Sequence[Message]) -> Sequence[Message]:
    """The messages since the user's last request: the current task's calls and results (and the
    notes tether wrote among them: an elision marker stands for calls a compaction removed)."""
    for k in range(len(messages) - 1, -1, -1):
        if is_request(messages[k]):
            return messages[k + 1 :]
    return messages


def _named(text: str, tools: Sequence[ToolSpec]) -> list[str]:
    """The offered tools a text names, by their exact name."""
    return [t.name for t in tools if re.search(rf"(?<![\w.]){re.escape(t.name)}(?![\w])", text)]


def next_step(
    messages: Sequence[Message],
    tools: Sequence[ToolSpec],
    ranked: Sequence[ToolRelevance],
    model: DecisionModel,
    steps: Sequence[str] = (),
) -> NextStep:
    """The evidence for another call after a tool result (see the module doc); ``steps``: the tools
    the request's parts ask for, in order (:func:`tether.selection.clauses.request_steps`)."""
    task = _task(messages)
    names = {c.id: c.name for m in task if m.role == "assistant" for c in m.tool_calls}
    answered = Counter(
        names[m.tool_call_id]
        for m in task
        if m.role == "tool" and m.tool_call_id in names and not reads_as_failure(m.content)
    )
    for m in task:  # calls a compaction elided served their parts too
        answered.update(elided_calls(m))
    last = [m.content for m in _trailing_results(task)]
    named = [n for text in last if reads_as_failure(text) for n in _named(text, tools)]
    left = Counter(answered)
    todo = []
    for tool in steps:  # each answered call serves one part, first to last
        if left[tool] > 0:
            left[tool] -= 1
        else:
            todo.append(tool)
    # The whole request's fit speaks only where its parts ask for no tool: a part that asks for one
    # has said which ("…about the order placement. Provide the details of my order" is a lookup, and
    # place_order, which fits the whole, is not a step).
    asked = [*steps] if steps else [r.tool for r in ranked if model.prior([r]) > 0]
    pending = tuple(
        dict.fromkeys([*named, *todo, *(t for t in asked if t not in steps and t not in answered)])
    )
    if pending:
        served = tuple(t for t in dict.fromkeys(steps) if t not in todo and t not in named)
        return NextStep(model.in_loop_step_prior, pending, tuple(dict.fromkeys(named)), served, tuple(todo))
    # Where the request's words alone name no tool, the calls made for it are what it asked for: the
    # fresh ask's decision took them for the request.
    if (asked or answered) and not any(reads_as_failure(text) for text in last):
        return NextStep(-model.in_loop_done_prior)
    return NextStep(0.0)


def answered_values(messages: Sequence[Message]) -> frozenset[tuple[str, str, str]]:
    """(tool, parameter, value) of each string argument of the current task's calls that answered."""
    task = _task(messages)
    calls = {c.id: c for m in task if m.role == "assistant" for c in m.tool_calls}
    return frozenset(
        (call.name, key, value)
        for m in task
        if m.role == "tool" and (call := calls.get(m.tool_call_id or "")) is not None
        if not reads_as_failure(m.content)
        for key, value in call.arguments.items()
        if isinstance(value, str)
    )


def latest_round(messages: Sequence[Message]) -> tuple[str, str]:
    """The string argument values of the last assistant turn's calls, and the text of the results
    that end the conversation after it (as the grounding source joins them); empty outside a loop."""
    results = _trailing_results(messages)[::-1]
    k = len(messages) - len(results) - 1
    if not results or k < 0 or messages[k].role != "assistant":
        return "", ""
    args = [v for c in messages[k].tool_calls for v in c.arguments.values() if isinstance(v, str)]
    return "\n".join(args), "\n".join(m.content for m in results if m.content)


def _trailing_results(task: Sequence[Message]) -> list[Message]:
    out: list[Message] = []
    for m in reversed(task):
        if m.role != "tool":
            break
        out.append(m)
    return out
