"""The model side of a workflow run: a one-method Protocol and two implementations.

``ModelClient.complete(messages, tools, tool_choice) -> Message`` returns one
assistant message (text and/or ``tool_calls``). ``CoreClient`` runs in-process on
a ``ChatCore`` (same prompt building, layer-0 constraint and scheduler as the
proxy; ``priority`` shares the engine with proxy requests). ``HttpClient`` talks
to any OpenAI-compatible ``/chat/completions`` endpoint with httpx.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol, runtime_checkable

import httpx

from tether.chat import Message
from tether.engine.base import SamplingParams
from tether.errors import EngineError
from tether.grammar.formats.base import ToolSpec
from tether.guardrails.presets import ConstrainMode, GuardConfig
from tether.turns.core import ChatCore, Prepared
from tether.turns.events import ChatJob, ToolChoice, collect

__all__ = ["CoreClient", "CountsTokens", "HttpClient", "ModelClient"]


@runtime_checkable
class ModelClient(Protocol):
    """Anything that turns a conversation and offered tools into one assistant message."""

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], tool_choice: ToolChoice
    ) -> Message: ...


@runtime_checkable
class CountsTokens(Protocol):
    """A client that knows its model's window and counts a prompt's tokens as the model sees them
    (the runner then compacts the conversation to fit)."""

    @property
    def n_ctx(self) -> int: ...

    def count_tokens(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> int: ...


# Calls pass as the model wrote them (repaired parses included); names and arguments are the runner's,
# except an option nobody said where the turn's words name another (``guardrails.steps.mentioned``).
_LAYER0_ONLY = GuardConfig(
    rescue=True, resolve=False, repick=False, validate=False, repair=False, dedupe=False, fill_mentioned=True
)


class CoreClient:
    """In-process model client over a ``ChatCore`` (the embedded engine).

    Defaults suit small models in workflows: greedy sampling, ``constrain="strict"``
    (arguments held to the schema) and one tool call per turn, with layer 0 only: the
    runner's own guard checks the calls. ``guard`` (a ``GuardConfig``) overrides this.

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
        # Layer 0 only: the runner applies the post-sampling guard itself, with its retry policy.
        self.guard = guard if guard is not None else replace(_LAYER0_ONLY, constrain=constrain)
        self.params = params if params is not None else SamplingParams(temperature=0.0)
        self.max_tokens = max_tokens
        self.priority = priority
        self.parallel_tool_calls = parallel_tool_calls

    @property
    def n_ctx(self) -> int:
        return self.core.info.n_ctx

    def count_tokens(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> int:
        """Prompt tokens for ``messages`` with ``tools`` offered, by the engine's own tokenizer."""
        return self.core.prompt_length(tuple(messages), tuple(tools))

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
        reply = await collect(self.core.run(prepared))
        return Message("assistant", reply.text, reply.calls)


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
            "messages": [m.to_openai() for m in messages],
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
        message = Message.from_openai(choices[0]["message"])
        return Message("assistant", message.content, message.tool_calls)
