"""Server-side tools: the proxy executes configured tools itself and keeps generating.

Tools named in the server config (for example the sandboxed built-ins bound to
a work dir) are offered to the model beside the client's own tools. When the
model calls one, the proxy runs it through the sandbox ``ToolBox``, appends the
call and its result to the conversation and generates again, so a plain chat
client still gets a final answer. Calls to the client's tools end the loop and
go to the client as usual.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace

import structlog

from tether.aio import closing_stream
from tether.chat import Message, ToolCallRecord
from tether.grammar.formats.base import ToolSpec
from tether.proxy.core import CallOut, ChatCore, ChatJob, CoreEvent, FinishOut, Prepared, TextOut, Usage
from tether.sandbox import ToolBox

__all__ = ["ServerTools"]

log = structlog.get_logger(__name__)


class ServerTools:
    """Tools the proxy runs itself, through the sandbox."""

    def __init__(self, toolbox: ToolBox, *, max_rounds: int = 8) -> None:
        self.toolbox = toolbox
        self.specs = tuple(ToolSpec.from_openai(s) for s in toolbox.specs())
        self.names = frozenset(s.name for s in self.specs)
        self.max_rounds = max_rounds

    def offer(self, job: ChatJob) -> ChatJob:
        """The job with server tools added (a client tool of the same name wins: it is the client's call)."""
        if job.tool_choice == "none":
            return job
        client = {t.name for t in job.tools}
        extra = tuple(s for s in self.specs if s.name not in client)
        return replace(job, tools=(*job.tools, *extra))

    async def run(
        self, core: ChatCore, first: Prepared, client_tools: Sequence[str]
    ) -> AsyncIterator[CoreEvent]:
        """Generate, run server-side calls, repeat; stream text as it comes.

        ``first`` was prepared from ``offer(job)``; ``client_tools`` are the names the client offered.
        """
        mine_names = self.names - set(client_tools)
        prepared = first
        prompt = completion = evaluated = 0
        notes: list[dict[str, object]] = []
        for round_no in range(self.max_rounds):
            job = prepared.job
            calls: list[CallOut] = []
            finish: FinishOut | None = None
            async with closing_stream(core.run(prepared)) as events:
                async for ev in events:
                    if isinstance(ev, TextOut):
                        yield ev
                    elif isinstance(ev, CallOut):
                        calls.append(ev)
                    else:
                        finish = ev
            assert finish is not None
            prompt += finish.usage.prompt_tokens
            completion += finish.usage.completion_tokens
            evaluated += finish.usage.prompt_tokens_evaluated
            notes.extend(finish.interventions)
            mine = [c for c in calls if c.name in mine_names]
            theirs = [c for c in calls if c.name not in mine_names]
            if not mine or theirs:
                if mine:
                    await self._execute(mine, notes)  # run them; the client's calls end the turn
                for i, call in enumerate(theirs):
                    yield replace(call, index=i)
                reason = "tool_calls" if theirs else finish.finish_reason
                yield FinishOut(
                    reason, Usage(prompt, completion, evaluated), tuple(notes), finish.matched_stop
                )
                return
            results = await self._execute(mine, notes)
            records = tuple(ToolCallRecord(c.id, c.name, c.arguments) for c in mine)
            history = (
                *job.messages,
                Message("assistant", "", tool_calls=records),
                *(
                    Message("tool", text, tool_call_id=c.id, name=c.name)
                    for c, text in zip(mine, results, strict=True)
                ),
            )
            log.info("server_tools_round", round=round_no, calls=[c.name for c in mine])
            prepared = core.prepare(replace(job, messages=history))
        notes.append(
            {
                "kind": "server_tools_limit",
                "detail": f"stopped after {self.max_rounds} rounds",
                "tool": None,
                "before": None,
                "after": None,
            }
        )
        yield FinishOut("length", Usage(prompt, completion, evaluated), tuple(notes))

    async def _execute(self, calls: Sequence[CallOut], notes: list[dict[str, object]]) -> list[str]:
        out: list[str] = []
        for call in calls:
            result = await self.toolbox.call(call.name, call.arguments)
            out.append(result.content)
            notes.append(
                {
                    "kind": "server_tool",
                    "detail": "error" if result.is_error else "ok",
                    "tool": call.name,
                    "before": json.loads(call.arguments or "{}"),
                    "after": result.content[:200],
                }
            )
        return out
