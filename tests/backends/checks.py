"""The checks the remote-backend tests share, as plain functions over base URLs and engines.

tether in front of a backend (llama-server, vLLM, an OpenAI-compatible server) is checked the same
way whichever it is: the name-fix set (tether.evals.name_fix) through tether's HTTP API, streamed
tool-call deltas, layer 0's repair and re-pick constraints on one engine, and a client hanging up
mid-story, which must free the slot in tether and on the server. Each test module calls these with
its own server, thresholds and messages.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import httpx
import jsonschema
import pytest

from tests.support.socket_server import serving, wait_for
from tether.config import ServerConfig
from tether.engine.base import Done, Engine, SamplingParams, Token
from tether.engine.scheduler import Scheduler
from tether.engine.template import ChatTemplate
from tether.evals.name_fix import CASES, FEW_SHOT, TOOLS
from tether.grammar.formats import get_format
from tether.grammar.formats.base import ToolSpec
from tether.grammar.spec import JsonSpec, NameChoiceSpec, ReplySpec
from tether.proxy.app import create_app
from tether.server import load_engines

__all__ = [
    "MODEL",
    "OFFERED",
    "REPAIRS",
    "cached_tokens",
    "call_names",
    "chat",
    "check_hang_up_frees_the_slot",
    "check_names_only_offered",
    "check_repair_constraint",
    "check_repick_constraint",
    "check_streamed_call",
    "check_strict_calls_are_schema_valid",
    "layer0_specs",
    "llama_server_busy",
    "name_fix_body",
    "remote_engines",
    "say_hi",
    "story_body",
    "stream_tool_calls",
    "template_of",
    "tether_in_front",
    "wait_server_idle",
    "wait_slot_freed",
]

MODEL = "smollm2-135m-instruct"
OFFERED = {t.name for t in TOOLS}
E = TypeVar("E", bound=Engine)


@contextmanager
def remote_engines(url: str, kind: type[E]) -> Iterator[list[E]]:
    """tether's engines for ``--backend url`` (two slots), each a ``kind``; closed when the block exits."""
    engines = load_engines(ServerConfig(backend=url, slots=2))
    assert all(isinstance(e, kind) for e in engines)
    yield [e for e in engines if isinstance(e, kind)]
    for engine in engines:
        engine.close()


@contextmanager
def tether_in_front(engines: Sequence[Engine]) -> Iterator[str]:
    """tether in front of ``engines``, on a real socket (default preset: strict)."""
    app = create_app(ServerConfig(slots=2), Scheduler(list(engines)))
    with serving(app) as url:
        yield url


def template_of(engine: Engine) -> ChatTemplate:
    info = engine.info
    return ChatTemplate(info.chat_template, bos_token=info.bos_token, eos_token=info.eos_token)


def name_fix_body(case: str, **extra: Any) -> dict[str, Any]:
    """A chat request for one name-fix case: its few-shot prompt, its tools, a call required."""
    return {
        "model": MODEL,
        "messages": [{"role": "system", "content": FEW_SHOT}, {"role": "user", "content": case}],
        "tools": [t.to_openai() for t in TOOLS],
        "tool_choice": "required",
        "temperature": 0,
        "max_tokens": 48,
        **extra,
    }


def chat(base: str, case: str, tether: dict[str, Any]) -> dict[str, Any]:
    """The reply message to one name-fix case, with tether's settings ``tether``."""
    r = httpx.post(f"{base}/v1/chat/completions", json=name_fix_body(case, tether=tether), timeout=120)
    assert r.status_code == 200, r.text
    return dict(r.json()["choices"][0]["message"])


def check_names_only_offered(base: str) -> None:
    """Layer 0 alone (preset ``names``): every called name on the whole set is an offered one."""
    calls = 0
    for case in CASES:
        message = chat(base, case, {"preset": "names"})
        for call in message.get("tool_calls") or []:
            calls += 1
            assert call["function"]["name"] in OFFERED, (case, call)
    # tool_choice required: a call per case, but for the few whose arguments outrun the 48 tokens.
    assert calls >= 45


def check_strict_calls_are_schema_valid(base: str) -> None:
    """Layer 0 strict: the arguments of every call validate against their tool's schema."""
    schemas = {t.name: t.parameters for t in TOOLS}
    calls = 0
    for case in CASES[::5]:
        message = chat(base, case, {"preset": "names", "constrain": "strict"})
        for call in message.get("tool_calls") or []:
            calls += 1
            jsonschema.validate(json.loads(call["function"]["arguments"]), schemas[call["function"]["name"]])
    assert calls >= len(CASES[::5])


CITY_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "country": {"type": "string"},
        "population": {"type": "integer"},
    },
    "required": ["name", "country", "population"],
}


def layer0_specs(format_name: str) -> tuple[ReplySpec, ...]:
    """Layer 0 for the name-fix tools in a format: strict, names only with a call required, and strict
    beside a structured answer."""
    fmt = get_format(format_name)
    return (
        ReplySpec(fmt, TOOLS, "strict"),
        ReplySpec(fmt, TOOLS, "names", required=True, parallel=False),
        ReplySpec(fmt, TOOLS, "strict", answer=JsonSpec(CITY_SCHEMA, "City")),
    )


def stream_tool_calls(
    base: str, body: dict[str, Any], *, timeout: float
) -> tuple[list[dict[str, Any]], str | None, dict[str, Any]]:
    """A streamed chat's tool-call deltas, its last ``finish_reason`` and its usage."""
    calls: list[dict[str, Any]] = []
    finish: str | None = None
    usage: dict[str, Any] = {}
    with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=timeout) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices") or []:
                finish = choice.get("finish_reason") or finish
                calls.extend(choice["delta"].get("tool_calls") or [])
    return calls, finish, usage


def call_names(calls: list[dict[str, Any]]) -> list[str]:
    """The names the tool-call deltas carry (a delta that continues a call carries none)."""
    return [call["function"]["name"] for call in calls if call.get("function", {}).get("name")]


def check_streamed_call(base: str) -> dict[str, Any]:
    """A streamed name-fix request comes back as call deltas naming offered tools; its body."""
    body = name_fix_body("show me main.py", stream=True, stream_options={"include_usage": True})
    calls, _, _ = stream_tool_calls(base, body, timeout=120)
    names = call_names(calls)
    assert names and set(names) <= OFFERED
    return body


def cached_tokens(base: str, body: dict[str, Any]) -> int:
    """The prompt tokens the backend's prefix cache served for ``body`` (a whole, unstreamed reply)."""
    again = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=120).json()
    return int(again["usage"]["prompt_tokens_details"]["cached_tokens"])


def _generated(engine: Engine, ids: list[int], params: SamplingParams, **kw: Any) -> tuple[str, Done]:
    events = list(engine.generate(ids, params, **kw))
    done = events[-1]
    assert isinstance(done, Done)
    return "".join(e.text for e in events if isinstance(e, Token)), done


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
# (schema, ask) for the repair checks, parametrized as weather, numbers, ref.
REPAIRS = [
    pytest.param(schema, ask, id=name)
    for schema, ask, name in zip(SCHEMAS, ASKS, ("weather", "numbers", "ref"), strict=True)
]


def check_repair_constraint(engine: Engine, schema: dict[str, Any], ask: str) -> None:
    """The repair constraint (a tool's arguments schema) yields valid arguments, greedy and sampled."""
    ids = engine.tokenize(
        f"<|im_start|>user\n{ask} Write the arguments as JSON.<|im_end|>\n<|im_start|>assistant\n"
    )
    for temperature, seed in ((0.0, None), (0.9, 1), (0.9, 2), (0.9, 3)):
        params = SamplingParams(max_tokens=160, temperature=temperature, seed=seed)
        spec = JsonSpec.of_tool(ToolSpec("f", "", schema))
        text, done = _generated(engine, ids, params, constraint=engine.compile(spec, prompt_len=len(ids)))
        assert done.finish_reason == "stop"  # the constraint closed the object, the server ended the reply
        jsonschema.validate(json.loads(text), schema)


def check_repick_constraint(engine: Engine) -> None:
    """The re-pick constraint (the names' choice) yields one of the names."""
    ids = engine.tokenize("<|im_start|>user\nWhich tool reads a file?<|im_end|>\n<|im_start|>assistant\n")
    names = ("read_file", "list_dir", "run_command")
    constraint = engine.compile(NameChoiceSpec(names), prompt_len=len(ids))
    text, _ = _generated(engine, ids, SamplingParams(max_tokens=16, temperature=0), constraint=constraint)
    assert text in names


def story_body(model: str, *, max_tokens: int) -> dict[str, Any]:
    """A streamed request for a reply long enough to hang up in the middle of."""
    return {
        "model": model,
        "messages": [{"role": "user", "content": "Write a very long story about a lighthouse keeper."}],
        "max_tokens": max_tokens,
        "stream": True,
    }


def say_hi(base: str, model: str, *, timeout: float) -> httpx.Response:
    """A short request, to see that a slot is free."""
    return httpx.post(
        f"{base}/v1/chat/completions",
        json={"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]},
        timeout=timeout,
    )


def wait_slot_freed(base: str) -> None:
    """tether's slots are all free again and it counted the cancellation."""
    wait_for(base, lambda s: s["busy_slots"] == 0 and s["cancelled"] >= 1, timeout=10)


def llama_server_busy(url: str) -> bool:
    """Whether any of llama-server's slots is still decoding."""
    return any(slot["is_processing"] for slot in httpx.get(f"{url}/slots", timeout=5).json())


def wait_server_idle(busy: Callable[[], bool], message: str) -> None:
    """Within 10 s the server stops decoding; ``message`` if it does not."""
    deadline = time.monotonic() + 10
    while busy():
        assert time.monotonic() < deadline, message
        time.sleep(0.1)


def check_hang_up_frees_the_slot(
    base: str, *, max_tokens: int, server_busy: Callable[[], bool], server: str
) -> None:
    """A client hangs up mid-story: the next request is answered at once, tether's slot is freed and
    the ``server`` stops decoding."""
    with httpx.stream(
        "POST", f"{base}/v1/chat/completions", json=story_body(MODEL, max_tokens=max_tokens), timeout=60
    ) as r:
        got = 0
        for chunk in r.iter_bytes():
            got += len(chunk)
            if got > 400:
                break
    hung_up = time.monotonic()
    answer = say_hi(base, MODEL, timeout=30)
    assert answer.status_code == 200 and time.monotonic() - hung_up < 5
    wait_slot_freed(base)
    wait_server_idle(server_busy, f"{server} kept decoding for a client that left")
