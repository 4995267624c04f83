"""tether in front of llama-server vs llama-server directly: same model, same server, same requests.

Both paths hit ONE llama-server (one slot, prompt cache on), so the comparison is tether's
overhead alone: rendering, tokenizing over HTTP, the turn pipeline and the extra hop. Rounds
alternate which path goes first; every request has its own user message, so each path
prefills a fresh suffix after the shared, cached system prompt.

* prose: a streamed story (128 tokens): time to first token and decode tok/s after it;
* grammar-armed decode: a forced tool call (``tool_choice: required``, one tool, ``strict``)
  through tether, vs the same prompt sent to llama-server's ``/completion`` under llama.cpp's own
  grammar for the same reply (its JSON-schema converter over ``{"tool_calls": [{name, arguments}]}``).
  llama-server's chat API cannot be the reference: the bundled model's template has no tool
  support, and llama-server then ignores ``tools`` (it answers in prose; 41 prompt tokens).

Usage: .venv/bin/python -m benchmarks.bench_backend [--rounds 8] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks._servers import llama_server, tether_backend_server
from tether.chat import Message
from tether.engine.locate import bundled_model_path
from tether.engine.prompt import build_prompt
from tether.engine.template import ChatTemplate
from tether.grammar.formats import get_format
from tether.grammar.formats.base import ToolSpec

MODEL = "smollm2-135m-instruct"
SYSTEM = "You are a storyteller for a software team. " + " ".join(
    f"Rule {i}: keep every sentence concrete and name one object." for i in range(30)
)
TOPICS = [
    "a lighthouse",
    "a train",
    "a garden",
    "a clock",
    "a bridge",
    "a kite",
    "a lamp",
    "a boat",
    "a mill",
]
CITIES = ["Paris", "Oslo", "Lima", "Cairo", "Tokyo", "Quito", "Perth", "Dakar", "Hanoi"]
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
            "required": ["city", "unit"],
        },
    },
}

Call = tuple[float, int, str]  # seconds, completion tokens, the call's arguments


def stream(base: str, messages: list[dict[str, str]], max_tokens: int) -> tuple[float, float, int]:
    """(ttft s, seconds after the first token, completion tokens) for one streamed chat completion."""
    body: dict[str, Any] = {"model": MODEL, "messages": messages, "max_tokens": max_tokens, "temperature": 0}
    body |= {"stream": True, "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    first = last = None
    usage: dict[str, Any] = {}
    with httpx.stream("POST", f"{base}/chat/completions", json=body, timeout=300) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            choices = chunk.get("choices") or []
            if choices and choices[0]["delta"].get("content"):
                last = time.perf_counter()
                first = first or last
    assert first is not None and last is not None
    return first - start, last - first, int(usage.get("completion_tokens", 0))


def _ask(city: str) -> str:
    return f"What is the weather in {city}, in celsius?"


def tether_call(base: str, city: str) -> Call:
    """One forced tool call through tether (layer 0 strict, as GBNF on llama-server)."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": _ask(city)}],
        "tools": [TOOL],
        "tool_choice": "required",
        "temperature": 0,
        "max_tokens": 64,
    }
    start = time.perf_counter()
    r = httpx.post(f"{base}/chat/completions", json=body, timeout=300)
    elapsed = time.perf_counter() - start
    r.raise_for_status()
    data = r.json()
    calls = data["choices"][0]["message"].get("tool_calls") or [{"function": {"arguments": ""}}]
    return elapsed, int(data["usage"]["completion_tokens"]), calls[0]["function"]["arguments"]


def direct_call(url: str, template: ChatTemplate, city: str) -> Call:
    """The same reply straight from llama-server: tether's prompt, llama.cpp's own schema grammar."""
    spec = ToolSpec.from_openai(TOOL)
    prompt = build_prompt(template, get_format("generic"), (Message("user", _ask(city)),), (spec,))
    item = {
        "type": "object",
        "properties": {"name": {"const": spec.name}, "arguments": dict(spec.parameters)},
        "required": ["name", "arguments"],
    }
    schema = {
        "type": "object",
        "properties": {"tool_calls": {"type": "array", "items": item, "minItems": 1}},
        "required": ["tool_calls"],
    }
    body = {"prompt": prompt, "n_predict": 64, "temperature": 0, "json_schema": schema, "cache_prompt": True}
    start = time.perf_counter()
    r = httpx.post(f"{url}/completion", json=body, timeout=300)
    elapsed = time.perf_counter() - start
    r.raise_for_status()
    data = r.json()
    try:
        calls = json.loads(data["content"]).get("tool_calls") or [{}]
        arguments = json.dumps(calls[0].get("arguments"))
    except json.JSONDecodeError:
        arguments = ""  # cut by the 64-token budget
    return elapsed, int(data["tokens_predicted"]), arguments


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args()
    script = Path(__file__).resolve().parents[1] / "scripts" / "install_llama_server.sh"
    binary = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=True).stdout.strip()
    prose: dict[str, list[tuple[float, float, int]]] = {"direct": [], "tether": []}
    calls: dict[str, list[Call]] = {"direct": [], "tether": []}
    server = llama_server(binary, str(bundled_model_path()), ctx=4096, threads=args.threads)
    with server as url, tether_backend_server(url) as tether:
        bases = {"direct": f"{url}/v1", "tether": tether}
        props = httpx.get(f"{url}/props", timeout=10).json()
        template = ChatTemplate(
            props["chat_template"], bos_token=props["bos_token"], eos_token=props["eos_token"]
        )
        for side in ("direct", "tether"):  # load pages, fill the system prompt's cache
            stream(bases[side], [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hi"}], 8)
        # Prose first, then the tool calls: each phase keeps its own shared prefix in the slot's cache.
        for i in range(args.rounds):
            for j, side in enumerate(("direct", "tether") if i % 2 == 0 else ("tether", "direct")):
                story = f"Write a long story about {TOPICS[(2 * i + j) % len(TOPICS)]}."
                messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": story}]
                prose[side].append(stream(bases[side], messages, args.tokens))
        tether_call(tether, "Rome")
        direct_call(url, template, "Rome")
        for i in range(args.rounds):
            for j, side in enumerate(("direct", "tether") if i % 2 == 0 else ("tether", "direct")):
                city = CITIES[(2 * i + j) % len(CITIES)]
                calls[side].append(
                    tether_call(tether, city) if side == "tether" else direct_call(url, template, city)
                )
    report(prose, calls, args)


def report(
    prose: dict[str, list[tuple[float, float, int]]], calls: dict[str, list[Call]], args: argparse.Namespace
) -> None:
    def decode(side: str) -> float:
        return sum(n - 1 for _, _, n in prose[side]) / sum(d for _, d, _ in prose[side])

    def ttft(side: str) -> float:
        return statistics.median(t for t, _, _ in prose[side])

    def per_call(side: str) -> float:
        return statistics.median(s for s, _, _ in calls[side])

    def call_rate(side: str) -> float:
        return sum(n for _, n, _ in calls[side]) / sum(s for s, _, _ in calls[side])

    print(
        f"bench_backend: bundled SmolLM2-135M Q4_1, one llama-server slot, {args.threads} threads, "
        f"{args.rounds} rounds per side alternating, greedy"
    )
    print(f"{'':30}{'llama-server':>14}{'tether->llama':>15}{'ratio':>8}")
    rows = [
        ("prose decode tok/s", decode("direct"), decode("tether")),
        ("prose TTFT s (median)", ttft("direct"), ttft("tether")),
        ("forced call s (median)", per_call("direct"), per_call("tether")),
        ("grammar-armed tok/s", call_rate("direct"), call_rate("tether")),
    ]
    for name, direct, via in rows:
        print(f"{name:30}{direct:>14.3f}{via:>15.3f}{via / direct:>7.2f}x")
    print("forced call, direct = /completion with llama.cpp's own JSON-schema grammar on tether's prompt")
    for side in ("direct", "tether"):
        unparsed = sum(1 for _, _, a in calls[side] if not a)
        print(
            f"  {side}: {unparsed} of {len(calls[side])} calls unparsed;",
            sorted({a for _, _, a in calls[side]})[:3],
        )


if __name__ == "__main__":
    main()
