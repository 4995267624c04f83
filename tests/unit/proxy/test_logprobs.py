"""``logprobs`` / ``top_logprobs`` on ``/v1/chat/completions`` and ``logprobs`` on ``/v1/completions``.

The scripted engine's logits are fixed (10 for its scripted byte, 0 for the 256 other ids), so
every value is known: the sampled byte has ``10 - log(e^10 + 256)`` and each other unmasked id
``-log(e^10 + 256)``, ties listed by id. The official ``openai`` SDK parses the answers on a real
socket; the layer-0 mask is shown to keep masked tokens out of ``top_logprobs``; only content
tokens are reported (not a tool call, its markup, or a stop string); bad values are 400s.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import closing, contextmanager
from typing import Any

import openai
import pytest

from tests.conftest import sse_events
from tests.support.scripted import WEATHER_CALL, scripted_app
from tests.support.socket_server import serving
from tether.calls import ToolCall
from tether.engine.scripted import ScriptedEngine
from tether.grammar.formats import get_format

MODEL = "scripted"
CHOSEN = 10 - math.log(math.exp(10) + 256)  # the scripted byte's log-probability
OTHER = -math.log(math.exp(10) + 256)  # any other unmasked id's
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def ask(**extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **extra}


@contextmanager
def sdk(replies: list[str]) -> Iterator[openai.OpenAI]:
    with (
        serving(scripted_app(ScriptedEngine(replies))) as base,
        closing(openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=30)) as client,
    ):
        yield client


def test_chat_logprobs_through_the_sdk() -> None:
    with sdk(["Hé!"]) as client:
        reply = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], logprobs=True, top_logprobs=2
        )
        choice = reply.choices[0]
        assert choice.message.content == "Hé!" and choice.logprobs is not None
        content = choice.logprobs.content or []
        # "é" is two byte tokens: each has its exact bytes; together they spell the content.
        assert [t.bytes for t in content] == [[72], [0xC3], [0xA9], [33]]
        assert bytes(b for t in content for b in t.bytes or ()).decode() == "Hé!"
        for t in content:
            assert t.logprob == pytest.approx(CHOSEN)
            top = t.top_logprobs
            assert [x.bytes for x in top] == [t.bytes, [0]]  # then the lowest id, all others tied
            assert top[0].logprob == pytest.approx(CHOSEN) and top[1].logprob == pytest.approx(OTHER)
        plain = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
        assert plain.choices[0].logprobs is None


def test_chat_logprobs_stream_with_each_delta_through_the_sdk() -> None:
    with sdk(["Hi there"]) as client:
        stream = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], logprobs=True, stream=True
        )
        text, spelled, empty = "", "", 0
        for chunk in stream:
            choice = chunk.choices[0]
            delta = choice.delta.content or ""
            if not delta:
                assert choice.logprobs is None  # the role chunk and the finish chunk
                empty += 1
                continue
            assert choice.logprobs is not None and choice.logprobs.content is not None
            assert "".join(t.token for t in choice.logprobs.content) == delta
            assert all(
                t.top_logprobs == [] and t.logprob == pytest.approx(CHOSEN) for t in choice.logprobs.content
            )
            text += delta
            spelled += "".join(t.token for t in choice.logprobs.content)
        assert text == spelled == "Hi there" and empty == 2


def test_completions_legacy_logprobs_through_the_sdk() -> None:
    with sdk(["abc def"]) as client:
        reply = client.completions.create(model=MODEL, prompt="x", logprobs=1, max_tokens=5)
        lp = reply.choices[0].logprobs
        assert reply.choices[0].text == "abc d" and lp is not None
        assert lp.tokens == list("abc d") and lp.text_offset == [0, 1, 2, 3, 4]
        assert lp.token_logprobs == pytest.approx([CHOSEN] * 5)
        assert lp.top_logprobs == [{t: pytest.approx(CHOSEN)} for t in "abc d"]
        offsets: list[int] = []
        tops: list[dict[str, float]] = []
        for chunk in client.completions.create(model=MODEL, prompt="x", logprobs=2, stream=True):
            clp = chunk.choices[0].logprobs
            if chunk.choices[0].text:
                assert clp is not None and clp.tokens == [chunk.choices[0].text]
                offsets += clp.text_offset or []
                tops += clp.top_logprobs or []
        assert offsets == list(range(7))  # text_offset runs on across the chunks
        assert [list(t) for t in tops] == [[c, "\x00"] for c in "abc def"]  # top 2; the sampled one leads


async def test_a_masked_token_never_appears_in_top_logprobs(scripted) -> None:
    reply = '{"response": "Sun\\nny."}'
    client, _ = scripted([reply])
    constrained = await client.post(
        "/v1/chat/completions", json=ask(tools=TOOLS, logprobs=True, top_logprobs=20)
    )
    free = await client.post("/v1/chat/completions", json=ask(logprobs=True, top_logprobs=20))
    assert constrained.json()["choices"][0]["message"]["content"] == "Sun\nny."
    entries = constrained.json()["choices"][0]["logprobs"]["content"]
    assert "".join(e["token"] for e in entries) == "Sun\\nny."  # the JSON around the answer is not content
    for e in entries:
        top = [t["token"] for t in e["top_logprobs"]]
        assert top[0] == e["token"]
        # Layer 0 holds the answer to a JSON string: raw control characters are masked, never listed.
        assert all(b >= 0x20 for t in e["top_logprobs"] for b in t["bytes"]), top
        assert [t["logprob"] for t in e["top_logprobs"]] == sorted(
            (t["logprob"] for t in e["top_logprobs"]), reverse=True
        )
    after_backslash = entries["".join(e["token"] for e in entries).index("\\") + 1]
    assert set("".join(t["token"] for t in after_backslash["top_logprobs"])) <= set('"\\/bfnrtu')
    assert sum(math.exp(t["logprob"]) for t in after_backslash["top_logprobs"]) == pytest.approx(1.0)
    # Unconstrained, the same bytes list the control characters as ties (lowest id first).
    first = free.json()["choices"][0]["logprobs"]["content"][0]
    assert first["token"] == "{" and first["top_logprobs"][1]["bytes"] == [0]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_tool_call_reply_reports_no_content_logprobs(scripted, stream: bool) -> None:
    client, _ = scripted([WEATHER_CALL])
    r = await client.post("/v1/chat/completions", json=ask(tools=TOOLS, logprobs=True, stream=stream))
    if stream:
        chunks = [e for e in sse_events(r.text)[:-1] if e["choices"]]
        calls = [c for c in chunks if c["choices"][0]["delta"].get("tool_calls")]
        assert len(calls) == 1 and calls[0]["choices"][0]["logprobs"] is None
        assert all(c["choices"][0]["logprobs"] is None for c in chunks)
    else:
        choice = r.json()["choices"][0]
        assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
        assert choice["logprobs"] == {"content": [], "refusal": None}


@pytest.mark.parametrize("stream", [False, True])
async def test_only_the_prose_around_a_call_is_reported(scripted, stream: bool) -> None:
    reply = get_format("hermes").render_calls("Let me check.", [ToolCall("get_weather", {"city": "Paris"})])
    client, _ = scripted([reply + "\nDone."], tool_format="hermes")
    r = await client.post("/v1/chat/completions", json=ask(tools=TOOLS, logprobs=True, stream=stream))
    if stream:
        chunks = [e["choices"][0] for e in sse_events(r.text)[:-1] if e["choices"]]
        content = "".join(c["delta"].get("content") or "" for c in chunks)
        entries = [t for c in chunks if c["logprobs"] for t in c["logprobs"]["content"]]
    else:
        choice = r.json()["choices"][0]
        assert choice["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
        content, entries = choice["message"]["content"], choice["logprobs"]["content"]
    assert content == "Let me check.\nDone."
    assert "".join(e["token"] for e in entries) == content  # no token of <tool_call>…</tool_call>


async def test_a_stop_string_is_not_reported(scripted) -> None:
    client, _ = scripted(["Hello END more"])
    chat = (await client.post("/v1/chat/completions", json=ask(stop=["END"], logprobs=True))).json()
    assert "".join(e["token"] for e in chat["choices"][0]["logprobs"]["content"]) == "Hello "
    body = {"model": MODEL, "prompt": "x", "stop": "END", "logprobs": 0, "max_tokens": 40}
    legacy = (await client.post("/v1/completions", json=body)).json()["choices"][0]
    assert legacy["text"] == "Hello " and legacy["logprobs"]["tokens"] == list("Hello ")
    assert legacy["logprobs"]["top_logprobs"][0] == {"H": pytest.approx(CHOSEN)}


@pytest.mark.parametrize(
    ("path", "extra", "param", "says"),
    [
        ("/v1/chat/completions", {"top_logprobs": 2}, "top_logprobs", "logprobs: true"),
        ("/v1/chat/completions", {"logprobs": False, "top_logprobs": 0}, "top_logprobs", "logprobs: true"),
        ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 21}, "top_logprobs", "20"),
        ("/v1/chat/completions", {"logprobs": True, "top_logprobs": -1}, "top_logprobs", "0"),
        ("/v1/chat/completions", {"logprobs": "yes please"}, "logprobs", "bool"),
        ("/v1/completions", {"logprobs": 21}, "logprobs", "20"),
        ("/v1/completions", {"logprobs": -1}, "logprobs", "0"),
        ("/v1/completions", {"logprobs": 2, "echo": True}, "echo", "echo"),
    ],
)
async def test_bad_logprobs_requests_are_openai_400s(
    scripted, path: str, extra: dict[str, Any], param: str, says: str
) -> None:
    client, engines = scripted(["never"])
    body = ask(**extra) if path.endswith("chat/completions") else {"model": MODEL, "prompt": "x", **extra}
    r = await client.post(path, json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param, err
    assert says.lower() in err["message"].lower(), err
    assert engines[0].prompts == []  # refused before anything was generated
