"""The next step after a tool result: call again while the request still asks for a tool, answer once
every tool it asks for has answered.

After a tool result the model's own log-odds alone used to decide, and a small model rarely takes a
second step on its own ("log in as jdoe and tell me my balance" ends after ``login``). The evidence
here, all from the conversation:

* the tools the request asks for: each offered tool whose fit alone would call on a fresh ask (the
  fresh-ask prior of :class:`~tether.selection.decision.DecisionModel` over that one tool above 0);
* the tools that have answered: called since the user's last message, with a result that does not
  read as a failure (:func:`tether.chat.reads_as_failure`);
* the last results: a failure that names an offered tool ("Error: not logged in. Call login first.")
  points to that tool.

A tool the request asks for that has not answered, or a failure that names a tool, is a step left:
the prior is ``+in_loop_step_prior`` and those tools are the name prior's favourites (a tool a
failure names most of all: the model otherwise asks again for what was refused). Every tool the
request asks for having answered, with no failure since, is a finished task: ``-in_loop_done_prior``.
Otherwise (a failure that names nothing) the model's log-odds decide, as before.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tether.chat import Message, reads_as_failure
from tether.grammar.formats.base import ToolSpec
from tether.selection.relevance import ToolRelevance

if TYPE_CHECKING:
    from tether.selection.decision import DecisionModel

__all__ = ["NextStep", "next_step"]


@dataclass(frozen=True)
class NextStep:
    """The prior after a tool result (model log-odds units) and the tools still to call."""

    prior: float
    pending: tuple[str, ...] = ()
    named: tuple[str, ...] = ()  # the pending tools a failure named: the prerequisite comes first


def _task(messages: Sequence[Message]) -> Sequence[Message]:
    """The messages since the user's last one: the current task's calls and results."""
    for k in range(len(messages) - 1, -1, -1):
        if messages[k].role == "user":
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
) -> NextStep:
    """The evidence for another call after a tool result (see the module doc)."""
    task = _task(messages)
    names = {c.id: c.name for m in task if m.role == "assistant" for c in m.tool_calls}
    answered = {
        names[m.tool_call_id]
        for m in task
        if m.role == "tool" and m.tool_call_id in names and not reads_as_failure(m.content)
    }
    last = [m.content for m in _trailing_results(task)]
    named = [n for text in last if reads_as_failure(text) for n in _named(text, tools)]
    asked = [r.tool for r in ranked if model.prior([r]) > 0]
    pending = tuple(dict.fromkeys([*named, *(t for t in asked if t not in answered)]))
    if pending:
        return NextStep(model.in_loop_step_prior, pending, tuple(dict.fromkeys(named)))
    if asked and not any(reads_as_failure(text) for text in last):
        return NextStep(-model.in_loop_done_prior)
    return NextStep(0.0)


def _trailing_results(task: Sequence[Message]) -> list[Message]:
    out: list[Message] = []
    for m in reversed(task):
        if m.role != "tool":
            break
        out.append(m)
    return out
