"""vLLM's wire format as tether writes and reads it: request bodies and the completion stream.

The pure tests run everywhere. ``test_vllm_*`` hand every request the engine sends (recorded by
the stand-in of tests/support/fake_vllm.py) to vLLM 0.32's own request models, unknown fields
counted (vLLM would ignore them), and read streams written by vLLM's own completions server code
(``OpenAIServingCompletion.completion_stream_generator`` fed with engine outputs shaped as
vLLM's output processor makes them: the stop id in the last chunk's ids, not in its text), in
a child process of the vLLM install (``TETHER_VLLM_PYTHON``, default the ``vllm-venv`` beside
this checkout that scripts/check_vllm.sh makes); skipped without one.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_vllm import FakeVllm, Step, chunk, usage_chunk
from tests.support.socket_server import serving
from tether.calls import ToolCall
from tether.chat import Message
from tether.engine.base import SamplingParams
from tether.engine.prompt import prompt_ids
from tether.engine.remote.vllm import connect_vllm
from tether.engine.remote.vllm_wire import (
    STOPPED,
    StreamEnd,
    chat_template_of,
    completion_body,
    constraint_fields,
    evaluated_tokens,
    stream_pieces,
    token_text,
    wire_turns,
)
from tether.engine.template import ChatTemplate
from tether.errors import BackendUnavailableError
from tether.grammar.formats import get_format
from tether.grammar.formats.base import ToolSpec
from tether.grammar.spec import JsonSpec, NameChoiceSpec, ReplySpec

TOOL = ToolSpec("get_time", "The time.", {"type": "object", "properties": {"zone": {"type": "string"}}})
PARAMS = SamplingParams(
    max_tokens=7,
    temperature=0.3,
    top_p=0.9,
    top_k=-1,
    min_p=0.1,
    repeat_penalty=1.1,
    seed=42,
    logit_bias=((5, -2.0), (9, 1.5)),
    presence_penalty=0.2,
    frequency_penalty=-0.4,
)
# What tether's vLLM engine reads, per scenario: the steps vLLM's engine produces (ids and text per
# decode step), the finish, and the prompt tokens its prefix cache served.
SCENARIOS: dict[str, dict[str, Any]] = {
    "eos": {"steps": [Step((10,), "He"), Step((11, 12), "llo!"), Step((2,), "", "stop")], "cached": 2},
    "stop_id": {"steps": [Step((10,), "Hi"), Step((13, 7), " x", "stop", stop_reason=7)], "cached": 0},
    "length": {"steps": [Step((10,), "a"), Step((11,), "b", "length")], "cached": None},
    "stop_string": {"steps": [Step((10, 11), "ab", "stop", stop_reason="END")], "cached": 1},
}
EXPECTED: dict[str, tuple[list[tuple[int, bytes]], str]] = {
    "eos": ([(10, b"He"), (11, b""), (12, b"llo!"), (STOPPED, b"")], "stop"),
    "stop_id": ([(10, b"Hi"), (13, b" x"), (STOPPED, b"")], "stop"),
    "length": ([(10, b"a"), (11, b"b")], "length"),
    "stop_string": ([(10, b""), (11, b"ab")], "stop"),
}
PROMPT = [1, 2, 3]


def _stream(name: str) -> list[dict[str, Any]]:
    """The scenario's chunks as tests/support/fake_vllm.py writes them."""
    case = SCENARIOS[name]
    steps: list[Step] = case["steps"]
    out = [chunk(step, PROMPT if i == 0 else None) for i, step in enumerate(steps)]
    return [*out, usage_chunk(len(PROMPT), sum(len(s.ids) for s in steps), case["cached"])]


def test_the_body_maps_every_sampling_setting() -> None:
    body = completion_body("m", [1, 2], PARAMS, None)
    assert body == {
        "model": "m",
        "prompt": [1, 2],
        "max_tokens": 7,
        "temperature": 0.3,
        "top_p": 0.9,
        "top_k": 0,  # tether's "off" (<= 0) is vLLM's 0
        "min_p": 0.1,
        "repetition_penalty": 1.1,
        "presence_penalty": 0.2,
        "frequency_penalty": -0.4,
        "seed": 42,
        "logit_bias": {"5": -2.0, "9": 1.5},
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_token_ids": True,
        "skip_special_tokens": False,
        "spaces_between_special_tokens": False,
    }
    plain = completion_body("m", [1], SamplingParams(), None)
    assert "seed" not in plain and "logit_bias" not in plain and "structured_outputs" not in plain


def test_the_body_carries_layer0_and_nothing_where_it_does_not_apply() -> None:
    hermes = ReplySpec(get_format("hermes"), (TOOL,), "strict")
    assert (
        "structural_tag" in completion_body("m", [1], PARAMS, constraint_fields(hermes))["structured_outputs"]
    )
    assert completion_body("m", [1], PARAMS, constraint_fields(NameChoiceSpec(("a",))))[
        "structured_outputs"
    ] == {"choice": ["a"]}
    assert (
        "json"
        in completion_body("m", [1], PARAMS, constraint_fields(JsonSpec.of_tool(TOOL)))["structured_outputs"]
    )
    answer_only = ReplySpec(get_format("hermes"), (TOOL,), "strict", answer_only=True)
    assert "structured_outputs" not in completion_body("m", [1], PARAMS, constraint_fields(answer_only))


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_stream_gives_ids_with_their_text_and_the_stop_as_stopped(name: str) -> None:
    end = StreamEnd()
    assert list(stream_pieces(_stream(name), end)) == EXPECTED[name][0]
    assert end.finish_reason == EXPECTED[name][1]
    assert evaluated_tokens(end.usage, len(PROMPT)) == len(PROMPT) - (SCENARIOS[name]["cached"] or 0)


def test_an_aborted_request_is_an_error_not_a_short_reply() -> None:
    chunks = [chunk(Step((10,), "a"), PROMPT), chunk(Step((), "", "abort"), None)]
    pieces = stream_pieces(chunks, StreamEnd())
    assert next(pieces) == (10, b"a")
    with pytest.raises(BackendUnavailableError, match="aborted"):
        next(pieces)


def test_text_without_an_id_rides_on_the_next_one() -> None:
    chunks = [chunk(Step((), "é"), PROMPT), chunk(Step((11,), "x"), None)]
    assert list(stream_pieces(chunks, StreamEnd())) == [(11, "éx".encode())]


def test_evaluated_tokens_without_details_is_the_whole_prompt() -> None:
    assert evaluated_tokens(None, 9) == 9
    assert evaluated_tokens({"prompt_tokens": 9}, 9) == 9
    assert evaluated_tokens({"prompt_tokens_details": {"cached_tokens": None}}, 9) == 9
    assert evaluated_tokens({"prompt_tokens_details": {"cached_tokens": 8}}, 9) == 1


def test_turns_go_with_arguments_as_json_text() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": "é"}}}
    turns = [{"role": "assistant", "content": "", "tool_calls": [call]}, {"role": "user", "content": "hi"}]
    sent = wire_turns(turns)
    assert sent[0]["tool_calls"][0]["function"]["arguments"] == '{"a": "é"}'
    assert sent[1] == turns[1] and turns[0]["tool_calls"][0] is call  # the caller's turns are untouched


def test_the_chat_template_from_the_tokenizer_info() -> None:
    assert chat_template_of({"chat_template": "{{ x }}"}) == "{{ x }}"
    assert chat_template_of({"chat_template": {"default": "d", "tool_use": "t"}}) == "t"
    assert chat_template_of({"chat_template": [{"name": "default", "template": "d"}]}) == "d"
    assert chat_template_of({"tokenizer_class": "X"}) is None
    assert chat_template_of({"chat_template": "  "}) is None
    assert (token_text("<s>"), token_text({"content": "</s>"}), token_text(None)) == ("<s>", "</s>", "")


# -- against vLLM's own code --------------------------------------------------------------------

_VLLM_PYTHON = Path(
    os.environ.get("TETHER_VLLM_PYTHON")
    or Path(__file__).resolve().parents[4] / "vllm-venv" / "bin" / "python"
)
_VLLM_SCRIPT = r"""
import asyncio, json, sys
from types import SimpleNamespace
from vllm.entrypoints.openai.completion.protocol import CompletionRequest
from vllm.entrypoints.openai.completion.serving import OpenAIServingCompletion
from vllm.entrypoints.serve.tokenize.protocol import DetokenizeRequest, TokenizeChatRequest, TokenizeCompletionRequest
from vllm.outputs import CompletionOutput, RequestOutput

FIELDS = ["max_tokens", "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
          "frequency_penalty", "seed", "skip_special_tokens", "spaces_between_special_tokens"]

def model_for(path, body):
    if path == "/v1/completions":
        return CompletionRequest
    if path == "/detokenize":
        return DetokenizeRequest
    return TokenizeChatRequest if "messages" in body else TokenizeCompletionRequest

def check(path, body):
    request = model_for(path, body).model_validate(body)
    out = {"model": type(request).__name__, "unknown": sorted(request.model_extra or {})}
    if isinstance(request, CompletionRequest):
        params = request.to_sampling_params(body["max_tokens"], {})
        out.update({name: getattr(params, name) for name in FIELDS})
        out["logit_bias"] = {str(k): v for k, v in (params.logit_bias or {}).items()}
        so = params.structured_outputs
        out["constraint"] = None if so is None else [k for k in ("json", "choice", "structural_tag") if getattr(so, k)]
        out["stream"] = request.stream
        out["include_usage"] = request.stream_options.include_usage if request.stream_options else None
        out["return_token_ids"] = request.return_token_ids
    return out

async def record(case):
    request = CompletionRequest.model_validate(case["body"])
    serving = object.__new__(OpenAIServingCompletion)
    serving.enable_force_include_usage = False
    serving.enable_prompt_tokens_details = case["cached"] is not None
    serving.system_fingerprint = None
    serving.enable_per_request_metrics = False
    prompt, steps = case["body"]["prompt"], case["steps"]

    async def results():
        for i, (ids, text, finish, stop_reason) in enumerate(steps):
            out = CompletionOutput(0, text, ids, None, None, finish_reason=finish, stop_reason=stop_reason)
            yield 0, RequestOutput("r", "", prompt, None, [out], i == len(steps) - 1,
                                   num_cached_tokens=case["cached"] or 0)

    lines = [s async for s in serving.completion_stream_generator(
        request, [{"type": "token", "prompt_token_ids": prompt}], results(), "cmpl-t", 0, request.model,
        1, None, SimpleNamespace(final_usage_info=None))]
    return [line[len("data: "):].strip() for line in lines]

job = json.load(sys.stdin)
print(json.dumps({
    "requests": [check(path, body) for path, body in job["requests"]],
    "streams": {name: asyncio.run(record(case)) for name, case in job["streams"].items()},
}))
"""


def _engine_requests() -> list[tuple[str, dict[str, Any]]]:
    """Every request the engine sends, recorded by the stand-in: connecting (both ways of rendering),
    tokenizing, rendering a conversation with a past call, generating under each kind of layer 0."""
    sent: list[tuple[str, dict[str, Any]]] = []
    for template in ("{{ messages }}", None):
        fake = FakeVllm(template=template, template_reads_tools=True)
        with serving(fake.app()) as base:
            engine = connect_vllm(base, timeout_s=10)[0]
            engine.tokenize("hi")
            engine.detokenize([1, 2])
            call = ToolCall(name="get_time", arguments={"zone": "UTC"}, id="c1")
            turns = (
                Message("user", "time?"),
                Message("assistant", "", tool_calls=(call,)),
                Message("tool", "noon"),
            )
            prompt_ids(engine, ChatTemplate(template), get_format("hermes"), turns, (TOOL,))
            for spec in (
                None,
                ReplySpec(get_format("hermes"), (TOOL,), "strict"),
                ReplySpec(get_format("generic"), (TOOL,), "names"),
                NameChoiceSpec(("a", "b")),
                JsonSpec.of_tool(TOOL),
            ):
                compiled = engine.compile(spec, prompt_len=len(PROMPT)) if spec is not None else None
                list(engine.generate(PROMPT, PARAMS, constraint=compiled))
            engine.close()
        sent += fake.requests
    return sent


@pytest.fixture(scope="module")
def vllm_says() -> dict[str, Any]:
    if not _VLLM_PYTHON.exists():
        pytest.skip("no vLLM install (scripts/check_vllm.sh --install makes one)")
    requests = _engine_requests()
    stream_body = completion_body("smollm2-135m-instruct", PROMPT, PARAMS, None)
    job = {
        "requests": requests,
        "streams": {
            name: {
                "body": stream_body,
                "cached": case["cached"],
                "steps": [[list(s.ids), s.text, s.finish, s.stop_reason] for s in case["steps"]],
            }
            for name, case in SCENARIOS.items()
        },
    }
    run = subprocess.run(
        [str(_VLLM_PYTHON), "-W", "ignore", "-c", _VLLM_SCRIPT],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return result


def test_vllm_takes_every_request_the_engine_sends(vllm_says: dict[str, Any]) -> None:
    checked = vllm_says["requests"]
    assert [c["unknown"] for c in checked] == [[] for _ in checked]  # vLLM would ignore a misspelt field
    kinds = {c["model"] for c in checked}
    assert kinds == {
        "CompletionRequest",
        "TokenizeChatRequest",
        "TokenizeCompletionRequest",
        "DetokenizeRequest",
    }


def test_vllm_reads_each_setting_as_tether_means_it(vllm_says: dict[str, Any]) -> None:
    streamed = [c for c in vllm_says["requests"] if c["model"] == "CompletionRequest" and c["stream"]]
    assert [c["constraint"] for c in streamed] == [
        None,
        ["structural_tag"],
        ["json"],
        ["choice"],
        ["json"],
    ] * 2
    got = streamed[0]
    assert {k: got[k] for k in ("max_tokens", "top_k", "seed", "skip_special_tokens")} == {
        "max_tokens": 7,
        "top_k": 0,
        "seed": 42,
        "skip_special_tokens": False,
    }
    assert got["temperature"] == pytest.approx(0.3) and got["top_p"] == pytest.approx(0.9)
    assert got["min_p"] == pytest.approx(0.1) and got["repetition_penalty"] == pytest.approx(1.1)
    assert got["presence_penalty"] == pytest.approx(0.2) and got["frequency_penalty"] == pytest.approx(-0.4)
    assert got["logit_bias"] == {"5": -2.0, "9": 1.5} and got["spaces_between_special_tokens"] is False
    assert got["include_usage"] is True and got["return_token_ids"] is True
    probes = [c for c in vllm_says["requests"] if c["model"] == "CompletionRequest" and not c["stream"]]
    assert probes and all(c["max_tokens"] == 1 and len(c["logit_bias"]) == 1 for c in probes)


def test_vllms_own_stream_is_what_tether_parses(vllm_says: dict[str, Any]) -> None:
    for name in SCENARIOS:
        lines = vllm_says["streams"][name]
        assert lines[-1] == "[DONE]"
        chunks = [json.loads(line) for line in lines[:-1]]
        # The stand-in the engine tests run against sends exactly these chunks.
        assert chunks == _stream(name), name
        end = StreamEnd()
        assert list(stream_pieces(chunks, end)) == EXPECTED[name][0], name
        assert end.finish_reason == EXPECTED[name][1]
