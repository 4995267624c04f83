"""Sending one model turn under a preset, to a tether server or to any OpenAI-compatible server.

* A **tether** server (in-process or ``tether serve``) gets the preset in the
  request body, ``"tether": {"preset": NAME}``, and applies it server-side: layer 0
  in the sampler, then rescue / name resolution / re-pick / argument repair. Its
  internal re-generations (each ``repick`` and each repair attempt) are counted as
  model calls and as retries, read back from the reported interventions.
* Any **other** OpenAI-compatible server cannot run tether's sampler-side layers.
  There ``bare`` sends plain requests, and every guarded preset applies
  :class:`tether.guardrails.Guardrails` client-side, the way
  :func:`tether.guardrails.wrap` does (name resolution, argument coercion and
  validation, up to two escalating retries; rescue of calls written as text for
  ``rescue``/``full``/``strict`` only). Each retry is one more model call.

Both return a :class:`Reply` with the final assistant message and what it cost.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from tether.guardrails import Guardrails, finalize
from tether.guardrails.interventions import Intervention

__all__ = ["PRESET_NAMES", "ChatClient", "Reply", "ServerKind", "detect_server"]

PRESET_NAMES = ("bare", "names", "resolve", "rescue", "full", "strict")
ServerKind = Literal["tether", "openai"]
_RESCUING = ("rescue", "full", "strict")


@dataclass
class Reply:
    """One model turn as the caller sees it, with its cost."""

    message: dict[str, Any]
    finish_reason: str = "stop"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    model_calls: int = 0
    retries: int = 0
    latency_s: float = 0.0
    interventions: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""
    error_code: str = ""

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        calls = self.message.get("tool_calls")
        return list(calls) if isinstance(calls, list) else []

    @property
    def text(self) -> str:
        content = self.message.get("content")
        return content if isinstance(content, str) else ""


async def detect_server(http: httpx.AsyncClient) -> tuple[ServerKind, str]:
    """(kind, first model id) from ``GET /models``; tether's model cards carry a ``tether`` field."""
    resp = await http.get("models")
    resp.raise_for_status()
    cards = resp.json().get("data") or []
    if not cards:
        raise RuntimeError("the server lists no models")
    kind: ServerKind = "tether" if any(isinstance(c.get("tether"), Mapping) for c in cards) else "openai"
    return kind, str(cards[0]["id"])


class ChatClient:
    """Posts chat completions; one instance per server, shared by all items and presets."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        model: str,
        kind: ServerKind,
        *,
        max_retries: int = 2,
        busy_retries: int = 30,
    ) -> None:
        self.http = http
        self.model = model
        self.kind = kind
        self.max_retries = max_retries
        self.busy_retries = busy_retries

    async def _post(self, body: dict[str, Any]) -> tuple[dict[str, Any] | None, str, str]:
        """(response, error text, error code); waits out 429s (a full queue is not a model call)."""
        for _ in range(self.busy_retries + 1):
            resp = await self.http.post("chat/completions", json=body)
            if resp.status_code == 429:
                await asyncio.sleep(float(resp.headers.get("retry-after", "1") or 1))
                continue
            try:
                data = resp.json()
            except ValueError:
                return None, f"HTTP {resp.status_code}: {resp.text[:300]}", "bad_response"
            if resp.status_code >= 400 or ("error" in data and "choices" not in data):
                err = data.get("error") if isinstance(data, dict) else None
                err = err if isinstance(err, Mapping) else {}
                return (
                    None,
                    f"HTTP {resp.status_code}: {err.get('message', resp.text[:300])}",
                    str(err.get("code") or resp.status_code),
                )
            return data, "", ""
        return None, "the server stayed busy (429)", "queue_full"

    async def chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        preset: str,
        *,
        tool_choice: Any = None,
        temperature: float = 0.0,
        seed: int | None = None,
        max_tokens: int | None = None,
    ) -> Reply:
        """One turn of ``messages`` offering ``tools`` under ``preset``."""
        body: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": temperature}
        if tools:
            body["tools"] = tools
        if tool_choice is not None:
            body["tool_choice"] = tool_choice
        if seed is not None:
            body["seed"] = seed
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        started = time.monotonic()
        if self.kind == "tether":
            reply = await self._tether(body, preset)
        elif preset == "bare" or not tools:
            reply = await self._plain(body)
        else:
            reply = await self._guarded(body, preset, tool_choice)
        reply.latency_s = time.monotonic() - started
        return reply

    def _reply(self, data: dict[str, Any], reply: Reply) -> Reply:
        choice = (data.get("choices") or [{}])[0]
        usage = data.get("usage") or {}
        reply.message = dict(choice.get("message") or {"role": "assistant", "content": ""})
        reply.finish_reason = str(choice.get("finish_reason") or "stop")
        reply.prompt_tokens += int(usage.get("prompt_tokens") or 0)
        reply.completion_tokens += int(usage.get("completion_tokens") or 0)
        details = usage.get("prompt_tokens_details") or {}
        reply.cached_tokens += int(details.get("cached_tokens") or 0)
        return reply

    async def _tether(self, body: dict[str, Any], preset: str) -> Reply:
        data, error, code = await self._post({**body, "tether": {"preset": preset}})
        reply = Reply({"role": "assistant", "content": ""}, model_calls=1)
        if data is None:
            reply.error, reply.error_code = error, code
            return reply
        self._reply(data, reply)
        ext = data.get("tether") or {}
        reply.interventions = list(ext.get("interventions") or [])
        # The server's own count of model runs (re-pick, repair, re-ask, re-decided answer); absent: one.
        runs = ext.get("generations")
        extra = runs - 1 if isinstance(runs, int) and runs > 1 else 0
        reply.model_calls += extra
        reply.retries += extra
        return reply

    async def _plain(self, body: dict[str, Any]) -> Reply:
        data, error, code = await self._post(body)
        reply = Reply({"role": "assistant", "content": ""}, model_calls=1)
        if data is None:
            reply.error, reply.error_code = error, code
            return reply
        return self._reply(data, reply)

    async def _guarded(self, body: dict[str, Any], preset: str, tool_choice: Any) -> Reply:
        guard = Guardrails(
            body["tools"],
            max_retries=self.max_retries,
            rescue_formats=("hermes", "generic") if preset in _RESCUING else (),
        )
        choice = tool_choice if tool_choice is not None else "auto"
        messages = list(body["messages"])
        seen: list[Intervention] = []
        reply = Reply({"role": "assistant", "content": ""})
        attempt = 0
        while True:
            data, error, code = await self._post({**body, "messages": messages})
            reply.model_calls += 1
            if data is None:
                reply.error, reply.error_code = error, code
                break
            decision = guard.check(data, tool_choice=choice, attempt=attempt)
            seen.extend(decision.interventions)
            if decision.action != "retry":
                self._reply(finalize(data, decision, seen), reply)
                break
            messages.extend(decision.retry_messages)
            attempt += 1
            reply.retries += 1
            self._reply(data, reply)
        reply.interventions = [i.to_dict() for i in seen]
        return reply
