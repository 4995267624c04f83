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

import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.backends.checks import (
    MODEL,
    OFFERED,
    REPAIRS,
    cached_tokens,
    check_hang_up_frees_the_slot,
    check_names_only_offered,
    check_repair_constraint,
    check_repick_constraint,
    check_streamed_call,
    check_strict_calls_are_schema_valid,
    layer0_specs,
    remote_engines,
    template_of,
    tether_in_front,
)
from tether.chat import Message
from tether.engine.prompt import build_prompt, prompt_ids, prompt_turns
from tether.engine.remote import VllmEngine
from tether.evals.name_fix import CASES, FEW_SHOT, PREFILL, TOOLS
from tether.grammar.formats import available_formats, get_format
from tether.grammar.remote import compile_vllm

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
    with remote_engines(vllm_url, VllmEngine) as engines:
        yield engines


@pytest.fixture
def tether_url(vllm_engines: list[VllmEngine]) -> Iterator[str]:
    """tether in front of the vLLM, on a real socket (default preset: strict)."""
    with tether_in_front(vllm_engines) as url:
        yield url


def test_name_fix_set_names_only_offered_tools(tether_url: str) -> None:
    check_names_only_offered(tether_url)


def test_strict_calls_are_schema_valid(tether_url: str) -> None:
    check_strict_calls_are_schema_valid(tether_url)


def test_without_the_constraint_the_model_writes_names_not_offered(
    vllm_url: str, vllm_engines: list[VllmEngine]
) -> None:
    """The control: the same prompts, prefilled up to the name, decoded by vLLM unconstrained."""
    engine = vllm_engines[0]
    template = template_of(engine)
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
    if engine.info.chat_template is None:
        pytest.skip("vLLM runs without --enable-tokenizer-info-endpoint: it renders the prompts itself")
    template = template_of(engine)
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
    for spec in layer0_specs(name):
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


@pytest.mark.parametrize(("schema", "ask"), REPAIRS)
def test_repair_constraint_yields_schema_valid_arguments(
    vllm_engines: list[VllmEngine], schema: dict[str, Any], ask: str
) -> None:
    check_repair_constraint(vllm_engines[0], schema, ask)


def test_repick_constraint_yields_an_offered_name(vllm_engines: list[VllmEngine]) -> None:
    check_repick_constraint(vllm_engines[0])


def test_streaming_call_and_prefix_reuse(tether_url: str) -> None:
    body = check_streamed_call(tether_url)
    # The same system prompt and tools again: vLLM's prefix cache serves the shared prefix.
    cached = cached_tokens(tether_url, {**body, "stream": False})
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
    check_hang_up_frees_the_slot(
        tether_url, max_tokens=1500, server_busy=lambda: _running(vllm_url) > 0, server="vLLM"
    )
