"""The server's ``Regenerator``: the guard's extra constrained generations, on the same scheduler.

A re-pick asks for the tool name only, under a grammar that admits nothing but the
offered names; an argument repair asks for the arguments object only, under the tool's
schema. Both are greedy, both see the conversation plus the bad call and an instruction,
and both report their token usage so the reply's ``usage`` counts them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from tether.aio import closing_stream
from tether.chat import Message, Usage
from tether.engine.base import Done, SamplingParams, Token
from tether.engine.prompt import prompt_ids
from tether.engine.scheduler import Scheduler
from tether.engine.template import ChatTemplate
from tether.grammar.formats.base import ToolCallFormat
from tether.grammar.spec import JsonSpec, NameChoiceSpec, OutputSpec
from tether.guardrails.pipeline import FixArguments, PickName, Regenerated, Request
from tether.guardrails.policy import invalid_arguments_text

__all__ = ["SchedulerRegenerator"]


class SchedulerRegenerator:
    """Answers guard requests with one constrained generation each on ``scheduler``'s engine."""

    def __init__(
        self,
        scheduler: Scheduler,
        template: ChatTemplate,
        fmt: ToolCallFormat,
        *,
        priority: int = 0,
    ) -> None:
        self.scheduler = scheduler
        self.engine = scheduler.engines[0]
        self.template = template
        self.fmt = fmt
        self.priority = priority

    async def regenerate(self, request: Request) -> Regenerated:
        if isinstance(request, PickName):
            return await self._pick(request)
        return await self._fix(request)

    def _prompt(self, messages: Sequence[Message], shown: str, instruction: str) -> list[int]:
        history = (*messages, Message("assistant", shown), Message("user", instruction))
        return prompt_ids(self.engine, self.template, self.fmt, history, ())

    async def _generate(self, ids: list[int], spec: OutputSpec, max_tokens: int) -> tuple[str, Usage]:
        """Greedy under ``spec``, as the engine compiles it."""
        if len(ids) + max_tokens >= self.engine.info.n_ctx:
            return "", Usage()
        parts: list[str] = []
        usage = Usage(len(ids), 0, len(ids), generations=1)
        params = SamplingParams(max_tokens=max_tokens, temperature=0.0)
        constraint = self.engine.compile(spec, prompt_len=len(ids))
        events = self.scheduler.generate(ids, params, constraint=constraint, priority=self.priority)
        async with closing_stream(events) as stream:
            async for ev in stream:
                if isinstance(ev, Token):
                    parts.append(ev.text)
                elif isinstance(ev, Done):
                    usage = Usage(
                        ev.prompt_tokens, ev.completion_tokens, ev.prompt_tokens_evaluated, generations=1
                    )
        return "".join(parts), usage

    async def _pick(self, request: PickName) -> Regenerated:
        listing = "\n".join(f"- {t.name}: {t.description}" for t in request.tools)
        instruction = (
            f"There is no tool named '{request.call.name}'. The available tools are:\n{listing}\n"
            "Answer with the name of the one tool that should be called."
        )
        names = [t.name for t in request.tools]
        shown = request.call.raw or json.dumps(
            {"name": request.call.name, "arguments": dict(request.call.arguments)}
        )
        prompt = self._prompt(request.messages, shown, instruction)
        picked, usage = await self._generate(prompt, NameChoiceSpec(tuple(names)), 32)
        return Regenerated(picked if picked in names else None, usage)

    async def _fix(self, request: FixArguments) -> Regenerated:
        tool = request.tool
        instruction = (
            invalid_arguments_text(tool.name, request.errors, schema=dict(tool.parameters))
            + f"\nWrite only the corrected arguments for {tool.name} as one JSON object."
        )
        shown = request.call.raw or json.dumps(
            {"name": request.call.name, "arguments": dict(request.call.arguments)}
        )
        prompt = self._prompt(request.messages, shown, instruction)
        text, usage = await self._generate(prompt, JsonSpec.of_tool(tool), 256)
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            return Regenerated(None, usage)
        return Regenerated(value if isinstance(value, dict) else None, usage)
