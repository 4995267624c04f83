"""The model side of a workflow run: a one-method Protocol and two implementations.

``ModelClient.complete(messages, tools, tool_choice) -> Message`` returns one
assistant message (text and/or ``tool_calls``). ``CoreClient`` runs in-process on
a ``ChatCore`` (same prompt building, layer-0 constraint and scheduler as the
proxy; ``priority`` shares the engine with proxy requests). ``HttpClient`` talks
to any OpenAI-compatible ``/chat/completions`` endpoint with httpx.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol, runtime_checkable

import httpx

from tether.aio import closing_stream
from tether.chat import Message, ToolCallRecord
from tether.config import ConstrainMode
from tether.engine.base import SamplingParams
from tether.engine.prompt import build_prompt
from tether.errors import EngineError
from tether.grammar.formats.base import ToolSpec
from tether.proxy.core import CallOut, ChatCore, ChatJob, Prepared, TextOut, ToolChoice, new_call_id
from tether.proxy.guard import GuardConfig

__all__ = ["CoreClient", "HttpClient", "ModelClient", "message_from_openai", "message_to_openai"]


@runtime_checkable
class ModelClient(Protocol):
    """Anything that turns a conversation and offered tools into one assistant message."""

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], tool_choice: ToolChoice
    ) -> Message: ...


def message_to_openai(message: Message) -> dict[str, Any]:
    """An OpenAI chat message dict (arguments as JSON text)."""
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        out["content"] = message.content or None
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.name is not None and message.role == "tool":
        out["name"] = message.name
    return out


def message_from_openai(data: Mapping[str, Any]) -> Message:
    """An assistant message from an OpenAI response's ``choices[0].message``."""
    calls = []
    for call in data.get("tool_calls") or ():
        fn = call.get("function") or {}
        args = fn.get("arguments")
        text = args if isinstance(args, str) else json.dumps(args if args is not None else {})
        calls.append(ToolCallRecord(str(call.get("id") or new_call_id()), str(fn.get("name") or ""), text))
    content = data.get("content")
    return Message("assistant", content if isinstance(content, str) else "", tuple(calls))


class CoreClient:
    """In-process model client over a ``ChatCore`` (the embedded engine).

    Defaults suit small models in workflows: greedy sampling, ``constrain="strict"``
    (arguments held to the schema) and one tool call per turn. ``guard`` (the serving
    path's ``GuardConfig``) overrides ``constrain`` when given.

    ``stable_prompt``: when ``tool_choice`` names a tool, the prompt still lists every
    tool and only the constraint (and the parser) is narrowed to the named one. Steering
    step by step then keeps the prompt prefix identical, so each turn only evaluates the
    new messages instead of the whole prompt (the tool block sits in the system prompt).
    """

    def __init__(
        self,
        core: ChatCore,
        *,
        constrain: ConstrainMode = "strict",
        guard: GuardConfig | None = None,
        params: SamplingParams | None = None,
        max_tokens: int | None = 512,
        priority: int = 0,
        parallel_tool_calls: bool = False,
        stable_prompt: bool = True,
    ) -> None:
        self.core = core
        self.stable_prompt = stable_prompt
        self.guard = guard if guard is not None else GuardConfig(constrain=constrain)
        self.params = params if params is not None else SamplingParams(temperature=0.0)
        self.max_tokens = max_tokens
        self.priority = priority
        self.parallel_tool_calls = parallel_tool_calls

    @property
    def n_ctx(self) -> int:
        return self.core.info.n_ctx

    def count_tokens(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> int:
        """Prompt tokens for ``messages`` with ``tools`` offered, by the engine's own tokenizer."""
        text = build_prompt(self.core.template, self.core.fmt, messages, tools)
        return len(self.core.engine.tokenize(text, special=True))

    def _prepare(self, job: ChatJob) -> Prepared:
        named = job.tool_choice not in ("auto", "none", "required")
        if not (self.stable_prompt and named):
            return self.core.prepare(job)
        chosen = tuple(t for t in job.tools if t.name == job.tool_choice)
        if not chosen:
            return self.core.prepare(job)  # the core words the error
        wide = self.core.prepare(replace(job, tool_choice="required"))
        return replace(wide, job=job, tools=chosen)

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], tool_choice: ToolChoice
    ) -> Message:
        job = ChatJob(
            messages=tuple(messages),
            tools=tuple(tools),
            tool_choice=tool_choice,
            parallel_tool_calls=self.parallel_tool_calls,
            params=replace(self.params),
            max_tokens_requested=self.max_tokens,
            guard=self.guard,
            priority=self.priority,
        )
        prepared = self._prepare(job)
        text: list[str] = []
        calls: list[ToolCallRecord] = []
        async with closing_stream(self.core.run(prepared)) as events:
            async for event in events:
                if isinstance(event, TextOut):
                    text.append(event.text)
                elif isinstance(event, CallOut):
                    calls.append(ToolCallRecord(event.id, event.name, event.arguments))
        return Message("assistant", "".join(text), tuple(calls))


class HttpClient:
    """A model client for any OpenAI-compatible server (``base_url`` ends with ``/v1``).

    ``extra_body`` is merged into every request (e.g. ``{"tether": {"constrain": "strict"}}``);
    ``headers`` are sent as well (e.g. ``X-Tether-Session``). HTTP errors become ``EngineError``.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        client: httpx.AsyncClient | None = None,
        temperature: float = 0.0,
        max_tokens: int | None = 512,
        extra_body: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 300.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.extra_body = dict(extra_body or {})
        self._headers = dict(headers or {})
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._client = client
        self._timeout = timeout_s

    def body(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], tool_choice: ToolChoice
    ) -> dict[str, Any]:
        """The request body sent for one turn."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [message_to_openai(m) for m in messages],
            "temperature": self.temperature,
        }
        if tools:
            body["tools"] = [t.to_openai() for t in tools]
            body["tool_choice"] = (
                tool_choice
                if tool_choice in ("auto", "none", "required")
                else {"type": "function", "function": {"name": tool_choice}}
            )
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        body.update(self.extra_body)
        return body

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], tool_choice: ToolChoice
    ) -> Message:
        body = self.body(messages, tools, tool_choice)
        url = f"{self.base_url}/chat/completions"
        if self._client is not None:
            response = await self._client.post(url, json=body, headers=self._headers, timeout=self._timeout)
        else:
            async with httpx.AsyncClient(timeout=self._timeout) as client:
                response = await client.post(url, json=body, headers=self._headers)
        try:
            data = response.json()
        except ValueError:
            data = None
        if response.status_code >= 400 or not isinstance(data, dict):
            detail = data.get("error", {}).get("message") if isinstance(data, dict) else response.text[:200]
            raise EngineError(f"model server answered HTTP {response.status_code}: {detail}")
        choices = data.get("choices") or []
        if not choices or not isinstance(choices[0].get("message"), Mapping):
            raise EngineError("model server answered without choices[0].message")
        return message_from_openai(choices[0]["message"])
