"""The OpenAI Responses API on a real socket, driven by the official ``openai`` SDK, over a scripted engine.

Function calls come back as ``function_call`` items; a follow-up with ``previous_response_id``
and a ``function_call_output`` continues the stored conversation (instructions not carried
over); streams follow OpenAI's event order and satisfy the SDK's own stream accumulator; the
store is bounded, least recently used out first; bad input is a 400 or 404 in OpenAI's shape.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import closing, contextmanager
from typing import Any

import httpx
import openai
import pytest

from tests.support.engines import FaultyEngine, SlowEngine
from tests.support.scripted import WEATHER_CALL, scripted_app, weather_round_trip
from tests.support.socket_server import serving, wait_for
from tether.chat import Message
from tether.engine.scripted import ScriptedEngine
from tether.errors import ResponseNotFoundError
from tether.proxy.responses_store import ResponseStore, StoredResponse

MODEL = "scripted"
WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather forecast for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
ASK = "What is the weather in Paris?"


@contextmanager
def server(engine: ScriptedEngine, **config: Any) -> Iterator[tuple[openai.OpenAI, str]]:
    with (
        serving(scripted_app(engine, **config)) as base,
        closing(openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=30)) as client,
    ):
        yield client, base


def test_a_function_call_then_a_follow_up_by_previous_response_id() -> None:
    engine = ScriptedEngine([weather_round_trip])
    with server(engine) as (client, _):
        first = client.responses.create(model=MODEL, input=ASK, tools=[WEATHER], instructions="Be brief.")
        (call,) = first.output
        assert call.type == "function_call" and call.name == "get_weather" and call.status == "completed"
        assert json.loads(call.arguments) == {"city": "Paris"} and call.call_id.startswith("call_")
        output = {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 24 C"}
        second = client.responses.create(
            model=MODEL, previous_response_id=first.id, input=[output], tools=[WEATHER]
        )
    assert first.id.startswith("resp_") and first.status == "completed" and first.usage is not None
    assert first.usage.output_tokens == len(WEATHER_CALL) and first.instructions == "Be brief."
    assert second.output_text == "Sunny in Paris." and second.previous_response_id == first.id
    assert "Be brief." in engine.prompts[0]
    prompt = engine.prompts[-1]
    assert ASK in prompt and '"city": "Paris"' in prompt and "Result of get_weather:\nSunny, 24 C" in prompt
    assert "Be brief." not in prompt  # instructions are not carried over


def test_input_items_carry_a_whole_conversation() -> None:
    engine = ScriptedEngine([weather_round_trip])
    items: Any = [
        {"role": "developer", "content": "Answer in one line."},
        {"role": "user", "content": [{"type": "input_text", "text": ASK}]},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {
            "type": "function_call",
            "call_id": "call_abc",
            "name": "get_weather",
            "arguments": '{"city": "Paris"}',
        },
        {"type": "function_call_output", "call_id": "call_abc", "output": "Rain"},
    ]
    with server(engine) as (client, _):
        reply = client.responses.create(model=MODEL, input=items, tools=[WEATHER])
    assert reply.output_text == "Sunny in Paris."
    assert "<|im_start|>system\nAnswer in one line." in engine.prompts[0]
    assert "Result of get_weather:\nRain" in engine.prompts[0]


def test_streamed_function_call_follows_openais_event_order() -> None:
    with server(ScriptedEngine([WEATHER_CALL])) as (client, _):
        events = list(client.responses.create(model=MODEL, input=ASK, tools=[WEATHER], stream=True))
    assert [e.type for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    created, _, added, delta, done, item_done, completed = events
    assert created.response.status == "in_progress" and created.response.output == []
    assert (
        added.item.type == "function_call"
        and added.item.arguments == ""
        and added.item.status == "in_progress"
    )
    assert delta.delta == done.arguments == item_done.item.arguments and json.loads(done.arguments) == {
        "city": "Paris"
    }
    assert {added.item.id, delta.item_id, done.item_id, item_done.item.id} == {added.item.id}
    final = completed.response
    assert final.status == "completed" and final.id == created.response.id
    assert [o.call_id for o in final.output] == [item_done.item.call_id]


def test_streamed_text_satisfies_the_sdks_accumulator_and_is_stored() -> None:
    text = "Streaming responses works."
    with server(ScriptedEngine([text])) as (client, _):
        with client.responses.stream(model=MODEL, input="hi") as stream:
            kinds = [e.type for e in stream]
            final = stream.get_final_response()
        stored = client.responses.retrieve(final.id)
    deltas = kinds.count("response.output_text.delta")
    assert deltas > 5 and kinds[2:4] == ["response.output_item.added", "response.content_part.added"]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert final.output_text == text and stored.output_text == text and stored.id == final.id


def test_running_out_of_tokens_is_incomplete() -> None:
    with server(ScriptedEngine(["A long answer that goes on."])) as (client, _):
        reply = client.responses.create(model=MODEL, input="hi", max_output_tokens=4)
        kinds = [
            e.type for e in client.responses.create(model=MODEL, input="hi", max_output_tokens=4, stream=True)
        ]
    assert reply.status == "incomplete" and reply.incomplete_details is not None
    assert reply.incomplete_details.reason == "max_output_tokens" and reply.output_text == "A lo"
    assert kinds[-1] == "response.incomplete"


def test_retrieve_delete_and_unknown_ids() -> None:
    with server(ScriptedEngine(["ok"])) as (client, _):
        made = client.responses.create(model=MODEL, input="hi")
        assert client.responses.retrieve(made.id).output_text == "ok"
        client.responses.delete(made.id)
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(made.id)
        with pytest.raises(openai.NotFoundError) as caught:
            client.responses.create(model=MODEL, input="hi", previous_response_id="resp_unknown")
        unstored = client.responses.create(model=MODEL, input="hi", store=False)
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(unstored.id)
    body: Any = caught.value.body
    assert body["code"] == "response_not_found" and body["param"] == "previous_response_id"
    assert "resp_unknown" in body["message"]


def test_the_store_is_bounded_least_recently_used_first() -> None:
    with server(ScriptedEngine(["ok"]), responses_store=2) as (client, _):
        a, b = (client.responses.create(model=MODEL, input="hi") for _ in range(2))
        client.responses.retrieve(a.id)  # a is now the most recent
        client.responses.create(model=MODEL, input="hi")
        assert client.responses.retrieve(a.id).id == a.id
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(b.id)
    store = ResponseStore(0)
    store.put("resp_x", StoredResponse({}, (Message("user", "hi"),)))
    with pytest.raises(ResponseNotFoundError):
        store.get("resp_x")


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"tools": [{"type": "web_search"}]}, "tools[0]"),
        ({"tools": [WEATHER], "tool_choice": {"type": "allowed_tools", "tools": []}}, "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice"),
        (
            {
                "text": {
                    "format": {
                        "type": "json_schema",
                        "name": "x",
                        "schema": {"properties": {"a": {"not": {}}}},
                    }
                }
            },
            "text.format.schema",
        ),
        ({"background": True}, "background"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input[0].content[0].type",
        ),
        ({"input": [{"type": "web_search_call", "id": "x"}]}, "input[0].type"),
        ({"input": [{"type": "function_call", "call_id": "c"}]}, "input[0].name"),
    ],
)
def test_bad_requests_are_400s_naming_the_field(extra: dict[str, Any], param: str) -> None:
    with server(ScriptedEngine()) as (client, base):
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(**{"model": MODEL, "input": "hi", **extra})
        raw = httpx.post(f"{base}/v1/responses", json={"model": MODEL, "input": "hi", **extra})
    body: Any = caught.value.body
    assert body["param"] == param and body["type"] == "invalid_request_error", body
    assert raw.status_code == 400 and raw.json()["error"]["param"] == param


def test_an_output_that_answers_no_call_is_answered() -> None:
    """Like every protocol's history (tether.turns.history): shown as text that says so, not refused."""
    engine = ScriptedEngine()
    with server(engine) as (client, _):
        stray = [{"type": "function_call_output", "call_id": "call_nobody", "output": "x"}]
        assert client.responses.create(model=MODEL, input=stray).status == "completed"
    assert "answers no call made here" in engine.prompts[-1]


def test_a_fault_mid_stream_ends_it_with_an_error_event() -> None:
    with server(FaultyEngine(["x" * 40], fail_after=5)) as (client, _):
        events = list(client.responses.create(model=MODEL, input="hi", stream=True))
        after = client.responses.create(model=MODEL, input="hi")
    last = events[-1]
    assert last.type == "error" and "engine failed" in last.message and last.code == "engine_error"
    assert "response.completed" not in [e.type for e in events]
    assert after.output_text == "x" * 40  # the server stays up


def test_hanging_up_a_stream_frees_the_slot() -> None:
    engine = SlowEngine(delay=0.02)
    with server(engine) as (client, base):
        body = {"model": MODEL, "input": "hi", "stream": True}
        with httpx.stream("POST", f"{base}/v1/responses", json=body) as r:
            lines = [line for _, line in zip(range(18), r.iter_lines(), strict=False)]
        assert any("response.output_text.delta" in line for line in lines)
        snap = wait_for(base, lambda s: s["busy_slots"] == 0 and s["cancelled"] >= 1, timeout=2)
        assert snap["queue_depth"] == 0 and engine.after_cancel <= 1
        assert client.responses.create(model=MODEL, input="hi", max_output_tokens=2).output_text == "xx"
