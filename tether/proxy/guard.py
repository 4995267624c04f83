"""The serving path's guardrails after sampling: rescue policy, name resolution, re-pick, argument checks.

Runs once per reply, after the main generation has released its slot, so the
extra constrained generations (layer-2 re-pick, argument repair) can use the
same engine. The rule: a wrong guess is worse than no guess — a name that does
not resolve to an offered tool is never dispatched; the client is told instead.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from tether.aio import aclose_quietly
from tether.chat import Message
from tether.engine.base import SamplingParams, Token
from tether.engine.prompt import build_prompt
from tether.engine.scheduler import Scheduler
from tether.engine.template import ChatTemplate
from tether.grammar.formats.base import ParsedCall, ToolSpec
from tether.grammar.provider import ConstraintProvider
from tether.guardrails import GuardrailStats, Intervention, check_arguments, resolve_name, unknown_tool_text
from tether.guardrails.policy import invalid_arguments_text
from tether.guardrails.presets import PRESETS, GuardConfig, PresetName

__all__ = ["PRESETS", "CallGuard", "GuardConfig", "GuardOutcome", "PresetName"]

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class FixedCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class GuardOutcome:
    calls: tuple[FixedCall, ...]
    text: str
    interventions: tuple[Intervention, ...]


class CallGuard:
    """Post-sampling checks for one model; shares the scheduler and the constraint provider."""

    def __init__(
        self,
        scheduler: Scheduler,
        template: ChatTemplate,
        provider: ConstraintProvider | None,
        stats: GuardrailStats | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.engine = scheduler.engines[0]
        self.template = template
        self.provider = provider
        self.stats = stats or GuardrailStats()

    async def fix(
        self,
        config: GuardConfig,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        calls: Sequence[ParsedCall],
        *,
        priority: int = 0,
        placeholders: Sequence[str | float] = (),
        required: bool = False,
    ) -> GuardOutcome:
        """Checked calls. ``placeholders``: the format's example values (see ``ToolCallFormat``);
        ``required``: the client demands a call, so a doubtful one is flagged, not dropped."""
        by_name = {t.name: t for t in tools}
        names = [t.name for t in tools]
        out: list[FixedCall] = []
        notes: list[Intervention] = []
        text: list[str] = []
        for call in calls:
            if call.repairs and not config.rescue:
                notes.append(
                    Intervention("rescue_disabled", f"call needed {', '.join(call.repairs)}", call.name)
                )
                text.append(call.raw)
                continue
            if call.repairs:
                notes.append(Intervention("rescued", ", ".join(call.repairs), call.name, call.raw or None))
            name: str | None = call.name if call.name in by_name else None
            if name is None and config.resolve:
                res = resolve_name(call.name, names)
                if res.name is not None:
                    name = res.name
                    notes.append(Intervention("name_resolved", f"{res.method} match", name, call.name, name))
            if name is None and config.repick and self.provider is not None:
                name = await self._repick(messages, tools, call, priority)
                notes.append(
                    Intervention(
                        "repick",
                        "constrained re-pick" if name else "re-pick found nothing",
                        name,
                        call.name,
                        name,
                    )
                )
            if name is None and not (config.resolve or config.repick):
                out.append(
                    FixedCall(call.name, dict(call.arguments))
                )  # no name guardrails: pass through as written
                continue
            if name is None:
                notes.append(
                    Intervention("name_unresolved", f"no offered tool matches {call.name!r}", None, call.name)
                )
                text.append(unknown_tool_text(call.name, names))
                continue
            args = dict(call.arguments)
            if config.validate:
                copied = _copied_placeholders(args, placeholders, messages)
                if copied:
                    # The model had no value and copied the prompt's example: a wrong guess is worse
                    # than no guess (repairing it would only invent another value).
                    detail = f"{', '.join(copied)}: the prompt's example value, not one from the conversation"
                    kind = "args_invalid" if required else "placeholder_dropped"
                    notes.append(Intervention(kind, detail, name, args, None))
                    if not required:
                        continue
                args, more = await self._arguments(messages, by_name[name], call, args, config, priority)
                notes.extend(more)
            out.append(FixedCall(name, args))
        if config.dedupe:
            out = _dedupe(out, notes)
        for note in notes:
            self.stats.record(note)
        return GuardOutcome(tuple(out), "\n".join(t for t in text if t), tuple(notes))

    async def _arguments(
        self,
        messages: Sequence[Message],
        tool: ToolSpec,
        call: ParsedCall,
        args: dict[str, Any],
        config: GuardConfig,
        priority: int,
    ) -> tuple[dict[str, Any], list[Intervention]]:
        notes: list[Intervention] = []
        checked = check_arguments(args, tool.parameters, coerce=True)
        if checked.coercions:
            notes.append(
                Intervention("args_coerced", "; ".join(checked.coercions), tool.name, args, checked.arguments)
            )
        if checked.ok:
            return checked.arguments, notes
        if config.repair and self.provider is not None:
            repaired = await self._repair(messages, tool, call, checked.errors, priority)
            if repaired is not None and check_arguments(repaired, tool.parameters, coerce=False).ok:
                notes.append(
                    Intervention(
                        "args_repaired",
                        "regenerated under the schema grammar",
                        tool.name,
                        checked.arguments,
                        repaired,
                    )
                )
                return repaired, notes
        nudge = invalid_arguments_text(tool.name, checked.errors, schema=dict(tool.parameters))
        notes.append(Intervention("args_invalid", nudge, tool.name, checked.arguments, None))
        return checked.arguments, notes

    async def _generate(self, prompt: str, processor_for: Any, max_tokens: int, priority: int) -> str:
        ids = self.engine.tokenize(prompt, special=True)
        if len(ids) + max_tokens >= self.engine.info.n_ctx:
            return ""
        processor = processor_for(len(ids))
        parts: list[str] = []
        params = SamplingParams(max_tokens=max_tokens, temperature=0.0)
        gen = self.scheduler.generate(ids, params, logits_processor=processor, priority=priority)
        try:
            async for ev in gen:
                if isinstance(ev, Token):
                    parts.append(ev.text)
        finally:
            await aclose_quietly(gen)
        return "".join(parts)

    def _prompt(self, messages: Sequence[Message], call: ParsedCall, instruction: str) -> str:
        shown = call.raw or json.dumps({"name": call.name, "arguments": dict(call.arguments)})
        history = (*messages, Message("assistant", shown), Message("user", instruction))
        from tether.grammar.formats import get_format

        return build_prompt(self.template, get_format("generic"), history, ())

    async def _repick(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], call: ParsedCall, priority: int
    ) -> str | None:
        assert self.provider is not None
        provider = self.provider
        listing = "\n".join(f"- {t.name}: {t.description}" for t in tools)
        instruction = (
            f"There is no tool named '{call.name}'. The available tools are:\n{listing}\n"
            "Answer with the name of the one tool that should be called."
        )
        names = [t.name for t in tools]
        prompt = self._prompt(messages, call, instruction)
        picked = await self._generate(
            prompt, lambda n: provider.name_choice(names, prompt_len=n), 32, priority
        )
        return picked if picked in names else None

    async def _repair(
        self, messages: Sequence[Message], tool: ToolSpec, call: ParsedCall, errors: Any, priority: int
    ) -> dict[str, Any] | None:
        assert self.provider is not None
        provider = self.provider
        instruction = (
            invalid_arguments_text(tool.name, errors, schema=dict(tool.parameters))
            + f"\nWrite only the corrected arguments for {tool.name} as one JSON object."
        )
        prompt = self._prompt(messages, call, instruction)
        text = await self._generate(prompt, lambda n: provider.arguments(tool, prompt_len=n), 256, priority)
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            return None
        return value if isinstance(value, dict) else None


def _dedupe(calls: list[FixedCall], notes: list[Intervention]) -> list[FixedCall]:
    """Small models loop on a call (the same read ten times until max_tokens); the copies do nothing
    but repeat a side effect, and clients such as opencode reject the batch as a doom loop."""
    seen: dict[str, int] = {}
    kept: list[FixedCall] = []
    for i, call in enumerate(calls):
        key = call.name + "\0" + json.dumps(call.arguments, sort_keys=True, ensure_ascii=False)
        if key in seen:
            notes.append(Intervention("duplicate_dropped", f"call {i} repeats call {seen[key]}", call.name))
            continue
        seen[key] = i
        kept.append(call)
    return kept


def _copied_placeholders(
    args: dict[str, Any], placeholders: Sequence[str | float], messages: Sequence[Message]
) -> list[str]:
    """Paths of arguments equal to a placeholder (strings case-insensitively) that no message mentions."""
    said = "\n".join(m.content for m in messages).casefold()
    unsaid = [p for p in placeholders if str(p).casefold() not in said]
    texts = {p.casefold() for p in unsaid if isinstance(p, str)}
    numbers = [p for p in unsaid if not isinstance(p, str)]
    found: list[str] = []

    def walk(value: Any, path: str) -> None:
        if isinstance(value, str):
            hit = value.strip().casefold() in texts
        elif isinstance(value, int | float) and not isinstance(value, bool):
            hit = value in numbers
        else:
            hit = False
            items = (
                value.items()
                if isinstance(value, dict)
                else enumerate(value)
                if isinstance(value, list)
                else ()
            )
            for key, item in items:
                walk(
                    item, f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else str(key)
                )
        if hit:
            found.append(path)

    if unsaid:
        walk(args, "")
    return found
