"""Load: N concurrent clients against ``tether serve`` on the bundled model; nothing may be lost.

Clients are mixed: streaming and plain, some offering a tool, some hanging up early (a
stream closed after its first event, a plain request abandoned after 0.3 s). Every
request must end one of four ways: answered (200), refused with 429 or 503 carrying
``Retry-After``, an error response, or — for the clients that hang up on purpose — hung
up. A request that gets no response and no error within the client timeout is *lost*;
the count must be 0. Afterwards ``/health`` must show every slot free and the queue empty.

Usage: .venv/bin/python -m benchmarks.bench_load [--clients 200] [--slots 2] [--queue-limit 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import httpx

from benchmarks._servers import tether_server
from tether.engine.locate import bundled_model_path

MODEL = "smollm2-135m-instruct"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
PROMPTS = [
    "Say hello.",
    "What is the weather in Paris?",
    "Count to five.",
    "Name a colour.",
    "Write a haiku.",
]


@dataclass
class Outcome:
    kind: str  # ok | refused | error | hung_up | lost
    status: int = 0
    seconds: float = 0.0
    retry_after: bool = False
    detail: str = ""


def body_for(i: int, rng: random.Random) -> tuple[dict[str, Any], bool, bool]:
    """(request body, streaming, hangs up early) for client ``i``."""
    stream = rng.random() < 0.5
    hang_up = rng.random() < 0.2
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
        "max_tokens": 24,
        "temperature": 0,
        "stream": stream,
    }
    if rng.random() < 0.3:
        body["tools"] = TOOLS
    return body, stream, hang_up


async def one(http: httpx.AsyncClient, base: str, i: int, rng: random.Random, timeout: float) -> Outcome:
    body, stream, hang_up = body_for(i, rng)
    url = f"{base}/chat/completions"
    started = time.perf_counter()
    try:
        if stream:
            async with http.stream("POST", url, json=body, timeout=timeout) as r:
                if r.status_code != 200:
                    await r.aread()
                    return classify(r, started)
                async for line in r.aiter_lines():
                    if hang_up and line.startswith("data: "):
                        return Outcome("hung_up", 200, time.perf_counter() - started)
                    if line.startswith("data: {") and '"error"' in line:
                        return Outcome("error", 200, time.perf_counter() - started, detail=line[:200])
                    if line == "data: [DONE]":
                        return Outcome("ok", 200, time.perf_counter() - started)
                return Outcome(
                    "lost", 200, time.perf_counter() - started, detail="stream ended without [DONE]"
                )
        limit = 0.3 if hang_up else timeout
        try:
            r = await http.post(url, json=body, timeout=httpx.Timeout(timeout, read=limit))
        except httpx.ReadTimeout:
            if hang_up:
                return Outcome("hung_up", 0, time.perf_counter() - started)
            raise
        return classify(r, started)
    except httpx.TimeoutException as exc:
        return Outcome("lost", 0, time.perf_counter() - started, detail=f"no answer: {type(exc).__name__}")
    except httpx.HTTPError as exc:
        return Outcome("error", 0, time.perf_counter() - started, detail=repr(exc)[:200])


def classify(r: httpx.Response, started: float) -> Outcome:
    seconds = time.perf_counter() - started
    if r.status_code == 200:
        return Outcome("ok", 200, seconds)
    retry = "retry-after" in r.headers
    if r.status_code in (429, 503):
        return Outcome("refused", r.status_code, seconds, retry_after=retry)
    return Outcome("error", r.status_code, seconds, detail=r.text[:200])


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def patient(
    http: httpx.AsyncClient, base: str, i: int, seed: float, timeout: float, retries: int
) -> list[Outcome]:
    """One client that retries refusals after ``Retry-After``, as the OpenAI SDKs do; every attempt."""
    tries: list[Outcome] = []
    for attempt in range(retries + 1):
        tries.append(await one(http, base, i, random.Random(seed), timeout))
        if tries[-1].kind != "refused":
            break
        if attempt < retries:
            await asyncio.sleep(1.0 + random.Random(seed + attempt).random())
    return tries


async def drive(base: str, clients: int, seed: int, timeout: float, retries: int) -> list[list[Outcome]]:
    rng = random.Random(seed)
    limits = httpx.Limits(max_connections=clients + 8, max_keepalive_connections=0)
    async with httpx.AsyncClient(limits=limits) as http:
        tasks = [patient(http, base, i, rng.random(), timeout, retries) for i in range(clients)]
        return list(await asyncio.gather(*tasks))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--queue-limit", type=int, default=16)
    parser.add_argument("--queue-timeout", type=float, default=30.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--timeout", type=float, default=120.0, help="client timeout: no answer by then is lost"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--retries", type=int, default=0, help="retries per client after 429/503 (SDK style)")
    args = parser.parse_args()
    extra = ["--slots", str(args.slots), "--queue-limit", str(args.queue_limit)]
    extra += ["--queue-timeout", str(args.queue_timeout), "--log-level", "warning"]
    with tether_server(str(bundled_model_path()), ctx=4096, threads=args.threads, extra=extra) as base:
        root = base.removesuffix("/v1")
        wall = time.perf_counter()
        results = asyncio.run(drive(base, args.clients, args.seed, args.timeout, args.retries))
        wall = time.perf_counter() - wall
        time.sleep(0.5)
        health = httpx.get(f"{root}/health", timeout=10).json()["scheduler"]
    outcomes = [o for tries in results for o in tries]
    finals = Counter(tries[-1].kind for tries in results)
    kinds = Counter(o.kind for o in outcomes)
    refused = [o for o in outcomes if o.kind == "refused"]
    ok = [o.seconds for o in outcomes if o.kind == "ok"]
    report = {
        "clients": args.clients,
        "slots": args.slots,
        "queue_limit": args.queue_limit,
        "retries_allowed": args.retries,
        "requests_sent": len(outcomes),
        "ok_200": kinds["ok"],
        "refused_429": sum(o.status == 429 for o in refused),
        "refused_503": sum(o.status == 503 for o in refused),
        "refused_without_retry_after": sum(not o.retry_after for o in refused),
        "errors": kinds["error"],
        "hung_up_on_purpose": kinds["hung_up"],
        "lost": kinds["lost"],
        "clients_answered_in_the_end": finals["ok"],
        "p50_ok_s": round(pct(ok, 0.5), 3),
        "p99_ok_s": round(pct(ok, 0.99), 3),
        "mean_ok_s": round(statistics.fmean(ok), 3) if ok else 0.0,
        "wall_s": round(wall, 2),
        "health_after": {
            k: health[k] for k in ("busy_slots", "queue_depth", "cancelled", "rejected", "timed_out")
        },
    }
    print(json.dumps(report, indent=2))
    details = [o.detail for o in outcomes if o.kind in ("error", "lost") and o.detail]
    for line in details[:10]:
        print("  ", line)
    healthy = health["busy_slots"] == 0 and health["queue_depth"] == 0
    print(f"lost: {kinds['lost']}   health afterwards: {'busy_slots 0, queue empty' if healthy else health}")
    if kinds["lost"] or not healthy or report["refused_without_retry_after"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
