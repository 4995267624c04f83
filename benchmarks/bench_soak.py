"""Soak: hours of mixed traffic against ``tether serve`` on the bundled model; nothing may grow.

A leak of a few kilobytes per request is invisible in a two-minute test and fatal in a week. This
drives ``--clients`` closed-loop clients for ``--minutes`` through every protocol (chat streamed
and not, Anthropic messages, the Responses API, Ollama), with and without tools, with a fresh
tool set and schema now and then (the per-request caches), workflow sessions, server-side tools,
embeddings, and clients that hang up mid-stream. First ``--prime`` requests with new tool sets fill
the per-tool-set caches; then every ``--interval`` seconds it pauses the
clients, waits until nothing is in flight, and samples the server process: resident memory, open
descriptors and threads (from ``/proc``), asyncio tasks and every cache's fill (``/metrics``),
and the p50/p99 latency of that interval's requests.

Pass (printed, and the exit status): after ``--warmup`` minutes, resident memory less the prefix
cache's bytes (bounded in bytes and reported, like every cache) grows less than 5 % (the mean of
the last three samples against the first three); descriptors, threads and tasks (idle samples)
in the second half of the steady run stay within one of the first half's most; the p99 of the last
third of the run is within 1.5× that of the first third (this machine's speed drifts,
docs/benchmarks.md); every cache stays within its capacity; no request is lost and none ends in a
server error.

Usage: .venv/bin/python -m benchmarks.bench_soak [--minutes 60] [--out soak.json] [--plot soak.png]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from benchmarks._servers import tether_process
from tether.engine.locate import bundled_model_path

MODEL = "smollm2-135m-instruct"
WORKFLOW = "name: notes\ntools: [read_file, finish]\nsteps: [read_file]\nterminal: finish\n"
PROMPTS = [
    "Say hello.",
    "What is the weather in Paris?",
    "Count to five.",
    "Name a colour.",
    "Show notes.txt.",
]


def tool(name: str, description: str, **props: str) -> dict[str, Any]:
    schema = {
        "type": "object",
        "properties": {k: {"type": v} for k, v in props.items()},
        "required": list(props),
    }
    return {"type": "function", "function": {"name": name, "description": description, "parameters": schema}}


def tool_set(rng: random.Random) -> list[dict[str, Any]]:
    """One of a few common sets, or (one request in four) a set nobody sent before."""
    if rng.random() < 0.25:
        n = rng.randrange(10**9)
        props = {f"field_{n % 97}": rng.choice(["string", "integer", "number", "boolean"])}
        return [tool(f"tool_{n}", f"Looks up record {n}.", **props)]
    common = [
        [tool("get_weather", "Current weather for a city.", city="string")],
        [tool("read_file", "Read a file.", path="string"), tool("finish", "End the task.")],
        [tool("convert", "Convert an amount.", amount="number", to="string")],
    ]
    return rng.choice(common)


@dataclass
class Outcome:
    kind: str  # ok | hung_up | refused | error | lost
    seconds: float
    route: str
    detail: str = ""


@dataclass
class Sample:
    minute: float
    rss_mb: float
    fds: int
    threads: int
    tasks: int
    requests: int
    p50_s: float
    p99_s: float
    prefix_ram_mb: float = 0.0
    caches: dict[str, tuple[int, int]] = field(default_factory=dict)


def proc_figures(pid: int) -> tuple[float, int, int]:
    """Resident MiB, open descriptors and threads of ``pid``, from ``/proc``."""
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    rss_kb = int(fields["VmRSS"].split()[0])
    return rss_kb / 1024, len(os.listdir(f"/proc/{pid}/fd")), int(fields["Threads"])


def metric_figures(text: str) -> tuple[int, dict[str, tuple[int, int]]]:
    tasks = 0
    entries: dict[str, int] = {}
    capacity: dict[str, int] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "tether_asyncio_tasks":
                tasks = int(s.value)
            elif s.name == "tether_cache_entries":
                entries[s.labels["cache"]] = int(s.value)
            elif s.name == "tether_cache_capacity":
                capacity[s.labels["cache"]] = int(s.value)
    return tasks, {name: (entries[name], capacity.get(name, 0)) for name in entries}


class Traffic:
    """The clients: each picks a request kind at random and loops until told to stop."""

    def __init__(self, base: str, seed: int, timeout: float) -> None:
        self.base = base
        self.rng = random.Random(seed)
        self.timeout = timeout
        self.outcomes: list[Outcome] = []
        self.running = asyncio.Event()
        self.running.set()
        self.in_flight = 0
        self.stopped = False
        self.sessions = 0

    async def client(self, http: httpx.AsyncClient) -> None:
        while not self.stopped:
            await self.running.wait()
            if self.stopped:
                return
            self.in_flight += 1
            try:
                self.outcomes.append(await self.one(http))
            finally:
                self.in_flight -= 1

    async def one(self, http: httpx.AsyncClient) -> Outcome:
        rng = self.rng
        kind = rng.choices(
            [
                "chat",
                "stream",
                "hang_up",
                "anthropic",
                "responses",
                "ollama",
                "session",
                "server_tools",
                "embed",
            ],
            weights=[3, 3, 1, 2, 2, 1, 1, 1, 1],
        )[0]
        prompt = rng.choice(PROMPTS)
        tools = tool_set(rng) if rng.random() < 0.5 else []
        started = time.perf_counter()
        try:
            return await self._send(http, kind, prompt, tools, started)
        except httpx.TimeoutException as exc:
            return Outcome("lost", time.perf_counter() - started, kind, f"no answer: {type(exc).__name__}")
        except httpx.HTTPError as exc:
            return Outcome("error", time.perf_counter() - started, kind, repr(exc)[:200])

    async def _send(
        self, http: httpx.AsyncClient, kind: str, prompt: str, tools: list[dict[str, Any]], started: float
    ) -> Outcome:
        base, t = self.base, self.timeout
        chat: dict[str, Any] = {
            "model": MODEL,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": 24,
            "temperature": 0,
            **({"tools": tools} if tools else {}),
        }
        headers: dict[str, str] = {}
        if kind in ("stream", "hang_up"):
            async with http.stream(
                "POST", f"{base}/v1/chat/completions", json={**chat, "stream": True}, timeout=t
            ) as r:
                if r.status_code != 200:
                    await r.aread()
                    return self._classify(r.status_code, r.text, started, kind)
                async for line in r.aiter_lines():
                    if kind == "hang_up" and line.startswith("data: "):
                        return Outcome("hung_up", time.perf_counter() - started, kind)
                    if line.startswith("data: {") and '"error"' in line:
                        return Outcome("error", time.perf_counter() - started, kind, line[:200])
                    if line == "data: [DONE]":
                        return Outcome("ok", time.perf_counter() - started, kind)
                return Outcome("lost", time.perf_counter() - started, kind, "stream ended without [DONE]")
        if kind == "anthropic":
            body: dict[str, Any] = {"model": MODEL, "max_tokens": 24, "messages": chat["messages"]}
            if tools:
                body["tools"] = [
                    {
                        "name": f["function"]["name"],
                        "description": f["function"]["description"],
                        "input_schema": f["function"]["parameters"],
                    }
                    for f in tools
                ]
            r = await http.post(f"{base}/v1/messages", json=body, timeout=t)
        elif kind == "responses":
            body = {
                "model": MODEL,
                "input": prompt,
                "max_output_tokens": 24,
                "tools": [{"type": "function", **f["function"]} for f in tools],
            }
            r = await http.post(f"{base}/v1/responses", json=body, timeout=t)
        elif kind == "ollama":
            body = {
                "model": MODEL,
                "messages": chat["messages"],
                "stream": False,
                "options": {"num_predict": 24},
            }
            r = await http.post(f"{base}/api/chat", json=body, timeout=t)
        elif kind == "embed":
            r = await http.post(
                f"{base}/v1/embeddings", json={"model": "all-minilm-l6-v2", "input": [prompt]}, timeout=t
            )
        else:
            if kind == "session":
                self.sessions += 1
                headers["X-Tether-Session"] = f"soak-{self.sessions % 3000}"
                headers["X-Tether-Workflow"] = "notes"
                chat["tools"] = [
                    tool("read_file", "Read a file.", path="string"),
                    tool("finish", "End the task."),
                ]
            if kind == "server_tools":
                chat.pop("tools", None)  # the server's own read_file and list_dir are offered
                chat["messages"] = [{"role": "user", "content": "Read notes.txt and tell me what it says."}]
            r = await http.post(f"{base}/v1/chat/completions", json=chat, headers=headers, timeout=t)
        return self._classify(r.status_code, r.text, started, kind)

    @staticmethod
    def _classify(status: int, text: str, started: float, route: str) -> Outcome:
        seconds = time.perf_counter() - started
        if status == 200:
            return Outcome("ok", seconds, route)
        if status in (429, 503):
            return Outcome("refused", seconds, route, text[:200])
        return Outcome("error" if status >= 500 else "client_error", seconds, route, text[:200])

    async def quiesce(self, limit: float = 120.0) -> None:
        """Stop new requests and wait until none is in flight."""
        self.running.clear()
        deadline = time.monotonic() + limit
        while self.in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.05)


async def prime(http: httpx.AsyncClient, base: str, n: int, clients: int, timeout: float) -> None:
    """``n`` requests, each with a tool set nobody sent before: the per-tool-set caches (constraint
    plans, value-pattern indexes, tool vectors) are full before the clock starts, so that growth
    after the warm-up is growth, not filling."""
    rng = random.Random(-1)
    sets = [[tool(f"prime_{i}", f"Looks up record {i}.", **{f"field_{i}": rng.choice(["string", "integer"])})]
            for i in range(n)]  # fmt: skip
    queue: asyncio.Queue[list[dict[str, Any]]] = asyncio.Queue()
    for s in sets:
        queue.put_nowait(s)

    async def worker() -> None:
        while not queue.empty():
            tools = queue.get_nowait()
            body = {
                "model": MODEL,
                "messages": [{"role": "user", "content": "Look up record 7."}],
                "tools": tools,
            }
            await http.post(f"{base}/v1/chat/completions", json={**body, "max_tokens": 8}, timeout=timeout)

    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(clients)))
    print(f"primed with {n} new tool sets in {time.monotonic() - started:.0f} s", flush=True)


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def soak(base: str, pid: int, args: argparse.Namespace) -> tuple[list[Sample], dict[str, int]]:
    traffic = Traffic(base, args.seed, args.timeout)
    samples: list[Sample] = []
    seen = 0
    # No keep-alive: a connection per request (the accept path is exercised, and an idle sample sees
    # no client's socket).
    limits = httpx.Limits(max_connections=args.clients + 4, max_keepalive_connections=0)
    async with httpx.AsyncClient(limits=limits) as http:
        await prime(http, base, args.prime, args.clients, args.timeout)
        start = time.monotonic()
        clients = [asyncio.create_task(traffic.client(http)) for _ in range(args.clients)]
        while True:
            await asyncio.sleep(args.interval)
            await traffic.quiesce()
            await asyncio.sleep(0.5)  # let the server finish its own clean-up of the last responses
            rss, fds, threads = proc_figures(pid)
            tasks, caches = metric_figures((await http.get(f"{base}/metrics", timeout=30)).text)
            health = (await http.get(f"{base}/health", timeout=30)).json()
            prefix = health.get("prefix_cache", {}).get("ram", {})
            if prefix:  # bounded in bytes, not entries
                caches["prefix_cache_ram_bytes"] = (int(prefix["bytes"]), int(prefix["limit_bytes"]))
            fresh = [o.seconds for o in traffic.outcomes[seen:] if o.kind == "ok"]
            seen = len(traffic.outcomes)
            minute = (time.monotonic() - start) / 60
            samples.append(
                Sample(
                    minute=minute,
                    rss_mb=rss,
                    fds=fds,
                    threads=threads,
                    tasks=tasks,
                    requests=len(fresh),
                    p50_s=pct(fresh, 0.5),
                    p99_s=pct(fresh, 0.99),
                    prefix_ram_mb=caches.get("prefix_cache_ram_bytes", (0, 0))[0] / 2**20,
                    caches=caches,
                )
            )
            s = samples[-1]
            print(
                f"{minute:6.1f} min  rss {rss:7.1f} MiB  fds {fds:3d}  threads {threads:3d}  tasks {tasks:3d}  "
                f"requests {len(fresh):4d}  p50 {s.p50_s:5.2f} s  p99 {s.p99_s:5.2f} s  "
                f"prefix cache {s.prefix_ram_mb:5.1f} MiB",
                flush=True,
            )
            if minute >= args.minutes:
                break
            traffic.running.set()
        traffic.stopped = True
        traffic.running.set()
        await asyncio.gather(*clients)
    counts = Counter(o.kind for o in traffic.outcomes)
    print("outcomes:", dict(counts), " by route:", dict(Counter(o.route for o in traffic.outcomes)))
    for o in [o for o in traffic.outcomes if o.kind in ("error", "lost", "client_error")][:10]:
        print(f"  {o.kind} {o.route}: {o.detail}")
    return samples, dict(counts)


def verdict(samples: list[Sample], warmup: float, counts: dict[str, int]) -> list[tuple[str, str, bool]]:
    """(criterion, figures, passed) rows."""
    steady = [s for s in samples if s.minute >= warmup] or samples[-1:]
    first, last = steady[:3], steady[-3:]
    # The prefix cache's RAM tier is bounded in bytes, which it reports (checked with the caches
    # below); it fills as long prompts come, so memory is judged without it, and shown with it.
    rss0 = statistics.mean(s.rss_mb for s in first)
    rss1 = statistics.mean(s.rss_mb for s in last)
    net0 = statistics.mean(s.rss_mb - s.prefix_ram_mb for s in first)
    net1 = statistics.mean(s.rss_mb - s.prefix_ram_mb for s in last)
    growth = (net1 - net0) / net0
    rows = [
        (
            "resident memory, less the prefix cache's bytes, grows < 5 % after warm-up",
            f"{net0:.1f} → {net1:.1f} MiB ({growth:+.1%}); with the prefix cache {rss0:.1f} → {rss1:.1f} MiB "
            f"({(rss1 - rss0) / rss0:+.1%})",
            growth < 0.05,
        )
    ]
    half = steady[: max(1, len(steady) // 2)]
    for name in ("fds", "threads", "tasks"):
        # A leak keeps climbing; a bounded pool (the default executor's threads) fills early and stays.
        early = max(getattr(s, name) for s in half)
        late = max(getattr(s, name) for s in steady[len(half) :] or steady[-1:])
        rows.append(
            (
                f"{name} flat (idle samples)",
                f"most {early} in the first half, {late} in the second",
                late <= early + 1,  # one more socket or pool thread is noise; a leak adds one per N requests
            )
        )
    third = max(1, len(steady) // 3)
    p0 = statistics.median(s.p99_s for s in steady[:third])
    p1 = statistics.median(s.p99_s for s in steady[-third:])
    rows.append(("p99 flat: last third within 1.5× the first", f"{p0:.2f} → {p1:.2f} s", p1 <= 1.5 * p0))
    over = sorted({name for s in samples for name, (n, cap) in s.caches.items() if n > cap})
    names = len({name for s in samples for name in s.caches})
    rows.append(("every cache within its capacity", f"{names} caches, over: {over or 'none'}", not over))
    bad = counts.get("lost", 0) + counts.get("error", 0)
    rows.append(("no request lost or failed", f"{counts.get('ok', 0)} ok, {bad} lost or failed", bad == 0))
    return rows


def plot(samples: list[Sample], path: str, warmup: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = [s.minute for s in samples]
    fig, axes = plt.subplots(2, 2, figsize=(10, 6), sharex=True)
    series = [
        (axes[0][0], "resident memory (MiB)"),
        (axes[0][1], "latency (s)"),
        (axes[1][0], "descriptors / threads / tasks"),
        (axes[1][1], "cache fill (share of capacity)"),
    ]
    axes[0][0].plot(minutes, [s.rss_mb for s in samples], label="resident")
    axes[0][0].plot(minutes, [s.prefix_ram_mb for s in samples], label="of it, the prefix cache")
    axes[0][0].set_ylim(0, max(s.rss_mb for s in samples) * 1.15)
    axes[0][0].legend(fontsize=8)
    axes[0][1].set_ylim(0, max(s.p99_s for s in samples) * 1.15)
    axes[1][0].set_ylim(0, max(max(s.fds, s.threads, s.tasks) for s in samples) * 1.3)
    axes[0][1].plot(minutes, [s.p50_s for s in samples], label="p50")
    axes[0][1].plot(minutes, [s.p99_s for s in samples], label="p99")
    axes[0][1].legend()
    for name in ("fds", "threads", "tasks"):
        axes[1][0].plot(minutes, [getattr(s, name) for s in samples], label=name)
    axes[1][0].legend()
    names = sorted({n for s in samples for n in s.caches})
    for name in names:
        fill = [
            s.caches[name][0] / s.caches[name][1] if s.caches.get(name, (0, 0))[1] else 0 for s in samples
        ]
        axes[1][1].plot(minutes, fill, label=name, linewidth=1)
    axes[1][1].set_ylim(0, 1.05)
    axes[1][1].legend(fontsize=6, ncol=2, loc="lower right")
    for ax, title in series:
        ax.set_title(title, fontsize=10)
        ax.axvline(warmup, color="grey", linestyle=":", linewidth=1)
    for ax in axes[1]:
        ax.set_xlabel("minutes")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def report(
    samples: list[Sample], warmup: float, counts: dict[str, int], plot_path: str | None
) -> list[tuple[str, str, bool]]:
    """Print the verdict (and plot the series); its rows."""
    rows = verdict(samples, warmup, counts)
    print()
    for name, figures, ok in rows:
        print(f"{'PASS' if ok else 'FAIL'}  {name}: {figures}")
    if plot_path:
        plot(samples, plot_path, warmup)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--interval", type=float, default=60.0, help="seconds between samples")
    parser.add_argument("--warmup", type=float, default=None, help="minutes (default: a sixth of the run)")
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument(
        "--prime", type=int, default=140, help="requests with new tool sets before the clock starts"
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--out", help="write the samples and the verdict as JSON")
    parser.add_argument("--plot", help="write a PNG of the series (needs matplotlib)")
    parser.add_argument("--from-json", help="judge and plot a run saved with --out instead of running one")
    args = parser.parse_args()
    warmup = args.warmup if args.warmup is not None else args.minutes / 6
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        samples = [
            Sample(**{**s, "caches": {k: tuple(v) for k, v in s["caches"].items()}}) for s in saved["samples"]
        ]
        rows = report(samples, saved["warmup"] if args.warmup is None else warmup, saved["counts"], args.plot)
        sys.exit(0 if all(ok for _, _, ok in rows) else 1)
    work = Path(tempfile.mkdtemp(prefix="tether-soak-"))
    (work / "notes.txt").write_text("Buy milk. Call Ana.\n")
    (work / "notes.yaml").write_text(WORKFLOW)
    extra = [
        "--server-tools",
        "read_file,list_dir",
        "--work-dir",
        str(work),
        "--workflow",
        str(work / "notes.yaml"),
    ]
    # Small stores (the prefix cache's RAM tier too: 50 MiB, where the default 1 GiB would be filling
    # all hour), so that they fill within the warm-up and evict for the rest of the run: eviction is
    # where a leak would hide.
    extra += ["--max-sessions", "16", "--responses-store", "32", "--prefix-cache-ram-gb", "0.05"]
    model = str(bundled_model_path())
    with tether_process(model, ctx=None, threads=args.threads, extra=extra) as (base, proc):
        samples, counts = asyncio.run(soak(base, proc.pid, args))
    rows = report(samples, warmup, counts, args.plot)
    if args.out:
        saved = {"samples": [asdict(s) for s in samples], "counts": counts, "verdict": rows, "warmup": warmup}
        Path(args.out).write_text(json.dumps({**saved, "server_args": extra}, indent=1))
    sys.exit(0 if all(ok for _, _, ok in rows) else 1)


if __name__ == "__main__":
    main()
