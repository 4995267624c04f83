"""The Ollama and Responses APIs over the bundled model, on a real socket, through the official clients.

The request is the one the selection tests use on chat completions (a triangle's area with three
tools offered, greedy, the ``strict`` preset), so both protocols must get the same fitting call
back from the 135M model, in their own shape.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import ollama
import openai
import pytest

from tests.support.socket_server import serving
from tether.config import ServerConfig
from tether.engine.llama_cpp import LlamaCppEngine
from tether.engine.scheduler import Scheduler
from tether.guardrails.presets import PRESETS
from tether.proxy.app import create_app

MODEL = "smollm2-135m-instruct"
ASK = "Find the area of a triangle with a base of 10 units and height of 5 units."


def schema(**props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(props)}


TOOLS = [
    ("get_weather", "Current weather for a city", schema(city={"type": "string"})),
    (
        "calculate_triangle_area",
        "Calculate the area of a triangle given its base and height.",
        schema(base={"type": "integer"}, height={"type": "integer"}),
    ),
    ("get_time", "Current time in a time zone", schema(tz={"type": "string"})),
]


@pytest.fixture
def base(smollm: LlamaCppEngine) -> Iterator[str]:
    # The strict preset as the server's own (the Ollama API has no per-request tether field in its
    # client), with its own layer-0 mode: the same guard as "tether": {"preset": "strict"}.
    config = ServerConfig(preset="strict", constrain=PRESETS["strict"].constrain)
    with serving(create_app(config, Scheduler([smollm]))) as url:
        yield url


def test_ollama_client_gets_the_fitting_call_as_an_object(base: str) -> None:
    tools = [
        {"type": "function", "function": {"name": n, "description": d, "parameters": p}} for n, d, p in TOOLS
    ]
    with ollama.Client(host=base, timeout=300) as client:
        reply = client.chat(
            model=MODEL,
            messages=[{"role": "user", "content": ASK}],
            tools=tools,
            options={"temperature": 0, "num_predict": 160},
        )
    calls = reply.message.tool_calls or []
    assert calls, reply
    assert calls[0].function.name == "calculate_triangle_area"
    assert dict(calls[0].function.arguments) == {"base": 10, "height": 5}


def test_responses_sdk_gets_the_fitting_call_and_continues(base: str) -> None:
    tools: Any = [{"type": "function", "name": n, "description": d, "parameters": p} for n, d, p in TOOLS]
    with openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=300) as client:
        first = client.responses.create(
            model=MODEL, input=ASK, tools=tools, temperature=0, max_output_tokens=160
        )
        calls = [item for item in first.output if item.type == "function_call"]
        assert calls, first
        assert calls[0].name == "calculate_triangle_area"
        assert json.loads(calls[0].arguments) == {"base": 10, "height": 5}
        follow_up = client.responses.create(
            model=MODEL,
            previous_response_id=first.id,
            input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": "25"}],
            tools=tools,
            temperature=0,
            max_output_tokens=160,
        )
        assert follow_up.status in ("completed", "incomplete") and follow_up.output
