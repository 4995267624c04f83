"""vLLM's OpenAI server on the wire, as pure functions: the ``/v1/completions`` body tether sends and
the stream it reads back (shapes of vLLM 0.32's ``CompletionRequest`` and ``CompletionStreamResponse``).

The prompt goes as token ids and every chunk comes back with its ``token_ids``
(``return_token_ids``); the chunk's ``text`` is attributed to its last id. The id that
ended the reply (EOS, or one of the model's stop ids from its generation config) is
reported as :data:`STOPPED`, so the token loop stops on vLLM's own verdict without
tether knowing every stop id. Special tokens stay in the text (``skip_special_tokens``
off): tool-call markers are special tokens in several families.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from tether.engine.base import SamplingParams
from tether.errors import BackendUnavailableError
from tether.grammar.remote.structural_tag import compile_vllm
from tether.grammar.spec import OutputSpec

__all__ = [
    "STOPPED",
    "StreamEnd",
    "chat_template_of",
    "completion_body",
    "constraint_fields",
    "evaluated_tokens",
    "stream_pieces",
    "token_text",
    "wire_turns",
]

# Stands for the id that ended the reply: not part of it (ids are never negative; -1 is the loop's).
STOPPED = -2


@dataclass
class StreamEnd:
    """What the stream said besides tokens: why it finished and its usage (the chunk after the last)."""

    finish_reason: str | None = None
    stop_reason: int | str | None = None
    usage: dict[str, Any] | None = None


def constraint_fields(spec: OutputSpec) -> dict[str, Any]:
    """``spec`` as vLLM takes it: a structural tag (a trigger grammar) or a JSON schema; {} for none."""
    compiled = compile_vllm(spec)
    return compiled.request_fields() if compiled is not None else {}


def completion_body(
    model: str, prompt: list[int], params: SamplingParams, fields: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The streamed ``/v1/completions`` request for ``prompt`` under ``params`` and layer 0 (``fields``,
    an ``OutputSpec`` compiled by ``compile_vllm``)."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": prompt,
        "max_tokens": params.max_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": max(params.top_k, 0),  # tether and llama.cpp: <= 0 is off; vLLM: 0 is off, < -1 refused
        "min_p": params.min_p,
        "repetition_penalty": params.repeat_penalty,
        "presence_penalty": params.presence_penalty,
        "frequency_penalty": params.frequency_penalty,
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_token_ids": True,
        "skip_special_tokens": False,
        "spaces_between_special_tokens": False,
    }
    if params.seed is not None:
        body["seed"] = params.seed
    if params.logit_bias:
        body["logit_bias"] = {str(token): bias for token, bias in params.logit_bias}
    body.update(fields or {})
    return body


def stream_pieces(chunks: Iterable[Mapping[str, Any]], end: StreamEnd) -> Iterator[tuple[int, bytes]]:
    """``(id, text bytes)`` per generated token, :data:`STOPPED` for the id that ended the reply;
    ``end`` is filled in as the finish and usage chunks pass."""
    pending = b""  # text of a chunk without an id left to carry it (it rides on the next id)
    for chunk in chunks:
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            end.usage = usage
        for choice in chunk.get("choices") or ():
            ids = [int(t) for t in choice.get("token_ids") or ()]
            text = pending + str(choice.get("text") or "").encode()
            reason = choice.get("finish_reason")
            # stop_reason: None for EOS, the id for a stop id, the string for a stop string.
            by_token = reason == "stop" and not isinstance(choice.get("stop_reason"), str) and bool(ids)
            if by_token:
                ids.pop()
            pending = b"" if ids else text
            for i, token in enumerate(ids):
                yield token, text if i == len(ids) - 1 else b""
            if reason is None:
                continue
            end.finish_reason, end.stop_reason = str(reason), choice.get("stop_reason")
            if reason == "abort":
                raise BackendUnavailableError(
                    "vLLM aborted the generation (server shutting down or preempted)"
                )
            if by_token:
                yield STOPPED, b""


def evaluated_tokens(usage: Mapping[str, Any] | None, prompt_tokens: int) -> int:
    """Prompt tokens vLLM computed: all of them, less what its prefix cache served, where it says
    (``usage.prompt_tokens_details.cached_tokens``, with ``--enable-prompt-tokens-details``)."""
    details = (usage or {}).get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if not isinstance(cached, int):
        return prompt_tokens
    return max(0, prompt_tokens - cached)


def wire_turns(turns: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Template turns as vLLM's chat messages take them: call arguments as JSON text (it parses
    them back into objects for the template)."""
    out: list[dict[str, Any]] = []
    for turn in turns:
        message = dict(turn)
        if message.get("tool_calls"):
            message["tool_calls"] = [_wire_call(c) for c in message["tool_calls"]]
        out.append(message)
    return out


def _wire_call(call: Mapping[str, Any]) -> dict[str, Any]:
    function = dict(call.get("function") or {})
    args = function.get("arguments")
    if not isinstance(args, str):
        function["arguments"] = json.dumps(args if args is not None else {}, ensure_ascii=False)
    return {**call, "function": function}


def chat_template_of(tokenizer_info: Mapping[str, Any]) -> str | None:
    """The chat template in vLLM's ``/tokenizer_info`` (its tokenizer config, or ``--chat-template``);
    of several named ones, ``tool_use`` (tether offers tools) or else ``default``."""
    template: object = tokenizer_info.get("chat_template")
    if isinstance(template, list):  # the tokenizer config's [{"name", "template"}] form
        template = {str(t.get("name")): t.get("template") for t in template if isinstance(t, dict)}
    if isinstance(template, dict):
        template = template.get("tool_use") or template.get("default")
    return template if isinstance(template, str) and template.strip() else None


def token_text(value: object) -> str:
    """A special token's text from the tokenizer config: a string, or an added-token object."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else ""
