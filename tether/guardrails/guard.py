"""The ``Guardrails`` facade: check one chat completion against the offered tools and decide.

``Guardrails(tools).check(response)`` reads the first choice of an OpenAI chat
completion (dict or ``openai`` SDK object), rescues tool calls written as text in
``message.content`` (with the format registry's parsers), resolves each name
(layer 1; layer 2 through :meth:`Guardrails.acheck` with a ``Repicker``), validates
and safely coerces the arguments, and returns a :class:`Decision`: ``execute`` the
calls, ``retry`` with the messages to append, ``fail`` when retries ran out, or
``answer`` when the reply is (or must become) text. The choice itself is the pure
:func:`tether.guardrails.policy.decide`.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, get_args

from tether.chat import Message
from tether.errors import InvalidRequestError
from tether.grammar.formats import get_format
from tether.grammar.formats.base import ToolCallFormat, ToolSpec
from tether.guardrails.arguments import ArgumentChecker
from tether.guardrails.decision import CheckedCall, Decision
from tether.guardrails.interventions import GuardrailStats, Intervention
from tether.guardrails.names import resolve_name
from tether.guardrails.policy import (
    TurnFacts,
    UnknownToolMode,
    decide,
    invalid_arguments_text,
    not_executed_text,
    tool_required_text,
    unknown_tool_text,
)
from tether.guardrails.repick import Repicker, messages_from_openai
from tether.guardrails.response import RawCall, view_response

__all__ = ["Guardrails", "ToolChoiceLike", "ToolLike", "is_function_tool"]

ToolLike = ToolSpec | Mapping[str, Any]
ToolChoiceLike = str | Mapping[str, Any] | None


def _call_id() -> str:
    return "call_" + secrets.token_hex(12)


def is_function_tool(tool: ToolLike) -> bool:
    """A ``ToolSpec`` or an OpenAI function tool (``{"type": "function", "function": {"name": ...}}``)."""
    if isinstance(tool, ToolSpec):
        return True
    fn = tool.get("function", tool)
    return (
        tool.get("type", "function") == "function"
        and isinstance(fn, Mapping)
        and isinstance(fn.get("name"), str)
    )


def _spec(tool: ToolLike, index: int) -> ToolSpec:
    if not is_function_tool(tool):
        raise InvalidRequestError("only function tools can be checked", param=f"tools[{index}]")
    return tool if isinstance(tool, ToolSpec) else ToolSpec.from_openai(tool)


def _choice(tool_choice: ToolChoiceLike) -> tuple[str, str | None]:
    """(mode, named function) for an OpenAI ``tool_choice`` value."""
    if tool_choice is None or (isinstance(tool_choice, str) and tool_choice in ("auto", "none", "required")):
        return (tool_choice or "auto"), None
    if isinstance(tool_choice, Mapping):
        fn = tool_choice.get("function")
        name = fn.get("name") if isinstance(fn, Mapping) else tool_choice.get("name")
        if not isinstance(name, str):
            raise InvalidRequestError("tool_choice must name a function", param="tool_choice")
        return "named", name
    return "named", str(tool_choice)


class Guardrails:
    """Checks chat completions against one list of offered tools (reusable, thread-safe).

    Options: ``max_retries`` (retries per turn, not HTTP retries), ``coerce`` (safe
    argument coercions), ``unknown_tool`` (``"tool_error"``: tell the model in a
    tool-role turn and retry; ``"text"``: the turn becomes the error text),
    ``fill_defaults`` (fill missing properties from schema ``default`` s, recorded),
    ``rescue_formats`` (parsers tried on ``content`` when there are no ``tool_calls``)
    and ``stats`` (counters the caller owns; a fresh ``GuardrailStats`` by default).
    """

    def __init__(
        self,
        tools: Iterable[ToolLike],
        *,
        max_retries: int = 2,
        coerce: bool = True,
        unknown_tool: UnknownToolMode = "tool_error",
        fill_defaults: bool = False,
        rescue_formats: Sequence[str] = ("hermes", "generic"),
        stats: GuardrailStats | None = None,
    ) -> None:
        self.tools = tuple(_spec(t, i) for i, t in enumerate(tools))
        names = [t.name for t in self.tools]
        if len(set(names)) != len(names):
            raise InvalidRequestError(f"duplicate tool names in {names}", param="tools")
        if max_retries < 0:
            raise InvalidRequestError("max_retries must be >= 0", param="max_retries")
        if unknown_tool not in get_args(UnknownToolMode):
            raise InvalidRequestError(f"unknown_tool must be 'tool_error' or 'text', not {unknown_tool!r}")
        self.max_retries = max_retries
        self.unknown_tool: UnknownToolMode = unknown_tool
        self.stats = stats if stats is not None else GuardrailStats()
        self._checkers = {
            t.name: ArgumentChecker(t.parameters, coerce=coerce, fill_defaults=fill_defaults)
            for t in self.tools
        }
        self._formats: tuple[ToolCallFormat, ...] = tuple(get_format(n) for n in rescue_formats)

    def offered(self, tool_choice: ToolChoiceLike = "auto") -> tuple[ToolSpec, ...]:
        """The tools a request with ``tool_choice`` offers (``none``: no tools; a name: that one)."""
        mode, named = _choice(tool_choice)
        if mode == "none":
            return ()
        if named is None:
            return self.tools
        chosen = tuple(t for t in self.tools if t.name == named)
        if not chosen:
            raise InvalidRequestError(
                f"tool_choice names {named!r}, which is not offered", param="tool_choice"
            )
        return chosen

    # -- the pipeline ------------------------------------------------------------------

    def _rescue(
        self, content: str | None, offered: Sequence[ToolSpec]
    ) -> tuple[str | None, list[RawCall], list[Intervention]]:
        if not content or not offered:
            return content, [], []
        for fmt in self._formats:
            result = fmt.parse(content, offered)
            if not result.calls:
                continue
            calls = [RawCall(_call_id(), c.name, dict(c.arguments)) for c in result.calls]
            notes = [
                Intervention(
                    "call_rescued",
                    f"tool call written as text, parsed with the {fmt.name} format"
                    + (f" (repairs: {', '.join(c.repairs)})" if c.repairs else ""),
                    tool=c.name,
                    before=c.raw or content,
                    after=raw.to_openai(),
                )
                for c, raw in zip(result.calls, calls, strict=True)
            ]
            return result.content or None, calls, notes
        return content, [], []

    def _with_args(self, call: CheckedCall, name: str) -> tuple[CheckedCall, list[Intervention]]:
        check = self._checkers[name].check(call.raw_arguments)
        notes: list[Intervention] = []
        if check.coercions:
            notes.append(
                Intervention(
                    "args_coerced", "; ".join(check.coercions), name, call.raw_arguments, check.arguments
                )
            )
        if check.defaults:
            notes.append(
                Intervention(
                    "args_defaulted", "; ".join(check.defaults), name, call.raw_arguments, check.arguments
                )
            )
        if check.errors:
            detail = "; ".join(f"{e.path or '(arguments)'}: {e.message}" for e in check.errors)
            notes.append(Intervention("args_invalid", detail, name, call.raw_arguments, None))
        return replace(call, name=name, check=check), notes

    def _resolve(
        self, raw: RawCall, names: Sequence[str], rescued: bool
    ) -> tuple[CheckedCall, list[Intervention]]:
        res = resolve_name(raw.name, names)
        call = CheckedCall(raw.id, raw.name, raw.name, raw.arguments, res, rescued=rescued)
        if res.name is None:
            detail = f"no offered tool matches {raw.name!r}"
            if res.candidates:
                detail += f"; ambiguous between {', '.join(res.candidates)}"
            return call, [
                Intervention("name_unresolved", detail, None, raw.name, list(res.candidates) or None)
            ]
        notes = (
            []
            if res.method == "exact"
            else [
                Intervention(
                    "name_resolved",
                    f"{res.method} match: {raw.name!r} -> {res.name!r}",
                    res.name,
                    raw.name,
                    res.name,
                )
            ]
        )
        call, more = self._with_args(call, res.name)
        return call, notes + more

    def _inspect(
        self, response: Any, tool_choice: ToolChoiceLike
    ) -> tuple[str | None, list[CheckedCall], list[Intervention], bool]:
        view = view_response(response)
        offered = self.offered(tool_choice)
        names = [t.name for t in offered]
        content, raws = view.content, list(view.calls)
        notes: list[Intervention] = []
        rescued = False
        if not raws:
            content, raws, notes = self._rescue(view.content, offered)
            rescued = bool(raws)
        calls: list[CheckedCall] = []
        for raw in raws:
            call, more = self._resolve(raw, names, rescued)
            calls.append(call)
            notes.extend(more)
        return content, calls, notes, view.has_choice

    def check(
        self,
        response: Any,
        *,
        tool_choice: ToolChoiceLike = "auto",
        require_tool: bool = False,
        attempt: int = 0,
    ) -> Decision:
        """Decide what to do with ``response``. ``require_tool``: an active workflow step needs a
        tool call; ``attempt``: retries already spent on this turn."""
        content, calls, notes, _ = self._inspect(response, tool_choice)
        return self._finish(content, calls, notes, tool_choice, require_tool, attempt)

    async def acheck(
        self,
        response: Any,
        *,
        messages: Sequence[Message | Mapping[str, Any]] = (),
        repicker: Repicker | None = None,
        tool_choice: ToolChoiceLike = "auto",
        require_tool: bool = False,
        attempt: int = 0,
    ) -> Decision:
        """:meth:`check` with layer 2: unresolved names go to ``repicker`` first. Its answer is
        used only when it is an offered name."""
        content, calls, notes, _ = self._inspect(response, tool_choice)
        if repicker is not None and any(not c.resolved for c in calls):
            offered = self.offered(tool_choice)
            names = {t.name for t in offered}
            history = messages_from_openai(messages)
            for i, call in enumerate(calls):
                if call.resolved:
                    continue
                picked = await repicker.repick(history, offered, call.raw_name)
                if picked is not None and picked in names:
                    fixed, more = self._with_args(replace(call, repicked=True), picked)
                    calls[i] = fixed
                    notes.append(Intervention("repick", "constrained re-pick", picked, call.raw_name, picked))
                    notes.extend(more)
                else:
                    why = (
                        "re-pick gave no name"
                        if picked is None
                        else f"re-pick returned {picked!r}, not offered; ignored"
                    )
                    notes.append(Intervention("repick", why, None, call.raw_name, None))
        return self._finish(content, calls, notes, tool_choice, require_tool, attempt)

    # -- deciding ----------------------------------------------------------------------

    def _finish(
        self,
        content: str | None,
        calls: list[CheckedCall],
        notes: list[Intervention],
        tool_choice: ToolChoiceLike,
        require_tool: bool,
        attempt: int,
    ) -> Decision:
        mode, named = _choice(tool_choice)
        facts = TurnFacts(
            calls=len(calls),
            unresolved=sum(not c.resolved for c in calls),
            invalid=sum(c.resolved and not c.ok for c in calls),
            tool_required=require_tool or mode in ("required", "named"),
            attempt=attempt,
            max_retries=self.max_retries,
            unknown_tool=self.unknown_tool,
        )
        verdict = decide(facts)
        names = [t.name for t in self.offered(tool_choice)]
        retry: tuple[dict[str, Any], ...] = ()
        if verdict.action == "retry":
            retry = self._retry_messages(content, calls, names, named, verdict.tier)
            notes.append(
                Intervention(
                    "retry",
                    f"{verdict.reason}; retry {attempt + 1} of {self.max_retries}, tier {verdict.tier}",
                )
            )
        elif verdict.action == "fail":
            notes.append(Intervention("failed", f"{verdict.reason}; {self.max_retries} retries spent"))
        elif verdict.action == "answer" and verdict.reason == "unknown_tool":
            content = "\n".join(
                unknown_tool_text(c.raw_name, names, candidates=c.resolution.candidates)
                for c in calls
                if not c.resolved
            )
            notes.append(Intervention("unknown_tool_text", content, None, [c.raw_name for c in calls], None))
            calls = []
        for note in notes:
            self.stats.record(note)
        self.stats.record_action(verdict.action)
        return Decision(verdict.action, verdict.reason, content, tuple(calls), retry, tuple(notes), attempt)

    def _retry_messages(
        self,
        content: str | None,
        calls: Sequence[CheckedCall],
        names: Sequence[str],
        named: str | None,
        tier: int,
    ) -> tuple[dict[str, Any], ...]:
        if not calls:
            nudge = tool_required_text(names, named=named, tier=tier)
            return ({"role": "assistant", "content": content or ""}, {"role": "user", "content": nudge})
        assistant: dict[str, Any] = {
            "role": "assistant",
            "content": content or None,
            "tool_calls": [RawCall(c.id, c.raw_name, c.raw_arguments).to_openai() for c in calls],
        }
        turns: list[dict[str, Any]] = [assistant]
        for call in calls:
            if not call.resolved:
                text = unknown_tool_text(
                    call.raw_name, names, candidates=call.resolution.candidates, tier=tier
                )
            elif not call.ok and call.check is not None:
                schema = self._checkers[call.name].schema
                text = invalid_arguments_text(call.name, call.check.errors, schema=schema, tier=tier)
            else:
                text = not_executed_text()
            turns.append({"role": "tool", "tool_call_id": call.id, "content": text})
        return tuple(turns)
