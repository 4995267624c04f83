"""tether ``--backend-kind openai`` in front of an OpenAI-compatible server with tool support, on the bundled model.

llama-server's own chat API cannot be that server here: SmolLM2's template has no tool support and
llama-server then ignores ``tools`` (it answers in prose). The back server is therefore a second
tether with guardrails off (preset ``bare``: the generic format rendered and parsed, no layer 0, no
guard) on the same llama-server — what a plain OpenAI-compatible server with tool parsing returns.
The front tether forwards each job to its ``/v1/chat/completions`` and runs the post-hoc guard over
what comes back: calls through the guard, streaming, and a hang-up that must stop llama-server's
decoding two hops away. Real-model tests (markers ``model`` and ``backend``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import jsonschema
import pytest

from tests.backends.checks import (
    llama_server_busy,
    say_hi,
    story_body,
    stream_tool_calls,
    wait_server_idle,
    wait_slot_freed,
)
from tests.support.socket_server import serving
from tether.config import ServerConfig
from tether.engine.remote import LlamaServerEngine
from tether.engine.scheduler import Scheduler
from tether.evals.name_fix import CASES, TOOLS
from tether.proxy.app import create_app
from tether.server import build_app

OFFERED = {t.name: t.parameters for t in TOOLS}
POST_HOC = ["repick", "repair", "streaming"]


@dataclass(frozen=True)
class Front:
    url: str  # tether
    llama_server: str
    model: str  # the one model llama-server lists, which tether serves under the same name


@pytest.fixture
def front(llama_server: str, backend_engines: list[LlamaServerEngine]) -> Iterator[Front]:
    """The front tether (post-hoc guard, preset full) over a tether with layer 0 on offered names and no
    guard (``bare`` plus ``constrain: names``: unconstrained, the 135M model rarely writes a call at all)
    over the llama-server."""
    back = create_app(
        ServerConfig(preset="bare", constrain="names", slots=2), Scheduler(list(backend_engines))
    )
    with serving(back) as back_url:
        model = str(httpx.get(f"{back_url}/v1/models", timeout=10).json()["data"][0]["id"])
        cfg = ServerConfig(
            backend=back_url, backend_kind="openai", model_path=model, n_ctx=4096, slots=2, preset="full"
        )
        with serving(build_app(cfg)) as url:
            yield Front(url, llama_server, model)


def _body(front: Front, case: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": front.model,
        "messages": [{"role": "user", "content": case}],
        "tools": [t.to_openai() for t in TOOLS],
        "tool_choice": "required",
        "temperature": 0,
        "max_tokens": 96,
        **extra,
    }


def test_tool_calls_come_through_the_post_hoc_guard(front: Front) -> None:
    base = front.url
    calls = 0
    for case in CASES[:12]:
        r = httpx.post(f"{base}/v1/chat/completions", json=_body(front, case), timeout=180)
        assert r.status_code == 200, r.text
        reply = r.json()
        assert reply["tether"]["layers"] == POST_HOC
        flagged = {i["tool"] for i in reply["tether"].get("interventions", []) if i["kind"] == "args_invalid"}
        for call in reply["choices"][0]["message"].get("tool_calls") or []:
            calls += 1
            name = call["function"]["name"]
            assert name in OFFERED, call  # a name the guard could not resolve never leaves as a call
            arguments = json.loads(call["function"]["arguments"])
            if name not in flagged:  # whatever is not flagged invalid validates
                jsonschema.validate(arguments, OFFERED[name])
    assert calls >= 6  # tool_choice required: a call for most cases (some outrun the 96 tokens)


def test_a_streamed_call_arrives_in_tool_call_deltas(front: Front) -> None:
    # With only names constrained behind the back server, the model answers some requests in prose:
    # take the first of a few (greedy, so always the same one) that comes back as a call.
    for case in CASES[:8]:
        body = _body(front, case, stream=True, stream_options={"include_usage": True})
        calls, finish, usage = stream_tool_calls(front.url, body, timeout=180)
        names = [call["function"]["name"] for call in calls]
        assert set(names) <= set(OFFERED)
        if names:
            break
    assert names and finish == "tool_calls"
    assert usage["prompt_tokens"] > 50  # the back server's own count of the prompt it rendered


def test_text_streams_and_a_hang_up_stops_llama_server(front: Front) -> None:
    base, llama_server, model = front.url, front.llama_server, front.model
    body = story_body(model, max_tokens=2000)
    deltas = 0
    with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=120) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: ") and '"content": "' in line and '"content": ""' not in line:
                deltas += 1
            if deltas >= 8:
                break  # hang up mid-story
    assert deltas >= 8  # it streamed, piece by piece
    wait_slot_freed(base)
    wait_server_idle(
        lambda: llama_server_busy(llama_server), "llama-server kept decoding for a client that left"
    )
    assert say_hi(base, model, timeout=60).status_code == 200
