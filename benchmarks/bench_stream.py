"""One user, one stream: tether's single-stream decode beside llama-server's, and where each token goes.

Servers on the bundled model (2,048 tokens per slot, ``--threads`` each), started together and
measured one at a time, rounds alternating which goes first:

* ``tether``       — ``tether serve`` as a single user runs it (its defaults; ``--tether-args`` adds flags)
* ``no-spec``      — the same with ``--no-speculate`` (for the strict-call ratio)
* ``llama-server`` — llama.cpp's own server from the same pinned source, ``-np 1``

Measured (``--only`` picks some):

1. ``single`` — streamed prose, greedy, ``--tokens`` per request: decode tok/s after the first token;
2. ``armed`` — the same prose with a coding agent's four tools offered (tether's default preset
   decides the reply is text and streams it), against llama-server's prose without tools;
3. ``strict`` — a strict tool call (``tool_choice: required``) with and without jump-forward + drafts,
   each side warmed by one call first (the tool list's prefill, which neither side can speed up);
4. ``n8`` — 8 concurrent streams: tether with ``--slots 8`` vs llama-server ``-np 8`` (two more servers);
5. ``profile`` — tether's single stream under py-spy: µs per token by stage (engine step, sampling,
   constraint mask, token loop, routing, pipeline, SSE write) and CPU per thread (``benchmarks/_profile.py``).

Usage: .venv/bin/python -m benchmarks.bench_stream [--rounds 6] [--tokens 128] [--only single,profile]
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import statistics
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx

from benchmarks._profile import Profile, ProfileRun
from benchmarks._servers import llama_server, tether_process
from benchmarks.bench_batch import FRESH, _alternate, _chat, _prose, throughput, tool_call
from tether.engine.locate import bundled_model_path
from tether.evals.name_fix import TOOLS as AGENT_TOOLS

PARTS = ("single", "armed", "strict", "n8", "profile")
CTX = 2048


async def _decode_rate(base: str, body: dict[str, Any]) -> tuple[float, int]:
    """Decode tok/s after the first token of one streamed reply, and its completion tokens."""
    async with httpx.AsyncClient(timeout=600, limits=FRESH) as client:
        first, total, usage = await _chat(client, base, body)
    tokens = int(usage.get("completion_tokens", 0))
    return (tokens - 1) / max(total - first, 1e-9), tokens


def _armed(i: int, tokens: int) -> dict[str, Any]:
    """The prose request with a coding agent's four file and shell tools offered."""
    tools = [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in AGENT_TOOLS
    ]
    return {**_prose(i, tokens), "tools": tools}


def single(base: str, r: int, tokens: int, armed: bool = False) -> float:
    body = _armed(r, tokens) if armed else _prose(r, tokens)
    rate, _ = asyncio.run(_decode_rate(base, body))
    return rate


def _servers(
    args: argparse.Namespace, stack: ExitStack, model: str, binary: str
) -> dict[str, tuple[str, int]]:
    extra = shlex.split(args.tether_args)
    out: dict[str, tuple[str, int]] = {}
    base, proc = stack.enter_context(tether_process(model, ctx=CTX, threads=args.threads, extra=extra))
    out["tether"] = (base, proc.pid)
    for flags in args.also:  # other tether configurations, measured beside it
        more = [*extra, *shlex.split(flags)]
        base, proc = stack.enter_context(tether_process(model, ctx=CTX, threads=args.threads, extra=more))
        out[f"tether {flags}"] = (base, proc.pid)
    if "strict" in args.only:
        base, proc = stack.enter_context(
            tether_process(model, ctx=CTX, threads=args.threads, extra=[*extra, "--no-speculate"])
        )
        out["no-spec"] = (base, proc.pid)
    out["llama-server"] = (stack.enter_context(llama_server(binary, model, ctx=CTX, threads=args.threads)), 0)
    return out


@contextmanager
def _n8_servers(args: argparse.Namespace, model: str, binary: str) -> Iterator[dict[str, str]]:
    with ExitStack() as stack:
        extra = [*shlex.split(args.tether_args), "--slots", "8"]
        base, _ = stack.enter_context(tether_process(model, ctx=CTX, threads=args.threads, extra=extra))
        llama = stack.enter_context(llama_server(binary, model, ctx=CTX, threads=args.threads, slots=8))
        yield {"tether": base, "llama-server": llama}


def profile(base: str, pid: int, args: argparse.Namespace, armed: bool) -> tuple[Profile, int, float]:
    """Streams ``--profile-requests`` replies under py-spy: the profile, tokens streamed, mean tok/s."""
    rates: list[float] = []
    tokens = 0
    with ProfileRun(pid, rate=args.profile_rate) as run:
        for r in range(args.profile_requests):
            body = _armed(r, args.tokens) if armed else _prose(r, args.tokens)
            rate, n = asyncio.run(_decode_rate(base, body))
            rates.append(rate)
            tokens += n
    return run.profile, tokens, statistics.mean(rates)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--calls", type=int, default=12, help="strict tool calls per side")
    parser.add_argument(
        "--only", default=",".join(PARTS), help=f"comma-separated parts of {', '.join(PARTS)}"
    )
    parser.add_argument("--tether-args", default="", help="extra `tether serve` flags for the tether sides")
    parser.add_argument("--also", action="append", default=[], help="another tether side with these flags")
    parser.add_argument("--profile-rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--profile-requests", type=int, default=6)
    args = parser.parse_args()
    args.only = [p for p in args.only.split(",") if p]
    if unknown := set(args.only) - set(PARTS):
        parser.error(f"unknown parts: {', '.join(sorted(unknown))}")
    model = str(bundled_model_path())
    script = Path(__file__).resolve().parents[1] / "scripts" / "install_llama_server.sh"
    binary = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=True).stdout.strip()
    results: dict[str, Any] = {}
    with ExitStack() as stack:
        servers = _servers(args, stack, model, binary)
        bases = {k: v[0] for k, v in servers.items()}
        for base in bases.values():  # warm up: pages, masks, the first allocations
            asyncio.run(throughput(base, 1, 16, 0))
            single(base, 0, 16, armed=True)
        pair = ["tether", *(f"tether {flags}" for flags in args.also), "llama-server"]
        if "single" in args.only:
            results["single"] = _alternate(pair, args.rounds, lambda s, r: single(bases[s], r, args.tokens))
        if "armed" in args.only:
            results["armed"] = _alternate(
                pair, args.rounds, lambda s, r: single(bases[s], r, args.tokens, armed=s != "llama-server")
            )
        if "strict" in args.only:
            for side in ("tether", "no-spec"):  # the tool list's first prefill, the same on both sides
                asyncio.run(tool_call(bases[side], 0))
            results["strict"] = _alternate(
                ["tether", "no-spec"], args.calls, lambda s, r: asyncio.run(tool_call(bases[s], r))[0]
            )
        if "profile" in args.only:
            base, pid = servers["tether"]
            results["profile"] = profile(base, pid, args, armed=False)
            results["profile armed"] = profile(base, pid, args, armed=True)
    if "n8" in args.only:
        with _n8_servers(args, model, binary) as n8:
            for base in n8.values():
                asyncio.run(throughput(base, 2, 8, 0))
            results["n8"] = _alternate(
                list(n8), args.rounds, lambda s, r: asyncio.run(throughput(n8[s], 8, args.tokens, r))
            )
    report(args, results)


def report(args: argparse.Namespace, results: dict[str, Any]) -> None:
    mean = statistics.mean
    print(f"## bench_stream: {args.rounds} rounds, {args.tokens} tokens, {args.threads} threads, "
          f"tether args: {args.tether_args or '(defaults)'}\n")  # fmt: skip
    print("| | tether | llama-server | ratio | median round | target |")
    print("|---|---:|---:|---:|---:|---|")
    rows = [("single", "single stream, streamed (tok/s)", "≥ 0.97×"),
            ("armed", "tools offered, prose reply (tok/s)", "≥ 0.95×"),
            ("n8", "N = 8 aggregate (tok/s)", "≥ 0.97×")]  # fmt: skip
    for key, label, target in rows:
        for side in [s for s in results.get(key, {}) if s != "llama-server"]:
            t, ls = mean(results[key][side]), mean(results[key]["llama-server"])
            name = label if side == "tether" else f"{label}, {side}"
            # The median of per-round ratios: a round whose opening the answer check held back
            # arrives in a burst, and its rate after the first token means nothing.
            per = statistics.median(
                a / b for a, b in zip(results[key][side], results[key]["llama-server"], strict=True)
            )
            print(f"| {name} | {t:.1f} | {ls:.1f} | **{t / ls:.3f}×** | {per:.3f}× | {target} |")
    if "strict" in results:
        on, off = mean(results["strict"]["tether"]), mean(results["strict"]["no-spec"])
        print(f"| strict tool call, no-spec / jump-forward + drafts (s) | {on:.3f} | {off:.3f} (no-spec) "
              f"| **{off / on:.2f}×** | | ≥ 1.5× |")  # fmt: skip
    for key in ("single", "armed"):
        if key in results:
            spread = [
                f"{a / b:.3f}"
                for a, b in zip(results[key]["tether"], results[key]["llama-server"], strict=True)
            ]
            print(f"\n{key}: per-round ratios {', '.join(spread)}")
    for key in ("profile", "profile armed"):
        if key in results:
            report_profile(key, *results[key])


def report_profile(title: str, prof: Profile, tokens: int, rate: float) -> None:
    per = 1e6 / tokens
    print(f"\n### {title}: {tokens} tokens streamed under py-spy at {prof.rate} Hz, {rate:.1f} tok/s "
          f"({1e6 / rate:.0f} µs per token of wall time)\n")  # fmt: skip
    print("| stage (py-spy samples of the server's Python threads) | µs/token |")
    print("|---|---:|")
    for stage, seconds in sorted(prof.stage_s().items(), key=lambda kv: -kv[1]):
        print(f"| {stage} | {seconds * per:.0f} |")
    print("\n| thread | CPU µs/token (/proc) | sampled µs/token (py-spy) |")
    print("|---|---:|---:|")
    sampled = prof.thread_s()
    for thread, seconds in sorted(prof.cpu_s.items(), key=lambda kv: -kv[1]):
        if seconds > 0:
            print(f"| {thread} | {seconds * per:.0f} | {sampled.get(thread, 0.0) * per:.0f} |")
    print(
        f"| all threads, ended ones included | {prof.process_cpu_s * per:.0f} | {sum(sampled.values()) * per:.0f} |"
    )


if __name__ == "__main__":
    main()
