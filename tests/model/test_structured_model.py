"""Structured replies on the bundled model, through each protocol's own client over a real socket:
the reply is held to the schema from its first token, so it parses into the client's type."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import ollama
import pytest
from hypothesis import HealthCheck, given, settings
from openai import OpenAI
from pydantic import BaseModel

from tests.support.schemas import reply_schemas

MODEL = "smollm2-135m-instruct"


class City(BaseModel):
    name: str
    country: str
    population: int


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
        "strict": True,  # the SDK's parse() takes only strict tools
    },
}


@pytest.fixture(scope="module")
def client(served_as_serve: str) -> Iterator[OpenAI]:
    with OpenAI(base_url=served_as_serve + "/v1", api_key="unused", max_retries=0) as sdk:
        yield sdk


def test_the_openai_sdk_parses_a_pydantic_model(client: OpenAI) -> None:
    reply = client.beta.chat.completions.parse(
        model=MODEL, response_format=City, messages=[{"role": "user", "content": "Tell me about Lisbon."}]
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "stop" and choice.message.refusal is None
    assert isinstance(choice.message.parsed, City), choice.message.content


def test_beside_tools_the_reply_is_a_call_or_the_value(client: OpenAI) -> None:
    def ask(question: str) -> Any:
        return client.beta.chat.completions.parse(
            model=MODEL,
            response_format=City,
            tools=[WEATHER],  # type: ignore[list-item]
            messages=[{"role": "user", "content": question}],
        ).choices[0]

    weather = ask("What is the weather in Paris?")
    assert weather.finish_reason == "tool_calls", weather.message
    assert weather.message.tool_calls[0].function.name == "get_weather"
    lisbon = ask("Tell me about Lisbon.")
    assert lisbon.finish_reason == "stop" and isinstance(lisbon.message.parsed, City), lisbon.message


def test_the_responses_sdk_parses_a_pydantic_model(client: OpenAI) -> None:
    reply = client.responses.parse(model=MODEL, input="Tell me about Lisbon.", text_format=City)
    assert isinstance(reply.output_parsed, City)


def test_the_ollama_client_gets_its_format(served_as_serve: str) -> None:
    with ollama.Client(host=served_as_serve) as host:
        _ollama_formats(host)


def _ollama_formats(host: ollama.Client) -> None:
    chat = host.chat(
        model=MODEL,
        messages=[{"role": "user", "content": "Tell me about Lisbon."}],
        format=City.model_json_schema(),
    )
    City.model_validate_json(chat.message.content or "")
    generated = host.generate(model=MODEL, prompt="Tell me about Lisbon.", format=City.model_json_schema())
    City.model_validate_json(generated.response)
    anything = host.chat(
        model=MODEL, messages=[{"role": "user", "content": "Describe a cat."}], format="json"
    )
    assert isinstance(json.loads(anything.message.content or ""), dict)


def _reply(client: OpenAI, question: str, response_format: dict[str, Any], stream: bool) -> tuple[str, str]:
    """The reply's text and finish reason, streamed or not."""
    messages: Any = [{"role": "user", "content": question}]
    if not stream:
        choice = client.chat.completions.create(
            model=MODEL,
            messages=messages,
            response_format=response_format,
            max_tokens=200,  # type: ignore[arg-type]
        ).choices[0]
        return choice.message.content or "", choice.finish_reason
    text, finish = "", ""
    for chunk in client.chat.completions.create(
        model=MODEL,
        messages=messages,
        response_format=response_format,
        max_tokens=200,
        stream=True,  # type: ignore[arg-type]
    ):
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    return text, finish


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(reply_schemas())
def test_every_reply_under_a_random_schema_holds_it(client: OpenAI, schema: dict[str, Any]) -> None:
    form = {"type": "json_schema", "json_schema": {"name": "thing", "schema": schema}}
    for stream in (False, True):
        text, finish = _reply(client, "Make up an example.", form, stream)
        assert finish == "stop", (schema, text)
        jsonschema.validate(json.loads(text), schema)


@pytest.mark.parametrize(
    "question", ["Describe a cat.", "List three fruits and their colours.", "hi", "What is 2 + 2?"]
)
def test_json_object_replies_parse(client: OpenAI, question: str) -> None:
    for stream in (False, True):
        text, finish = _reply(client, question, {"type": "json_object"}, stream)
        assert finish == "stop" and isinstance(json.loads(text), dict), text
