"""``wrap(client)``: the guardrails applied transparently to an official ``openai`` client.

``wrap`` returns a copy of an ``OpenAI`` or ``AsyncOpenAI`` client (the original is
left untouched) whose ``chat.completions.create`` checks every non-streaming call
that carries ``tools``: on ``retry`` it re-calls with the retry messages appended,
at most ``max_retries`` times, and returns the final response with resolved,
coerced tool calls and the interventions under ``response.tether["interventions"]``
(the same place the tether proxy reports its own). Streaming calls, calls without
tools, calls with ``n > 1`` and calls offering non-function (custom) tools pass
through unchanged.

With ``regenerate=True`` the guard pipeline's regenerating layers run on the same client
(:class:`ClientRegenerator`): a name that does not resolve gets one re-pick request (the
offered tools, ``tool_choice`` required) and invalid arguments one repair request (that
tool named in ``tool_choice``), before any retry; their answers count only when valid.
"""

from __future__ import annotations

import inspect
import json
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, Unpack

from tether.chat import Message, Usage
from tether.grammar.formats.base import ToolSpec
from tether.guardrails.decision import Decision
from tether.guardrails.guard import Guardrails, GuardrailsOptions, is_function_tool
from tether.guardrails.interventions import GuardrailStats, Intervention
from tether.guardrails.pipeline import PickName, Regenerated, Request
from tether.guardrails.policy import invalid_arguments_text
from tether.guardrails.response import as_dict, rebuild, view_response

if TYPE_CHECKING:
    from openai import AsyncOpenAI, OpenAI

__all__ = ["AskAgain", "ClientRegenerator", "ask_again", "finalize", "wrap"]

ClientT = TypeVar("ClientT", "OpenAI", "AsyncOpenAI")
R = TypeVar("R")
_CACHE_SIZE = 32


def _given(value: Any) -> bool:
    """False for None and the SDK's ``NOT_GIVEN``/``omit`` sentinels."""
    return value is not None and type(value).__name__ not in ("NotGiven", "Omit")


def _guarded(kwargs: Mapping[str, Any]) -> bool:
    """Only non-streaming, single-choice calls whose tools are all function tools are checked."""
    n, tools = kwargs.get("n"), kwargs.get("tools")
    if not _given(tools) or not tools:
        return False
    return (
        all(isinstance(t, Mapping) and is_function_tool(t) for t in tools)
        and not (_given(kwargs.get("stream")) and kwargs["stream"])
        and (not _given(n) or n == 1)
    )


def finalize(response: R, decision: Decision, interventions: Sequence[Intervention]) -> R:
    """The response the caller gets for the last ``decision``.

    ``execute``/``fail`` with calls: the checked calls replace ``tool_calls`` (resolved
    names, coerced arguments, original ids). ``answer`` because of an unknown tool
    (``unknown_tool="text"``): the message becomes the error text. A text answer is
    returned as the model wrote it. Interventions are always listed.
    """
    records = [i.to_dict() for i in interventions]
    if decision.action in ("execute", "fail") and decision.tool_calls:
        return rebuild(
            response,
            content=decision.content,
            tool_calls=decision.tool_calls_openai(),
            finish_reason="tool_calls",
            interventions=records,
        )
    if decision.action == "answer" and decision.reason == "unknown_tool":
        return rebuild(
            response, content=decision.content, tool_calls=None, finish_reason="stop", interventions=records
        )
    return rebuild(response, interventions=records)


class _Guards:
    """A small cache of ``Guardrails`` per distinct tool list, sharing options and stats."""

    def __init__(self, **options: Any) -> None:
        self.options = options
        self._cache: OrderedDict[str, Guardrails] = OrderedDict()

    def get(self, tools: Any) -> Guardrails:
        key = json.dumps(tools, sort_keys=True, default=repr)
        guard = self._cache.get(key)
        if guard is None:
            guard = Guardrails(tools, **self.options)
            self._cache[key] = guard
            if len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        return guard


@dataclass(frozen=True)
class AskAgain:
    """The chat request that answers a guard request: the conversation, the bad call and a tool
    result saying what is wrong with it; the tools to offer; ``forced``: the tool ``tool_choice`` must
    name (a repair), or None for ``tool_choice: required`` over all of them (a re-pick)."""

    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...]
    forced: str | None


def ask_again(request: Request) -> AskAgain:
    """The one request, on a chat API, that re-picks a name or repairs arguments."""
    call = request.call
    shown = Message("assistant", "", tool_calls=(call,))
    if isinstance(request, PickName):
        names = ", ".join(t.name for t in request.tools)
        text = f"Error: unknown tool '{call.name}'. Available tools: {names}. Call the one that fits."
        tools, forced = request.tools, None
    else:
        text = invalid_arguments_text(request.tool.name, request.errors, schema=dict(request.tool.parameters))
        tools, forced = (request.tool,), request.tool.name
    reply = Message("tool", text, tool_call_id=call.id)
    return AskAgain((*request.messages, shown, reply), tuple(tools), forced)


class ClientRegenerator:
    """The guard's re-pick and repair as requests on the wrapped client (``create`` is its own,
    unwrapped ``chat.completions.create``; ``base`` the caller's keyword arguments)."""

    def __init__(self, create: Callable[..., Any], base: Mapping[str, Any]) -> None:
        self.create = create
        self.base = {k: v for k, v in base.items() if k not in ("messages", "tools", "tool_choice", "n")}

    def request(self, request: Request) -> dict[str, Any]:
        """The keyword arguments of the one request that answers ``request``."""
        asked = ask_again(request)
        choice: str | dict[str, Any] = "required"
        if asked.forced is not None:
            choice = {"type": "function", "function": {"name": asked.forced}}
        messages = [m.to_openai() for m in asked.messages]
        tools = [t.to_openai() for t in asked.tools]
        return {**self.base, "messages": messages, "tools": tools, "tool_choice": choice}

    def answer(self, request: Request, response: Any) -> Regenerated:
        view = view_response(response)
        data = as_dict(response).get("usage") or {}
        prompt = int(data.get("prompt_tokens") or 0)
        usage = Usage(prompt, int(data.get("completion_tokens") or 0), prompt)
        if not view.calls:
            return Regenerated(None, usage)
        first = view.calls[0]
        if isinstance(request, PickName):
            return Regenerated(first.name, usage)
        return Regenerated(dict(first.arguments) if not first.repairs else None, usage)

    def __call__(self, request: Request) -> Regenerated:
        return self.answer(request, self.create(**self.request(request)))

    async def regenerate(self, request: Request) -> Regenerated:
        return self.answer(request, await self.create(**self.request(request)))


class _Turn:
    """One guarded ``create`` call: the messages so far, the interventions seen, the retries spent."""

    def __init__(
        self, original: Callable[..., Any], guards: _Guards, regenerate: bool, kwargs: dict[str, Any]
    ):
        self.kwargs = kwargs
        self.guard = guards.get(kwargs["tools"])
        self.choice = kwargs.get("tool_choice") if _given(kwargs.get("tool_choice")) else "auto"
        self.messages = list(kwargs["messages"])
        self.regen = ClientRegenerator(original, kwargs) if regenerate else None
        self.seen: list[Intervention] = []
        self.attempt = 0

    def request(self) -> dict[str, Any]:
        return {**self.kwargs, "messages": self.messages}

    def check_options(self) -> dict[str, Any]:
        return {"tool_choice": self.choice, "attempt": self.attempt, "messages": self.messages}

    def settle(self, response: Any, decision: Decision) -> Any | None:
        """The final response, or None after queueing the retry messages."""
        self.seen.extend(decision.interventions)
        if decision.action != "retry":
            return finalize(response, decision, self.seen)
        self.messages.extend(decision.retry_messages)
        self.attempt += 1
        return None


def _sync_create(original: Callable[..., Any], guards: _Guards, regenerate: bool) -> Callable[..., Any]:
    def create(**kwargs: Any) -> Any:
        if not _guarded(kwargs):
            return original(**kwargs)
        turn = _Turn(original, guards, regenerate, kwargs)
        while True:
            response = original(**turn.request())
            final = turn.settle(
                response, turn.guard.check(response, regenerate=turn.regen, **turn.check_options())
            )
            if final is not None:
                return final

    return create


def _async_create(original: Callable[..., Any], guards: _Guards, regenerate: bool) -> Callable[..., Any]:
    async def create(**kwargs: Any) -> Any:
        if not _guarded(kwargs):
            return await original(**kwargs)
        turn = _Turn(original, guards, regenerate, kwargs)
        while True:
            response = await original(**turn.request())
            decision = await turn.guard.acheck(response, regenerator=turn.regen, **turn.check_options())
            final = turn.settle(response, decision)
            if final is not None:
                return final

    return create


def _is_async(client: Any) -> bool:
    try:
        from openai import AsyncOpenAI
    except ImportError:  # pragma: no cover - a compatible client without the SDK installed
        return inspect.iscoroutinefunction(client.chat.completions.create)
    return isinstance(client, AsyncOpenAI)


def wrap(client: ClientT, *, regenerate: bool = False, **options: Unpack[GuardrailsOptions]) -> ClientT:
    """A copy of ``client`` whose ``chat.completions.create`` applies the guardrails.

    ``options`` are ``Guardrails``' own (``max_retries`` counts guardrail retries per call; the
    SDK's HTTP ``max_retries`` is separate; ``stats`` collects counters across calls);
    ``regenerate`` enables re-pick and repair requests on the same client.
    """
    options.setdefault("stats", GuardrailStats())
    guards = _Guards(**options)
    Guardrails((), **options)  # validate the options now, not on the first call
    copy: ClientT = client.with_options()
    completions = copy.chat.completions
    original = completions.create
    make = _async_create if _is_async(client) else _sync_create
    vars(completions)["create"] = make(original, guards, regenerate)
    return copy
