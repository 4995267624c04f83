"""Each protocol's way of asking for a structured reply becomes the job's one ``ReplyFormat``."""

from __future__ import annotations

from typing import Any

import pytest

from tether.errors import InvalidRequestError
from tether.guardrails.presets import GuardConfig
from tether.proxy.convert import job_from_openai
from tether.proxy.ollama_convert import (
    OllamaChatRequest,
    OllamaGenerateRequest,
    job_from_ollama_chat,
    job_from_ollama_generate,
)
from tether.proxy.openai_schema import ChatCompletionRequest
from tether.proxy.responses_convert import ResponsesRequest, job_from_responses
from tether.turns.events import ChatJob

CITY = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
BAD = {"type": "object", "properties": {"n": {"type": "integer", "maximum": 3}}}
ASK = [{"role": "user", "content": "Tell me about Lisbon."}]
GUARD = GuardConfig()


def _openai(rf: Any) -> ChatJob:
    req = ChatCompletionRequest.model_validate({"model": "m", "messages": ASK, "response_format": rf})
    return job_from_openai(req, default_temperature=0.0, default_guard=GUARD, n_vocab=100)


def _responses(fmt: Any) -> ChatJob:
    req = ResponsesRequest.model_validate({"model": "m", "input": "Lisbon?", "text": {"format": fmt}})
    return job_from_responses(req, (), default_temperature=0.0, default_guard=GUARD)[0]


def _ollama_chat(fmt: Any) -> ChatJob:
    req = OllamaChatRequest.model_validate({"model": "m", "messages": ASK, "format": fmt})
    return job_from_ollama_chat(req, default_temperature=0.0, default_guard=GUARD)


def _ollama_generate(fmt: Any) -> ChatJob:
    req = OllamaGenerateRequest.model_validate({"model": "m", "prompt": "Lisbon?", "format": fmt})
    return job_from_ollama_generate(req, default_temperature=0.0, default_guard=GUARD)


@pytest.mark.parametrize(
    ("build", "schema_form", "object_form", "param"),
    [
        (
            _openai,
            {"type": "json_schema", "json_schema": {"name": "City", "schema": CITY, "strict": True}},
            {"type": "json_object"},
            "response_format.json_schema.schema",
        ),
        (
            _responses,
            {"type": "json_schema", "name": "City", "schema": CITY, "strict": True},
            {"type": "json_object"},
            "text.format.schema",
        ),
        (_ollama_chat, CITY, "json", "format"),
        (_ollama_generate, CITY, "json", "format"),
    ],
)
def test_every_protocol_asks_the_same_way(build: Any, schema_form: Any, object_form: Any, param: str) -> None:
    job = build(schema_form)
    assert job.reply_format is not None and job.reply_format.schema == CITY
    job = build(object_form)
    assert job.reply_format is not None and job.reply_format.schema is None
    bad = dict(schema_form)
    if "json_schema" in bad:
        bad["json_schema"] = {"name": "x", "schema": BAD}
    elif "schema" in bad:
        bad["schema"] = BAD
    else:
        bad = BAD
    with pytest.raises(InvalidRequestError, match="maximum at /properties/n") as caught:
        build(bad)
    assert caught.value.param == param


def test_plain_text_asks_for_nothing() -> None:
    assert _openai({"type": "text"}).reply_format is None
    assert _responses({"type": "text"}).reply_format is None
    assert _ollama_chat("").reply_format is None
    assert (
        _openai({"type": "json_schema", "json_schema": {"name": "City", "schema": CITY}}).reply_format
        is not None
    )
