"""tether in front of a real llama-server on the bundled model: layer 0 as GBNF, streaming, hang-ups.

The name-fix set (tether.evals.name_fix) goes through tether's HTTP API with layer 0 only
(preset ``names``: no guard behind it), so every offered name in the replies came from the
grammar llama-server applied; the same prompts sent to llama-server without the grammar show
the model writing names that are not offered.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from openai import OpenAI
from pydantic import BaseModel

from tests.backends.checks import (
    OFFERED,
    REPAIRS,
    cached_tokens,
    check_hang_up_frees_the_slot,
    check_names_only_offered,
    check_repair_constraint,
    check_repick_constraint,
    check_streamed_call,
    check_strict_calls_are_schema_valid,
    layer0_specs,
    llama_server_busy,
    template_of,
)
from tether.chat import Message
from tether.engine.prompt import build_prompt
from tether.engine.remote import LlamaServerEngine
from tether.evals.name_fix import CASES, FEW_SHOT, PREFILL, TOOLS
from tether.grammar.formats import available_formats, get_format
from tether.grammar.remote import compile_gbnf


def test_name_fix_set_names_only_offered_tools(tether_url: str) -> None:
    check_names_only_offered(tether_url)


def test_strict_calls_are_schema_valid(tether_url: str) -> None:
    check_strict_calls_are_schema_valid(tether_url)


def test_without_the_grammar_the_model_writes_names_not_offered(
    llama_server: str, backend_engines: list[LlamaServerEngine]
) -> None:
    """The control: the same prompts, prefilled up to the name, decoded by llama-server unconstrained."""
    template = template_of(backend_engines[0])
    fmt = get_format("generic")
    wrong = 0
    for case in CASES[:20]:
        prompt = build_prompt(template, fmt, (Message("system", FEW_SHOT), Message("user", case)), TOOLS)
        r = httpx.post(
            f"{llama_server}/completion",
            json={"prompt": prompt + PREFILL, "n_predict": 12, "temperature": 0},
            timeout=60,
        )
        name = r.json()["content"].split('"', 1)[0]
        wrong += name not in OFFERED
    assert wrong >= 15  # measured: all 20 name a tool that is not offered (Bash, Read)


@pytest.mark.parametrize("name", available_formats())
def test_llama_server_accepts_every_formats_grammar(llama_server: str, name: str) -> None:
    for spec in layer0_specs(name):
        grammar = compile_gbnf(spec)
        assert grammar is not None
        body = {"prompt": "Hello", "n_predict": 2, "temperature": 0, **grammar.request_fields()}
        r = httpx.post(f"{llama_server}/completion", json=body, timeout=60)
        assert r.status_code == 200, (name, r.text[:500])


def test_llama_server_refuses_a_broken_grammar(llama_server: str) -> None:
    """The control for the test above: a grammar llama.cpp cannot parse is refused, not ignored."""
    body = {"prompt": "Hello", "n_predict": 2, "grammar": 'root ::= "a" undefined-rule'}
    assert httpx.post(f"{llama_server}/completion", json=body, timeout=60).status_code >= 400


@pytest.mark.parametrize(("schema", "ask"), REPAIRS)
def test_repair_grammar_yields_schema_valid_arguments(
    backend_engines: list[LlamaServerEngine], schema: dict[str, Any], ask: str
) -> None:
    check_repair_constraint(backend_engines[0], schema, ask)


def test_repick_grammar_yields_an_offered_name(backend_engines: list[LlamaServerEngine]) -> None:
    check_repick_constraint(backend_engines[0])


def test_streaming_call_and_prefix_reuse(tether_url: str) -> None:
    body = check_streamed_call(tether_url)
    # The same system prompt and tools again: llama-server's slot cache serves the shared prefix.
    assert cached_tokens(tether_url, {**body, "stream": False}) > 100


def test_hang_up_frees_the_slot_here_and_on_the_server(tether_url: str, llama_server: str) -> None:
    check_hang_up_frees_the_slot(
        tether_url,
        max_tokens=2000,
        server_busy=lambda: llama_server_busy(llama_server),
        server="llama-server",
    )


def test_a_structured_reply_through_llama_server(tether_url: str) -> None:
    """The openai SDK's typed reply through tether in front of llama-server: the schema is GBNF there."""

    class City(BaseModel):
        name: str
        country: str
        population: int

    with OpenAI(base_url=tether_url + "/v1", api_key="unused", max_retries=0) as client:
        reply = client.beta.chat.completions.parse(
            model="smollm2-135m-instruct",
            response_format=City,
            messages=[{"role": "user", "content": "Tell me about Lisbon."}],
        )
        assert isinstance(reply.choices[0].message.parsed, City), reply.choices[0].message.content
        anything = client.chat.completions.create(
            model="smollm2-135m-instruct",
            response_format={"type": "json_object"},
            messages=[{"role": "user", "content": "Describe a cat."}],
            max_tokens=200,
        )
        text = anything.choices[0].message.content or ""
        # No budget reaches llama-server's grammar: a reply cut at max_tokens is closed after the fact.
        assert anything.choices[0].finish_reason == "stop" and isinstance(json.loads(text), dict), text
