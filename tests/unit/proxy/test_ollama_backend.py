"""``--backend-kind ollama``: requests and replies held to Ollama's documented API, and the guard over it.

Contract tests build the bodies tether sends and check them against the ``ollama`` package's own
request types, and feed the reply parser lines built from its ``ChatResponse`` objects. The socket
tests run tether in front of a stand-in for that API (tests/support/ollama_standin.py; not Ollama).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from tests.conftest import sse_events
from tests.support.ollama_standin import MODEL, OllamaStandIn, check_chat_request, reply
from tests.support.scripted import READ_FILE
from tests.support.socket_server import serving
from tether.calls import ToolCall
from tether.chat import Message, Usage
from tether.config import ServerConfig
from tether.engine.base import SamplingParams
from tether.engine.remote.chat import ChatEnd, ChatPiece, ChatRequest, ChatSlot, backend_info
from tether.engine.remote.constraint import RemoteConstraint
from tether.engine.remote.ollama_chat import NATIVE_LAYERS, OllamaChatBackend, connect_ollama
from tether.engine.remote.openai_chat import OpenAIChatBackend
from tether.errors import BackendUnavailableError, ConfigError, EngineError
from tether.grammar.formats import get_format
from tether.grammar.formats.base import ToolSpec
from tether.grammar.remote.structural_tag import compile_ollama, name_enum_schema
from tether.grammar.remote.tool_schema import arguments_schema
from tether.grammar.spec import JsonSpec, NameChoiceSpec, OutputSpec, ReplySpec
from tether.grammar.structured import ReplyFormat
from tether.server import build_app

TOOL = ToolSpec.from_openai(READ_FILE)
BACKEND = OllamaChatBackend(
    "http://ollama", backend_info("ollama", "http://ollama", MODEL, 8192, NATIVE_LAYERS)
)


def _compiled(spec: OutputSpec) -> RemoteConstraint:
    """``spec`` as the backend's slot compiles it (what the turn core puts in a request)."""
    return ChatSlot(BACKEND).compile(spec, prompt_len=0)


HISTORY = (
    Message("user", "read a.py"),
    Message("assistant", "", tool_calls=(ToolCall("read_file", {"path": "a.py"}, id="call_1"),)),
    Message("tool", "print(1)", tool_call_id="call_1"),
)


@pytest.mark.parametrize(
    "request_",
    [
        ChatRequest(HISTORY, (TOOL,), params=SamplingParams(seed=3), max_tokens=64),
        ChatRequest(HISTORY[:1], reply=_compiled(ReplySpec(get_format("generic"), (TOOL,), "strict"))),
        ChatRequest(HISTORY[:1], reply=_compiled(NameChoiceSpec(("read_file", "list_dir")))),
        ChatRequest(HISTORY[:1], reply=_compiled(JsonSpec.of_tool(TOOL))),
        ChatRequest(HISTORY[:1], reply_format=ReplyFormat(None)),
        ChatRequest(HISTORY[:1], reply_format=ReplyFormat(TOOL.parameters, "Args")),
    ],
    ids=["native-tools", "generic-reply", "repick", "repair", "json", "schema"],
)
def test_request_bodies_are_ollama_chat_requests(request_: ChatRequest) -> None:
    body = BACKEND.body(request_)
    check_chat_request(body)  # the ollama package's types, unknown fields refused
    assert body["model"] == MODEL and body["stream"] is True and body["options"]["num_ctx"] == 8192
    if request_.reply is not None:
        assert isinstance(request_.reply, RemoteConstraint)
        assert body["format"] == compile_ollama(request_.reply.spec) and "tools" not in body
    if request_.max_tokens is not None:
        assert body["options"]["num_predict"] == 64 and body["options"]["seed"] == 3


def test_a_structured_reply_is_ollamas_format_and_the_openai_response_format() -> None:
    schema = TOOL.parameters
    assert (
        BACKEND.body(ChatRequest(HISTORY[:1], reply_format=ReplyFormat(schema, "Args")))["format"] == schema
    )
    openai = OpenAIChatBackend("http://x", backend_info("openai", "http://x", MODEL, 8192, NATIVE_LAYERS))
    body = openai.body(ChatRequest(HISTORY[:1], reply_format=ReplyFormat(schema, "Args")))
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Args", "schema": schema},
    }
    body = openai.body(ChatRequest(HISTORY[:1], reply_format=ReplyFormat(None)))
    assert body["response_format"] == {"type": "json_object"}


def test_history_is_sent_in_ollamas_shape() -> None:
    messages = BACKEND.body(ChatRequest(HISTORY, (TOOL,)))["messages"]
    assert messages[1]["tool_calls"] == [{"function": {"name": "read_file", "arguments": {"path": "a.py"}}}]
    assert messages[2] == {"role": "tool", "content": "print(1)", "tool_name": "read_file"}  # named by its id
    assert BACKEND.body(ChatRequest(HISTORY[:1], reply_format=ReplyFormat(None)))["format"] == "json"


async def _lines(*chunks: str) -> AsyncIterator[str]:
    for chunk in chunks:
        yield chunk


async def _pieces(*chunks: str) -> list[ChatPiece]:
    return [piece async for piece in BACKEND.pieces(_lines(*chunks))]


async def test_the_parser_reads_ollamas_stream() -> None:
    chunks = reply("Let me ", "look.", calls=[("read_file", {"path": "a.py", "limit": 5})], counts=(30, 9))
    pieces = await _pieces(*(c.model_dump_json(exclude_none=True) for c in chunks))
    text, call, end = pieces[:2], pieces[2], pieces[3]
    assert text == ["Let me ", "look."] and len(pieces) == 4
    assert isinstance(call, ToolCall) and (call.name, dict(call.arguments)) == (
        "read_file",
        {"path": "a.py", "limit": 5},
    )
    assert call.id.startswith("call_") and not call.repairs  # Ollama sends no id: tether gives its own
    assert end == ChatEnd("stop", Usage(30, 9, 30))
    cut = await _pieces(
        *(c.model_dump_json(exclude_none=True) for c in reply("a", reason="length", counts=None))
    )
    assert cut == ["a", ChatEnd("length", None)]


async def test_an_error_line_and_a_cut_stream_are_errors() -> None:
    first = reply("partial")[0].model_dump_json(exclude_none=True)
    with pytest.raises(EngineError, match="model crashed"):
        await _pieces(first, json.dumps({"error": "model crashed"}))
    with pytest.raises(BackendUnavailableError, match="ended before"):
        await _pieces(first)


@contextmanager
def front_of(standin: OllamaStandIn, **config: Any) -> Iterator[str]:
    with serving(standin.app) as back:
        cfg = ServerConfig(**{"backend": back, "backend_kind": "ollama", "preset": "full", **config})
        with serving(build_app(cfg)) as front:
            yield front


def ask(base: str, *, messages: list[dict[str, Any]] | None = None, **extra: Any) -> httpx.Response:
    body = {"model": MODEL, "messages": messages or [{"role": "user", "content": "show me a.py"}], **extra}
    return httpx.post(f"{base}/v1/chat/completions", json=body, timeout=30)


def test_tool_calls_are_guarded_and_repaired_under_format() -> None:
    standin = OllamaStandIn(
        [
            reply(calls=[("Read", {"path": "b.py"}), ("read_file", {"limit": 5})], counts=(42, 7)),
            reply('{"path": ', '"a.py", "limit": 5}', counts=(55, 6)),  # the repair, under the arguments schema
        ]
    )
    with front_of(standin) as front:
        r = ask(front, tools=[READ_FILE]).json()
    calls = r["choices"][0]["message"]["tool_calls"]
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [
        {"path": "b.py"},
        {"path": "a.py", "limit": 5},
    ]
    assert {c["function"]["name"] for c in calls} == {"read_file"} and calls[0]["id"] != calls[1]["id"]
    assert {"name_resolved", "args_repaired"} <= {i["kind"] for i in r["tether"]["interventions"]}
    first, repair = standin.requests
    assert [t["function"]["name"] for t in first["tools"]] == ["read_file"] and "format" not in first
    assert repair["format"] == arguments_schema(TOOL.parameters, "strict") and "tools" not in repair
    assert repair["options"]["temperature"] == 0
    # As Ollama counted: the larger prompt (the context the reply held, not the sum), both completions.
    assert r["usage"]["prompt_tokens"] == 55 and r["usage"]["completion_tokens"] == 13


def test_without_tool_support_the_tools_are_folded_and_format_holds_the_reply() -> None:
    written = '{"tool_calls": [{"name": "frobnicate", "arguments": {"path": "a.py"}}]}'
    standin = OllamaStandIn([reply(written[:20], written[20:]), reply('"read_file"')], tools=False)
    with front_of(standin) as front:
        r = ask(front, tools=[READ_FILE]).json()
        card = httpx.get(f"{front}/v1/models", timeout=10).json()["data"][0]["tether"]
    (call,) = r["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "read_file" and "repick" in {
        i["kind"] for i in r["tether"]["interventions"]
    }
    first, repick = standin.requests
    assert "tools" not in first and "read_file" in first["messages"][0]["content"]  # the generic tool block
    assert first["format"] == compile_ollama(ReplySpec(get_format("generic"), (TOOL,), "names"))
    assert repick["format"] == name_enum_schema(["read_file"])
    assert card["tool_format"] == "generic" and card["layers"][:2] == ["layer0_names", "layer0_strict"]


def test_text_streams_and_the_window_goes_out_as_num_ctx() -> None:
    standin = OllamaStandIn([reply("Hel", "lo ", "there.")], context_length=100_000)
    with front_of(standin, n_ctx=6000) as front:
        events = sse_events(ask(front, stream=True).text)
    deltas = [e["choices"][0]["delta"].get("content") for e in events[:-1] if e["choices"]]
    assert [d for d in deltas if d] == ["Hel", "lo ", "there."]
    assert events[-2]["tether"]["layers"] == list(NATIVE_LAYERS)
    (sent,) = standin.requests
    assert sent["options"]["num_ctx"] == 6000  # the model's 100k, capped at --ctx


def test_compaction_fits_the_conversation_to_the_estimated_window() -> None:
    turns: list[dict[str, Any]] = []
    for i in range(12):
        turns += [
            {"role": "user", "content": f"question {i}: " + "lorem ipsum " * 40},
            {"role": "assistant", "content": f"answer {i}: " + "dolor sit amet " * 30},
        ]
    turns.append({"role": "user", "content": "and now the last question"})
    standin = OllamaStandIn([reply("fine")])
    with front_of(standin, n_ctx=1024) as front:
        refused = ask(front, messages=turns)
    with front_of(standin, n_ctx=1024, compaction=True) as front:
        compacted = ask(front, messages=turns)
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "context_length_exceeded"
    assert compacted.status_code == 200 and compacted.json()["choices"][0]["message"]["content"] == "fine"
    (sent,) = standin.requests
    assert (
        len(sent["messages"]) < len(turns) and sent["messages"][-1]["content"] == "and now the last question"
    )


def test_the_model_is_chosen_by_name_when_the_server_has_several() -> None:
    standin = OllamaStandIn([reply("hi")], models=["llama3.2:latest", MODEL])
    with serving(standin.app) as url:
        with pytest.raises(ConfigError, match="choose one with --model"):
            connect_ollama(url, model=None, n_ctx=4096)
        assert connect_ollama(url, model="llama3.2", n_ctx=4096).model == "llama3.2"
        with pytest.raises(ConfigError, match="does not serve"):
            connect_ollama(url, model="mistral", n_ctx=4096)
