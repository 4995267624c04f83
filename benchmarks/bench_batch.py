"""Many agents, one model: continuous batching, shared prefixes and jump-forward, side by side in one run.

Servers, all on the bundled model with 2048 tokens per slot, started together and measured one at a
time (never two decoding at once), with rounds interleaved so drift hits every side alike:

* ``batched``   — ``tether serve --slots 8`` (one llama.cpp context, continuous batching; the default)
* ``per-slot``  — ``tether serve --slots 8 --batching off`` (a context per slot: the old engine)
* ``llama-server`` — llama.cpp's own server, ``-np 8``, built from the same pinned source
* ``no-spec``   — ``tether serve --slots 8 --no-speculate`` (batched, without jump-forward and drafts)

Measured:
1. aggregate completion tok/s with N = 1, 2, 4, 8 concurrent prose requests (greedy, ``--tokens``
   each), and serial (8 requests one after another); ratios to serial and to llama-server;
2. 8 agents sharing a ~1,300-token system prompt, sent at once: TTFT and prompt tokens evaluated;
3. strict tool calls (tether's default preset) with and without jump-forward + speculation, and
   prose decode with and without (speculation must leave unconstrained decoding alone);
4. the batched runner's per-step profile (from ``/health``): time in ``llama_decode`` vs the rest, and
   per strict call: decode steps, tokens evaluated and time in ``llama_decode`` on each side;
5. llama.cpp's own decode costs with no server (``benchmarks/_kernel.py``), after the servers have
   stopped: one sequence vs eight per step, and one sequence with K tokens per step. These bound what
   any server can gain from batching or from appending forced and drafted tokens on this machine.

Usage: .venv/bin/python -m benchmarks.bench_batch [--rounds 2] [--tokens 96] [--threads 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

from benchmarks._kernel import kernel_costs
from benchmarks._servers import llama_server, tether_server
from benchmarks.bench_backend import TOOL as WEATHER_TOOL
from tether.engine.locate import bundled_model_path
from tether.evals.name_fix import TOOLS as NAME_FIX_TOOLS

MODEL = "smollm2-135m-instruct"
# A connection per request: llama-server closes a kept-alive connection after a few requests, and a
# client that reuses it just then gets "server disconnected" (the same for every side).
FRESH = httpx.Limits(max_keepalive_connections=0)
TOPICS = [
    "a lighthouse keeper", "a city under the sea", "a robot learning to paint", "a dragon who cannot fly",
    "the last bookshop", "a journey across the desert", "a clockmaker's apprentice", "a winter festival",
]  # fmt: skip
TOOL_DOC = (
    "Tool {i}: `task_{i}` runs step {i} of the release checklist. Arguments: `target` (string, the package "
    "or file it acts on), `dry_run` (boolean, default false), `notes` (string, optional). It returns a JSON "
    "object with `status`, `log` and `duration_ms`. Use it only after the previous step succeeded.\n"
)
TOOLS = (
    [  # the same tools tether's own name-fix set offers, and bench_backend's weather tool
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in NAME_FIX_TOOLS[:1]
    ]
    + [WEATHER_TOOL]
)
CALLS = [
    "Read the file src/payments/invoice_renderer.py", "What is the weather in Buenos Aires, in celsius?",
    "Read the file docs/architecture/storage_layer.md", "What is the weather in San Francisco, in fahrenheit?",
    "Read the file tests/integration/test_checkout_flow.py", "What is the weather in Kuala Lumpur, in celsius?",
]  # fmt: skip


async def _chat(
    client: httpx.AsyncClient, base: str, body: dict[str, Any]
) -> tuple[float, float, dict[str, Any]]:
    """Stream one chat completion: (seconds to first content, total seconds, usage)."""
    started = time.perf_counter()
    first: float | None = None
    usage: dict[str, Any] = {}
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    async with client.stream("POST", f"{base}/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if first is None and chunk.get("choices") and chunk["choices"][0].get("delta"):
                first = time.perf_counter() - started
            usage = chunk.get("usage") or usage
    return first or 0.0, time.perf_counter() - started, usage


def _prose(i: int, tokens: int) -> dict[str, Any]:
    story = f"Write a long story about {TOPICS[i % len(TOPICS)]}."
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": story}],
        "max_tokens": tokens,
        "temperature": 0,
    }


async def _plain(
    client: httpx.AsyncClient, base: str, body: dict[str, Any]
) -> tuple[float, float, dict[str, Any]]:
    started = time.perf_counter()
    r = await client.post(f"{base}/v1/chat/completions", json=body)
    r.raise_for_status()
    return 0.0, time.perf_counter() - started, r.json()["usage"]


async def throughput(base: str, n: int, tokens: int, offset: int, *, stream: bool = True) -> float:
    """Aggregate completion tok/s of ``n`` concurrent requests; ``n = 0``: eight, one after another."""
    ask = _chat if stream else _plain
    async with httpx.AsyncClient(timeout=600, limits=FRESH) as client:
        started = time.perf_counter()
        if n == 0:
            results = [await ask(client, base, _prose(offset + i, tokens)) for i in range(8)]
        else:
            results = await asyncio.gather(*[ask(client, base, _prose(offset + i, tokens)) for i in range(n)])
        wall = time.perf_counter() - started
    return sum(int(u.get("completion_tokens", 0)) for _, _, u in results) / wall


def _step_ms(base: str, run: Callable[[], float], into: list[float]) -> float:
    """``run()``, noting the batched runner's mean llama_decode time per step meanwhile (ms)."""
    before = httpx.get(f"{base}/health", timeout=10).json().get("batch")
    value = run()
    after = httpx.get(f"{base}/health", timeout=10).json().get("batch")
    if before and after and after["steps"] > before["steps"]:
        into.append((after["decode_s"] - before["decode_s"]) / (after["steps"] - before["steps"]) * 1000)
    return value


async def shared_prefix(base: str, nonce: str) -> tuple[float, float, int, int]:
    """8 agents with one ~1,300-token system prompt at once: mean and max TTFT, prompt tokens, evaluated."""
    system = f"Session {nonce}. You coordinate a release. " + "".join(TOOL_DOC.format(i=i) for i in range(18))
    bodies = [
        {
            "model": MODEL,
            "max_tokens": 8,
            "temperature": 0,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": f"Status of step {i}?"},
            ],
        }
        for i in range(8)
    ]
    async with httpx.AsyncClient(timeout=600, limits=FRESH) as client:
        results = await asyncio.gather(*[_chat(client, base, b) for b in bodies])
    ttft = [r[0] for r in results]
    prompt = sum(int(r[2].get("prompt_tokens", 0)) for r in results)
    cached = sum(int((r[2].get("prompt_tokens_details") or {}).get("cached_tokens", 0)) for r in results)
    return statistics.mean(ttft), max(ttft), prompt, prompt - cached


async def tool_call(base: str, i: int) -> tuple[float, int]:
    body = {"model": MODEL, "max_tokens": 96, "temperature": 0, "tools": TOOLS, "tool_choice": "required"}
    body["parallel_tool_calls"] = False  # one call: the time of a call, not of how many the model adds
    body["messages"] = [{"role": "user", "content": CALLS[i % len(CALLS)]}]
    async with httpx.AsyncClient(timeout=600, limits=FRESH) as client:
        started = time.perf_counter()
        r = await client.post(f"{base}/v1/chat/completions", json=body)
        r.raise_for_status()
        return time.perf_counter() - started, int(r.json()["usage"]["completion_tokens"])


def _profiled_call(base: str, i: int) -> tuple[float, int, dict[str, float]]:
    """``tool_call`` with what the runner did for it: steps, tokens evaluated, seconds in llama_decode."""
    before = httpx.get(f"{base}/health", timeout=10).json()["batch"]
    took, tokens = asyncio.run(tool_call(base, i))
    after = httpx.get(f"{base}/health", timeout=10).json()["batch"]
    return took, tokens, {k: after[k] - before[k] for k in ("steps", "decoded", "decode_s")}


def _alternate(sides: list[str], rounds: int, run: Callable[[str, int], Any]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {s: [] for s in sides}
    for r in range(rounds):
        for side in sides if r % 2 == 0 else list(reversed(sides)):
            out[side].append(run(side, r))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--calls", type=int, default=12, help="strict tool calls per side")
    args = parser.parse_args()
    model = str(bundled_model_path())
    script = Path(__file__).resolve().parents[1] / "scripts" / "install_llama_server.sh"
    binary = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=True).stdout.strip()
    common = ["--slots", "8"]
    with ExitStack() as stack:
        bases = {
            "batched": stack.enter_context(
                tether_server(model, ctx=2048, threads=args.threads, extra=common)
            ),
            "per-slot": stack.enter_context(
                tether_server(model, ctx=2048, threads=args.threads, extra=[*common, "--batching", "off"])
            ),
            "no-spec": stack.enter_context(
                tether_server(model, ctx=2048, threads=args.threads, extra=[*common, "--no-speculate"])
            ),
            "llama-server": stack.enter_context(
                llama_server(binary, model, ctx=2048, threads=args.threads, slots=8)
            )
            + "/v1",
        }
        bases = {k: v.removesuffix("/v1") for k, v in bases.items()}
        for base in bases.values():  # warm up: pages, masks, the first allocations
            asyncio.run(throughput(base, 2, 8, 0))
        sides = ["batched", "per-slot", "llama-server"]
        rates: dict[int, dict[str, list[float]]] = {}
        step_ms: dict[int, list[float]] = {1: [], 8: []}

        def measure(side: str, n: int, r: int, stream: bool = True) -> float:
            def run() -> float:
                return asyncio.run(throughput(bases[side], n, args.tokens, r, stream=stream))

            return (
                _step_ms(bases[side], run, step_ms[n])
                if side == "batched" and n in step_ms and stream
                else run()
            )

        for level in (0, 1, 2, 4, 8):

            def at_level(side: str, r: int, n: int = level) -> float:
                return measure(side, n, r)

            rates[level] = _alternate(sides, args.rounds, at_level)
        rates[-8] = _alternate(["batched", "llama-server"], args.rounds, lambda s, r: measure(s, 8, r, False))
        prefix = _alternate(
            ["batched", "llama-server"],
            args.rounds,
            lambda s, r: asyncio.run(shared_prefix(bases[s], uuid.uuid4().hex[:8])),
        )
        calls = _alternate(["batched", "no-spec"], args.calls, lambda s, r: _profiled_call(bases[s], r))
        prose = _alternate(  # the same code on both sides (nothing to force or draft): many rounds
            ["batched", "no-spec"],
            args.rounds * 4,
            lambda s, r: asyncio.run(throughput(bases[s], 1, args.tokens, r)),
        )
        profile = httpx.get(f"{bases['batched']}/health", timeout=10).json().get("batch", {})
    costs = kernel_costs(model, threads=args.threads)
    report(args, rates, prefix, calls, prose, profile, step_ms)
    report_kernel(costs, rates, calls)


def report(
    args: argparse.Namespace,
    rates: dict[int, dict[str, list[float]]],
    prefix: dict[str, list[Any]],
    calls: dict[str, list[Any]],
    prose: dict[str, list[Any]],
    profile: dict[str, Any],
    step_ms: dict[int, list[float]],
) -> None:
    mean = statistics.mean
    print(f"## bench_batch: {args.rounds} rounds, {args.tokens} tokens per request, {args.threads} threads\n")
    print("| aggregate tok/s | serial | N=1 | N=2 | N=4 | N=8 | N=8 / serial |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for side in ("batched", "per-slot", "llama-server"):
        row = [mean(rates[n][side]) for n in (0, 1, 2, 4, 8)]
        print(f"| {side} | " + " | ".join(f"{v:.1f}" for v in row) + f" | {row[4] / row[0]:.2f}× |")
    single = mean(rates[1]["batched"]) / mean(rates[1]["llama-server"])
    agg = mean(rates[8]["batched"]) / mean(rates[8]["llama-server"])
    print(f"\nbatched vs llama-server: single stream {single:.2f}×, N=8 aggregate {agg:.2f}×")
    plain = mean(rates[-8]["batched"]) / mean(rates[-8]["llama-server"])
    print(f"N=8 without streaming: batched {mean(rates[-8]['batched']):.1f} tok/s, llama-server "
          f"{mean(rates[-8]['llama-server']):.1f} tok/s ({plain:.2f}×)")  # fmt: skip
    if step_ms[1] and step_ms[8]:
        print(f"batched llama_decode per step: {mean(step_ms[1]):.1f} ms with 1 stream, "
              f"{mean(step_ms[8]):.1f} ms with 8 streaming")  # fmt: skip
    print("\n| 8 agents, shared ~1,300-token prefix | mean TTFT s | max TTFT s | prompt tokens | evaluated |")
    print("|---|---:|---:|---:|---:|")
    for side, rows in prefix.items():
        print(f"| {side} | {mean(r[0] for r in rows):.2f} | {mean(r[1] for r in rows):.2f} | "
              f"{mean(r[2] for r in rows):.0f} | {mean(r[3] for r in rows):.0f} |")  # fmt: skip
    on, off = calls["batched"], calls["no-spec"]
    t_on, t_off = mean(c[0] for c in on), mean(c[0] for c in off)
    print(f"\nstrict tool call: {t_off:.3f} s without jump-forward + speculation, {t_on:.3f} s with "
          f"({t_off / t_on:.2f}× faster; {mean(c[1] for c in on):.1f} vs {mean(c[1] for c in off):.1f} tokens)")  # fmt: skip
    p_on, p_off = mean(prose["batched"]), mean(prose["no-spec"])
    print(f"unconstrained decode: {p_on:.1f} tok/s with, {p_off:.1f} without ({p_on / p_off:.3f}×)")
    if profile.get("steps"):
        steps = profile["steps"]
        print(f"\nbatched runner profile: {steps} steps, {profile['decode_s'] / steps * 1000:.2f} ms in llama_decode "
              f"and {(profile['step_s'] - profile['decode_s']) / steps * 1000:.2f} ms around it per step; "
              f"{profile['forced']} tokens forced, {profile['accepted']}/{profile['drafted']} drafts accepted, "
              f"{profile['shared']} prompt tokens shared")  # fmt: skip


def report_kernel(
    costs: dict[str, float], rates: dict[int, dict[str, list[float]]], calls: dict[str, list[Any]]
) -> None:
    """Where the time goes: the strict calls' decode profile, and llama.cpp's own costs with no server."""
    mean = statistics.mean
    print("\n| strict call, per call | decode steps | tokens evaluated | ms in llama_decode | ms in all |")
    print("|---|---:|---:|---:|---:|")
    for side in ("no-spec", "batched"):
        rows = calls[side]
        print(f"| {side} | {mean(c[2]['steps'] for c in rows):.1f} | {mean(c[2]['decoded'] for c in rows):.1f} | "
              f"{mean(c[2]['decode_s'] for c in rows) * 1000:.0f} | {mean(c[0] for c in rows) * 1000:.0f} |")  # fmt: skip
    one, eight = costs["1x1"], costs["8x1"]
    print("\n| llama.cpp alone, ms per decode | 1x1 | 8x1 | 1x2 | 1x4 | 1x8 |")
    print("|---|---:|---:|---:|---:|---:|")
    print(
        "| one context, 8 KV streams | "
        + " | ".join(f"{costs[k]:.1f}" for k in ("1x1", "8x1", "1x2", "1x4", "1x8"))
        + " |"
    )
    served = mean(rates[8]["batched"]) / mean(rates[0]["batched"])
    print(f"\nceiling at N=8 over serial decoding: 8 x {one:.1f} / {eight:.1f} = {8 * one / eight:.2f}x "
          f"(batched server: {served:.2f}x over its serial requests)")  # fmt: skip
    appended = (costs["1x8"] - one) / 7
    print(f"a token appended to a step (forced or drafted) still costs {appended:.1f} ms, "
          f"{appended / one:.0%} of a one-token step")  # fmt: skip


if __name__ == "__main__":
    main()
