"""The ``Guardrails`` facade: check one chat completion against the offered tools and decide.

``Guardrails(tools).check(response)`` reads the first choice of an OpenAI chat
completion (dict or ``openai`` SDK object), rescues tool calls written as text in
``message.content`` (with the format registry's parsers), runs the one guard pipeline
(:mod:`tether.guardrails.pipeline`: names, arguments; re-pick and repair through
:meth:`Guardrails.acheck` with a ``Regenerator``) and returns a :class:`Decision`:
``execute`` the calls, ``retry`` with the messages to append, ``fail`` when retries ran
out, or ``answer`` when the reply is (or must become) text. The choice itself is the pure
:func:`tether.guardrails.policy.decide`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypedDict, get_args

from tether.calls import ToolCall
from tether.chat import Message
from tether.errors import InvalidRequestError
from tether.grammar.formats import get_format
from tether.grammar.formats.base import ToolCallFormat, ToolSpec
from tether.guardrails.arguments import ArgumentChecker
from tether.guardrails.decision import Decision
from tether.guardrails.interventions import GuardrailStats, Intervention
from tether.guardrails.pipeline import (
    GuardResult,
    Regenerated,
    Regenerator,
    Request,
    Steps,
    guard_steps,
    run_guard,
    run_guard_sync,
)
from tether.guardrails.policy import (
    TurnFacts,
    UnknownToolMode,
    decide,
    invalid_arguments_text,
    not_executed_text,
    tool_required_text,
    unknown_tool_text,
)
from tether.guardrails.presets import GuardConfig
from tether.guardrails.response import view_response

__all__ = ["Guardrails", "GuardrailsOptions", "ToolChoiceLike", "ToolLike", "is_function_tool"]

ToolLike = ToolSpec | Mapping[str, Any]
ToolChoiceLike = str | Mapping[str, Any] | None


class GuardrailsOptions(TypedDict, total=False):
    """``Guardrails``' keyword options, as ``wrap`` and the eval client pass them on."""

    max_retries: int
    coerce: bool
    unknown_tool: UnknownToolMode
    fill_defaults: bool
    rescue_formats: Sequence[str]
    stats: GuardrailStats | None


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
    The pipeline's switches are one ``GuardConfig`` (``config``); these options fill it.
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
        self.config = GuardConfig("off", dedupe=False, coerce=coerce, fill_defaults=fill_defaults)
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

    def _rescue(self, content: str | None, offered: Sequence[ToolSpec]) -> tuple[str | None, list[ToolCall]]:
        """Calls written as text in ``content``, tagged ``from_text:<format>`` (the pipeline records them)."""
        if not content or not offered:
            return content, []
        for fmt in self._formats:
            result = fmt.parse(content, offered)
            if result.calls:
                tag = f"from_text:{fmt.name}"
                return result.content or None, [replace(c, repairs=(tag, *c.repairs)) for c in result.calls]
        return content, []

    def _steps(
        self, response: Any, tool_choice: ToolChoiceLike, messages: Sequence[Message], can_regenerate: bool
    ) -> tuple[str | None, Steps]:
        view = view_response(response)
        offered = self.offered(tool_choice)
        content, calls = view.content, list(view.calls)
        if not calls:
            content, calls = self._rescue(content, offered)
        steps = guard_steps(
            calls, offered, self.config, messages, checkers=self._checkers, can_regenerate=can_regenerate
        )
        return content, steps

    def check(
        self,
        response: Any,
        *,
        tool_choice: ToolChoiceLike = "auto",
        require_tool: bool = False,
        attempt: int = 0,
        messages: Sequence[Message | Mapping[str, Any]] = (),
        regenerate: Callable[[Request], Regenerated | None] | None = None,
    ) -> Decision:
        """Decide what to do with ``response``. ``require_tool``: an active workflow step needs a
        tool call; ``attempt``: retries already spent on this turn; ``regenerate``: a synchronous
        re-pick/repair (see ``acheck``), given the conversation ``messages``."""
        history = _messages(messages)
        content, steps = self._steps(response, tool_choice, history, regenerate is not None)
        result = run_guard_sync(steps, regenerate, self.stats)
        return self._finish(content, result, tool_choice, require_tool, attempt)

    async def acheck(
        self,
        response: Any,
        *,
        messages: Sequence[Message | Mapping[str, Any]] = (),
        regenerator: Regenerator | None = None,
        tool_choice: ToolChoiceLike = "auto",
        require_tool: bool = False,
        attempt: int = 0,
    ) -> Decision:
        """:meth:`check` with the pipeline's regenerating layers: unresolved names go to a
        constrained re-pick and invalid arguments to a schema-constrained repair, each one
        extra generation by ``regenerator``. Its answers are used only when they are valid."""
        history = _messages(messages)
        content, steps = self._steps(response, tool_choice, history, regenerator is not None)
        result = await run_guard(steps, regenerator, self.stats)
        return self._finish(content, result, tool_choice, require_tool, attempt)

    # -- deciding ----------------------------------------------------------------------

    def _finish(
        self,
        content: str | None,
        result: GuardResult,
        tool_choice: ToolChoiceLike,
        require_tool: bool,
        attempt: int,
    ) -> Decision:
        mode, named = _choice(tool_choice)
        calls = [c for c, _ in result.checked]
        verdicts = [v for _, v in result.checked]
        notes = list(result.interventions)
        if result.refused_text:
            content = "\n".join(t for t in (content, *result.refused_text) if t)
        facts = TurnFacts(
            calls=len(calls),
            unresolved=sum(not v.resolved for v in verdicts),
            invalid=sum(v.status == "invalid" for v in verdicts),
            tool_required=require_tool or mode in ("required", "named"),
            attempt=attempt,
            max_retries=self.max_retries,
            unknown_tool=self.unknown_tool,
        )
        verdict = decide(facts)
        names = [t.name for t in self.offered(tool_choice)]
        retry: tuple[dict[str, Any], ...] = ()
        if verdict.action == "retry":
            retry = self._retry_messages(content, result, names, named, verdict.tier)
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
                unknown_tool_text(v.written_name, names, candidates=v.candidates)
                for v in verdicts
                if not v.resolved
            )
            notes.append(
                Intervention("unknown_tool_text", content, None, [v.written_name for v in verdicts], None)
            )
            calls, verdicts = [], []
        for note in notes[len(result.interventions) :]:  # the pipeline's own are recorded already
            self.stats.record(note)
        self.stats.record_action(verdict.action)
        return Decision(
            verdict.action,
            verdict.reason,
            content,
            tuple(calls),
            tuple(verdicts),
            retry,
            tuple(notes),
            attempt,
        )

    def _retry_messages(
        self, content: str | None, result: GuardResult, names: Sequence[str], named: str | None, tier: int
    ) -> tuple[dict[str, Any], ...]:
        if not result.checked:
            nudge = tool_required_text(names, named=named, tier=tier)
            return ({"role": "assistant", "content": content or ""}, {"role": "user", "content": nudge})
        # The assistant turn as the model wrote it (its own names), then one tool turn per call.
        written = [replace(c, name=v.written_name) for c, v in result.checked]
        assistant: dict[str, Any] = {
            "role": "assistant",
            "content": content or None,
            "tool_calls": [c.to_openai() for c in written],
        }
        turns: list[dict[str, Any]] = [assistant]
        for call, v in result.checked:
            if not v.resolved:
                text = unknown_tool_text(v.written_name, names, candidates=v.candidates, tier=tier)
            elif v.status == "invalid":
                schema = self._checkers[call.name].schema
                text = invalid_arguments_text(call.name, v.errors, schema=schema, tier=tier)
            else:
                text = not_executed_text()
            turns.append({"role": "tool", "tool_call_id": call.id, "content": text})
        return tuple(turns)


def _messages(messages: Sequence[Message | Mapping[str, Any]]) -> tuple[Message, ...]:
    return tuple(m if isinstance(m, Message) else Message.from_openai(m) for m in messages)
