"""tether in front of a real vLLM on the bundled model: layer 0 as structured outputs, streaming, hang-ups.

Not started here (vLLM is heavy): point ``TETHER_VLLM_URL`` at one serving the bundled model as
``smollm2-135m-instruct``, as scripts/check_vllm.sh starts it, with two more flags::

    ... -m vllm.entrypoints.openai.api_server --model "$MODEL_DIR" \
        --served-model-name smollm2-135m-instruct --max-model-len 2048 --max-num-seqs 4 \
        --dtype bfloat16 --enforce-eager \
        --enable-prompt-tokens-details --enable-tokenizer-info-endpoint
    TETHER_VLLM_URL=http://127.0.0.1:PORT .venv/bin/pytest tests/backends/test_vllm.py

``--enable-prompt-tokens-details`` makes vLLM report its prefix-cache hits (the prefix-reuse
check); ``--enable-tokenizer-info-endpoint`` lets tether read the chat template (without it
vLLM renders the prompts, and the rendering check skips). Skipped without the variable; a
variable pointing at nothing fails. The name-fix set goes through tether's HTTP API with layer 0
only (preset ``names``), so every offered name in the replies came from vLLM's structured output;
the same prompts decoded by vLLM without it show the model writing names that are not offered.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import pytest

from tests.support.socket_server import serving, wait_for
from tether.chat import Message
from tether.config import ServerConfig
from tether.engine.base import Done, SamplingParams, Token
from tether.engine.prompt import build_prompt, prompt_ids, prompt_turns
from tether.engine.remote import VllmEngine
from tether.engine.scheduler import Scheduler
from tether.engine.template import ChatTemplate
from tether.evals.name_fix import CASES, FEW_SHOT, PREFILL, TOOLS
from tether.grammar.formats import available_formats, get_format
from tether.grammar.formats.base import ToolSpec
from tether.grammar.remote import ArgumentsSpec, NameChoiceSpec, ReplySpec, compile_vllm
from tether.proxy.app import create_app
from tether.server import load_engines

MODEL = "smollm2-135m-instruct"
OFFERED = {t.name for t in TOOLS}
pytestmark = [pytest.mark.backend, pytest.mark.model]


@pytest.fixture(scope="module")
def vllm_url() -> str:
    url = os.environ.get("TETHER_VLLM_URL", "").rstrip("/")
    if not url:
        pytest.skip(
            "TETHER_VLLM_URL is not set (a vLLM serving the bundled model; see this module's docstring)"
        )
    try:
        served = [m["id"] for m in httpx.get(f"{url}/v1/models", timeout=10).json()["data"]]
    except (httpx.HTTPError, KeyError, ValueError) as exc:
        pytest.fail(f"TETHER_VLLM_URL={url} does not answer like vLLM: {exc!r}")
    assert MODEL in served, f"{url} serves {served}, not {MODEL}"
    return url


@pytest.fixture(scope="module")
def vllm_engines(vllm_url: str) -> Iterator[list[VllmEngine]]:
    engines = load_engines(ServerConfig(backend=vllm_url, slots=2))
    assert all(isinstance(e, VllmEngine) for e in engines)
    yield engines  # type: ignore[misc]
    for engine in engines:
        engine.close()


@pytest.fixture
def tether_url(vllm_engines: list[VllmEngine]) -> Iterator[str]:
    """tether in front of the vLLM, on a real socket (default preset: strict)."""
    app = create_app(ServerConfig(slots=2), Scheduler(list(vllm_engines)))
    with serving(app) as url:
        yield url


def _chat(base: str, case: str, tether: dict[str, Any], **extra: Any) -> dict[str, Any]:
    body = {
        "model": MODEL,
        "messages": [{"role": "system", "content": FEW_SHOT}, {"role": "user", "content": case}],
        "tools": [t.to_openai() for t in TOOLS],
        "tool_choice": "required",
        "temperature": 0,
        "max_tokens": 48,
        "tether": tether,
        **extra,
    }
    r = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return dict(r.json()["choices"][0]["message"])


def _text(engine: VllmEngine, ids: list[int], params: SamplingParams, **kw: Any) -> tuple[str, Done]:
    events = list(engine.generate(ids, params, **kw))
    done = events[-1]
    assert isinstance(done, Done)
    return "".join(e.text for e in events if isinstance(e, Token)), done


def test_name_fix_set_names_only_offered_tools(tether_url: str) -> None:
    calls = 0
    for case in CASES:
        message = _chat(tether_url, case, {"preset": "names"})
        for call in message.get("tool_calls") or []:
            calls += 1
            assert call["function"]["name"] in OFFERED, (case, call)
    # tool_choice required: a call per case, but for the few whose arguments outrun the 48 tokens.
    assert calls >= 45


def test_strict_calls_are_schema_valid(tether_url: str) -> None:
    schemas = {t.name: t.parameters for t in TOOLS}
    calls = 0
    for case in CASES[::5]:
        message = _chat(tether_url, case, {"preset": "names", "constrain": "strict"})
        for call in message.get("tool_calls") or []:
            calls += 1
            jsonschema.validate(json.loads(call["function"]["arguments"]), schemas[call["function"]["name"]])
    assert calls >= len(CASES[::5])


def test_without_the_constraint_the_model_writes_names_not_offered(
    vllm_url: str, vllm_engines: list[VllmEngine]
) -> None:
    """The control: the same prompts, prefilled up to the name, decoded by vLLM unconstrained."""
    engine = vllm_engines[0]
    info = engine.info
    template = ChatTemplate(info.chat_template, bos_token=info.bos_token, eos_token=info.eos_token)
    prefill = httpx.post(
        f"{vllm_url}/tokenize",
        json={"model": MODEL, "prompt": PREFILL, "add_special_tokens": False},
        timeout=30,
    ).json()["tokens"]
    wrong = 0
    for case in CASES[:20]:
        messages = (Message("system", FEW_SHOT), Message("user", case))
        ids = prompt_ids(engine, template, get_format("generic"), messages, TOOLS) + prefill
        r = httpx.post(
            f"{vllm_url}/v1/completions",
            json={"model": MODEL, "prompt": ids, "max_tokens": 12, "temperature": 0},
            timeout=60,
        )
        name = r.json()["choices"][0]["text"].split('"', 1)[0]
        wrong += name not in OFFERED
    assert wrong >= 3  # on llama.cpp: 8 of these 20 name a tool that is not offered


def test_tether_renders_as_vllm_does(vllm_engines: list[VllmEngine]) -> None:
    """With the template read from /tokenizer_info tether renders; the ids match vLLM's own rendering."""
    engine = vllm_engines[0]
    info = engine.info
    if info.chat_template is None:
        pytest.skip("vLLM runs without --enable-tokenizer-info-endpoint: it renders the prompts itself")
    template = ChatTemplate(info.chat_template, bos_token=info.bos_token, eos_token=info.eos_token)
    fmt = get_format("generic")
    for messages in (
        (Message("user", "hi"),),
        (Message("system", FEW_SHOT), Message("user", CASES[0])),
        (Message("user", "a"), Message("assistant", "b"), Message("user", "c")),
    ):
        ours = engine.tokenize(build_prompt(template, fmt, messages, TOOLS))
        assert ours == engine.render_chat(*prompt_turns(template.supports_tools, fmt, messages, TOOLS))


@pytest.mark.parametrize("name", available_formats())
def test_vllm_accepts_every_formats_constraint(vllm_url: str, name: str) -> None:
    fmt = get_format(name)
    for spec in (
        ReplySpec(fmt, TOOLS, "strict"),
        ReplySpec(fmt, TOOLS, "names", required=True, parallel=False),
    ):
        constraint = compile_vllm(spec)
        if constraint is None:
            continue  # nothing to hold for this format (a plugin whose calls are not name + arguments)
        body = {
            "model": MODEL,
            "prompt": "Hello",
            "max_tokens": 2,
            "temperature": 0,
            **constraint.request_fields(),
        }
        r = httpx.post(f"{vllm_url}/v1/completions", json=body, timeout=60)
        assert r.status_code == 200, (name, r.text[:500])


def test_vllm_refuses_a_broken_constraint(vllm_url: str) -> None:
    """The control for the test above: a grammar xgrammar cannot parse is refused, not ignored."""
    body = {
        "model": MODEL,
        "prompt": "Hello",
        "max_tokens": 2,
        "structured_outputs": {"grammar": 'root ::= "a" x'},
    }
    assert httpx.post(f"{vllm_url}/v1/completions", json=body, timeout=60).status_code == 400


SCHEMAS = [
    {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer"},
        },
        "required": ["city", "days"],
    },
    {
        "type": "object",
        "properties": {
            "numbers": {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 4},
            "round": {"type": "boolean"},
        },
        "required": ["numbers"],
    },
    {
        "type": "object",
        "properties": {"point": {"$ref": "#/$defs/P"}, "label": {"type": ["string", "null"]}},
        "required": ["point", "label"],
        "$defs": {"P": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}},
    },
]
ASKS = [
    "Weather in Paris for 3 days, in celsius.",
    "Add up 2.5 and 4, rounded.",
    "The point at x = 1.5, labelled origin.",
]


@pytest.mark.parametrize(
    ("schema", "ask"), list(zip(SCHEMAS, ASKS, strict=True)), ids=["weather", "numbers", "ref"]
)
def test_repair_constraint_yields_schema_valid_arguments(
    vllm_engines: list[VllmEngine], schema: dict[str, Any], ask: str
) -> None:
    engine = vllm_engines[0]
    ids = engine.tokenize(
        f"<|im_start|>user\n{ask} Write the arguments as JSON.<|im_end|>\n<|im_start|>assistant\n"
    )
    for temperature, seed in ((0.0, None), (0.9, 1), (0.9, 2), (0.9, 3)):
        params = SamplingParams(max_tokens=160, temperature=temperature, seed=seed)
        text, done = _text(engine, ids, params, constraint=ArgumentsSpec(ToolSpec("f", "", schema)))
        assert done.finish_reason == "stop"  # the schema closed the object, vLLM ended the reply
        jsonschema.validate(json.loads(text), schema)


def test_repick_constraint_yields_an_offered_name(vllm_engines: list[VllmEngine]) -> None:
    engine = vllm_engines[0]
    ids = engine.tokenize("<|im_start|>user\nWhich tool reads a file?<|im_end|>\n<|im_start|>assistant\n")
    names = ("read_file", "list_dir", "run_command")
    text, _ = _text(
        engine, ids, SamplingParams(max_tokens=16, temperature=0), constraint=NameChoiceSpec(names)
    )
    assert text in names


def test_streaming_call_and_prefix_reuse(tether_url: str) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "system", "content": FEW_SHOT}, {"role": "user", "content": "show me main.py"}],
        "tools": [t.to_openai() for t in TOOLS],
        "tool_choice": "required",
        "temperature": 0,
        "max_tokens": 48,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    names: list[str] = []
    with httpx.stream("POST", f"{tether_url}/v1/chat/completions", json=body, timeout=120) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices") or []:
                for call in choice["delta"].get("tool_calls") or []:
                    if call.get("function", {}).get("name"):
                        names.append(call["function"]["name"])
    assert names and set(names) <= OFFERED
    # The same system prompt and tools again: vLLM's prefix cache serves the shared prefix.
    again = httpx.post(
        f"{tether_url}/v1/chat/completions", json={**body, "stream": False}, timeout=120
    ).json()
    cached = again["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached > 100, "no prefix-cache hits reported: is vLLM running with --enable-prompt-tokens-details?"


def _running(vllm_url: str) -> float:
    """vLLM's ``vllm:num_requests_running`` gauge, summed over its engines."""
    text = httpx.get(f"{vllm_url}/metrics", timeout=5).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:num_requests_running")
    )


def test_hang_up_frees_the_slot_here_and_on_the_server(tether_url: str, vllm_url: str) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Write a very long story about a lighthouse keeper."}],
        "max_tokens": 1500,
        "stream": True,
    }
    with httpx.stream("POST", f"{tether_url}/v1/chat/completions", json=body, timeout=60) as r:
        got = 0
        for chunk in r.iter_bytes():
            got += len(chunk)
            if got > 400:
                break
    hung_up = time.monotonic()
    answer = httpx.post(
        f"{tether_url}/v1/chat/completions",
        json={"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]},
        timeout=30,
    )
    assert answer.status_code == 200 and time.monotonic() - hung_up < 5
    wait_for(tether_url, lambda s: s["busy_slots"] == 0 and s["cancelled"] >= 1, timeout=10)
    deadline = time.monotonic() + 10
    while _running(vllm_url) > 0:
        assert time.monotonic() < deadline, "vLLM kept decoding for a client that left"
        time.sleep(0.1)
