"""tether's vLLM engine over a real socket, against a stand-in that speaks vLLM's wire format.

The stand-in (tests/support/fake_vllm.py) serves vLLM's routes and streams in vLLM's chunk shape
(test_vllm_wire.py holds that shape against vLLM's own serializer); the real-server checks are
tests/backends/test_vllm.py. Here: what ``connect_vllm`` reads, the stream through the token
loop (EOS by vLLM's verdict, the usage chunk's cached tokens), a cancel closing the HTTP stream,
errors, prompts rendered by vLLM when it keeps its template, and a whole tether request.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.fake_vllm import EOS, MODEL, FakeVllm, Step, reply_steps
from tests.support.socket_server import serving
from tether.calls import ToolCall
from tether.chat import Message
from tether.config import ServerConfig
from tether.engine.base import Done, SamplingParams, Token
from tether.engine.prompt import prompt_ids
from tether.engine.remote.vllm import VllmEngine, connect_vllm
from tether.engine.scheduler import Scheduler
from tether.engine.template import ChatTemplate
from tether.errors import ConfigError, EngineError, InvalidRequestError
from tether.grammar.formats import get_format
from tether.grammar.formats.base import ToolSpec
from tether.grammar.spec import NameChoiceSpec
from tether.proxy.app import create_app

WEATHER = ToolSpec(
    "get_weather",
    "Weather for a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


@pytest.fixture
def fake() -> FakeVllm:
    return FakeVllm()


@pytest.fixture
def url(fake: FakeVllm) -> Iterator[str]:
    with serving(fake.app()) as base:
        yield base


def _connect(url: str, slots: int = 1) -> list[VllmEngine]:
    return connect_vllm(url, slots=slots, timeout_s=10)


def _run(engine: VllmEngine, prompt: list[int], **kw: Any) -> list[Token | Done]:
    return list(engine.generate(prompt, SamplingParams(max_tokens=kw.pop("max_tokens", 32)), **kw))


def test_connect_reads_the_model_and_sizes_its_vocabulary(fake: FakeVllm, url: str) -> None:
    engines = _connect(url, slots=3)
    info = engines[0].info
    assert len(engines) == 3 and all(e.info is info for e in engines)
    assert (info.model_id, info.n_ctx, info.path) == (MODEL, 2048, "/models/smollm2")
    assert info.n_vocab == fake.vocab  # found by probing, no endpoint says it
    assert len(fake.sent("/v1/completions")) <= 25
    assert info.chat_template == fake.template and info.metadata["backend.renders"] == "tether"
    assert info.eos_token_ids == {EOS} and info.bos_token == "<|im_start|>"
    assert info.backend == "vllm" and "layer0_decision" not in info.layers  # logits stay on the server
    assert "prefix_reuse" in info.layers and "layer0_decision" not in info.layers
    assert engines[0].cached_prefix_len([1, 2, 3]) == 0  # one global cache: no slot is preferred
    for engine in engines:
        engine.close()


def test_a_server_that_is_not_vllm_is_refused_at_start() -> None:
    with serving(FakeVllm(owned_by="someone").app()) as base, pytest.raises(ConfigError, match="vLLM"):
        _connect(base)
    with pytest.raises(ConfigError, match="not reachable"):
        _connect("http://127.0.0.1:9")


def test_a_reply_streams_and_ends_where_vllm_says(fake: FakeVllm, url: str) -> None:
    fake.steps = [Step((72, 105), "Hi"), Step((33,), "!"), Step((7, 9), "", "stop", stop_reason=9)]
    engine = _connect(url)[0]
    events = _run(engine, [5, 6, 7, 8], constraint=engine.compile(NameChoiceSpec(("a", "b")), prompt_len=4))
    tokens = [e for e in events if isinstance(e, Token)]
    assert [t.id for t in tokens] == [72, 105, 33, 7]  # 9, the stop id, is not part of the reply
    assert "".join(t.text for t in tokens) == "Hi!"
    assert events[-1] == Done("stop", 4, 4 - 3, 4)  # 3 prompt tokens came from vLLM's prefix cache
    body = fake.sent("/v1/completions")[-1]
    assert body["prompt"] == [5, 6, 7, 8] and body["stream"] is True and body["return_token_ids"] is True
    assert body["structured_outputs"] == {"choice": ["a", "b"]}
    engine.close()


def test_the_budget_and_a_length_finish(fake: FakeVllm, url: str) -> None:
    fake.steps = reply_steps("abcdef", finish="length")
    fake.cached = None  # vLLM without --enable-prompt-tokens-details: every prompt token counts
    engine = _connect(url)[0]
    events = _run(engine, [1, 2], max_tokens=6)
    assert "".join(e.text for e in events if isinstance(e, Token)) == "abcdef"
    assert events[-1] == Done("length", 2, 2, 6)
    engine.close()


def test_a_cancel_closes_the_stream_and_the_server_sees_it(fake: FakeVllm, url: str) -> None:
    fake.steps = reply_steps("x" * 200)
    fake.delay_s = 0.02
    engine = _connect(url)[0]
    cancel = threading.Event()
    got: list[Token | Done] = []
    for event in engine.generate([1], SamplingParams(max_tokens=500), cancel=cancel):
        got.append(event)
        if len(got) == 3:
            cancel.set()
    assert isinstance(got[-1], Done) and got[-1].finish_reason == "cancelled" and len(got) == 4
    assert fake.hung_up.wait(5), "the HTTP stream stayed open after the cancel"
    fake.steps, fake.delay_s = reply_steps("ok"), 0.0
    assert _run(engine, [1])[-1] == Done("stop", 1, 0, 2)  # the slot is free again
    engine.close()


def test_errors_from_the_server(fake: FakeVllm, url: str) -> None:
    engine = _connect(url)[0]
    fake.fail_after = 2
    with pytest.raises(EngineError, match="generation failed"):
        _run(engine, [1])
    with pytest.raises(InvalidRequestError, match="logprobs"):
        list(engine.generate([1], SamplingParams(logprobs=2)))
    with pytest.raises(EngineError, match="logits processors"):
        list(engine.generate([1], SamplingParams(), logits_processor=lambda _ids, logits: logits))
    engine.close()


def test_without_its_template_vllm_renders_the_turns_tether_decides(fake: FakeVllm) -> None:
    fake.template = None  # vLLM started without --enable-tokenizer-info-endpoint
    with serving(fake.app()) as base:
        engine = _connect(base)[0]
        assert engine.info.chat_template is None and engine.info.metadata["backend.renders"] == "vllm"
        assert engine.chat_template_tools is False
        messages = (Message("user", "Weather in Paris?"),)
        ids = prompt_ids(engine, ChatTemplate(None), get_format("generic"), messages, (WEATHER,))
        rendered = fake.sent("/tokenize")[-1]
        assert rendered["add_generation_prompt"] is True and "tools" not in rendered
        system = rendered["messages"][0]
        assert system["role"] == "system" and "get_weather" in system["content"]  # folded by the format
        assert "".join(chr(i) for i in ids).endswith("user: Weather in Paris?\nassistant: ")
        with pytest.raises(InvalidRequestError, match="refused the conversation"):
            prompt_ids(engine, ChatTemplate(None), get_format("generic"), (Message("bogus", "x"),), ())  # type: ignore[arg-type]
        engine.close()


def test_a_template_that_reads_tools_gets_them_and_past_calls_as_json_text(fake: FakeVllm) -> None:
    fake.template, fake.template_reads_tools = None, True
    with serving(fake.app()) as base:
        engine = _connect(base)[0]
        assert engine.chat_template_tools is True  # probed: the same turn renders longer with a tool
        call = ToolCall(name="get_weather", arguments={"city": "Paris"}, id="call_1")
        messages = (
            Message("user", "Weather in Paris?"),
            Message("assistant", "", tool_calls=(call,)),
            Message("tool", "sunny", tool_call_id="call_1"),
        )
        prompt_ids(engine, ChatTemplate(None), get_format("hermes"), messages, (WEATHER,))
        rendered = fake.sent("/tokenize")[-1]
        assert rendered["tools"] == [WEATHER.to_openai()]
        sent_call = rendered["messages"][1]["tool_calls"][0]
        assert json.loads(sent_call["function"]["arguments"]) == {"city": "Paris"}
        assert isinstance(sent_call["function"]["arguments"], str)
        engine.close()


def test_a_tether_request_with_layer0_as_vllms_json_schema(fake: FakeVllm, url: str) -> None:
    """The whole path: the generic format's whole-reply schema goes out, the call comes back."""
    reply = '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}'
    fake.steps = reply_steps(reply)
    engines = _connect(url, slots=2)
    app = create_app(ServerConfig(slots=2, preset="names"), Scheduler(list(engines)))
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [WEATHER.to_openai()],
        "tool_choice": "required",
        "logit_bias": {"50000": -5},
    }
    with serving(app) as tether:
        r = httpx.post(f"{tether}/v1/chat/completions", json=body, timeout=30)
        assert r.status_code == 200, r.text
        message = r.json()["choices"][0]["message"]
        assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_weather"]
        assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
        refused = httpx.post(f"{tether}/v1/chat/completions", json={**body, "logit_bias": {"50257": 1}})
        assert refused.status_code == 400 and "logit_bias" in refused.text  # past the probed vocabulary
    sent = fake.sent("/v1/completions")[-1]
    schema = sent["structured_outputs"]["json"]
    assert schema["properties"]["tool_calls"]["minItems"] == 1  # required: a call, no text answer
    assert sent["logit_bias"] == {"50000": -5}
    prompt = "".join(chr(t) for t in sent["prompt"])  # rendered by tether with the served template
    assert "Weather in Paris?" in prompt and "get_weather" in prompt
    for engine in engines:
        engine.close()
