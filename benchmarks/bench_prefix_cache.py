"""Time to first token of a coding agent's long prompt: cold, restored from the prefix cache's disk
tier after a restart, restored from RAM after another conversation, and resident in the context.

    .venv/bin/python -m benchmarks.bench_prefix_cache [--ctx 8192] [--threads 2] [--request FILE]

The prompt is opencode's own first request (its system prompt and tool schemas, as its default
configuration sends them), captured through the client-test harness from the real opencode
talking to a scripted server (``--request`` reuses a captured body instead). Every figure comes
from ``tether serve`` processes started here, one after another, on the bundled model: a
non-streamed request with ``max_tokens`` 1 and guardrails off (one generation: its latency is the
prefill plus one token). The first request is also sent to a server with the cache off, and the
server reports how long copying the state out took: what storing it costs the request that produced
it. At the default 16,384-token window opencode's tools are shown in full; in a smaller one tether
shows the tools the task needs in full and the rest briefly (docs/guardrails.md), so a new task can
change the tools block and with it the prefix.
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks._servers import tether_server
from tether.engine.locate import bundled_model_path

TASK = "Create a file hello.txt containing hi"
FOLLOW_UPS = (
    "Now create goodbye.txt containing bye",
    "List the files in this folder",
    "What is in hello.txt?",
)


def capture_opencode_request(work: Path) -> dict[str, Any]:
    """opencode's first request with tools, as it sends it to an OpenAI-compatible server."""
    from tests.clients.commands import opencode_command
    from tests.clients.harness import CLIENTS, Netns, Server, load_log, run_client
    from tests.support.socket_server import free_port

    if not (CLIENTS / "node_modules/.bin/opencode").exists():
        sys.exit("opencode is not installed: run `make setup-test` (or pass --request FILE)")
    (work / "project").mkdir(parents=True)
    (work / "home").mkdir()
    port, log = free_port(), work / "requests.jsonl"
    cmd = [sys.executable, "-m", "tests.clients.scripted_server", "--port", str(port), "--log", str(log)]
    netns = Netns()
    server = Server(netns, cmd, port, work / "scripted-server.log")
    try:
        with server.running():
            command, env = opencode_command(
                server.base, "scripted", TASK, work / "home", context=200_000, output=4096
            )
            run_client(netns, command, env=env, cwd=work / "project", timeout=180)
    finally:
        netns.close()
    for entry in load_log(log):
        body = entry["body"]
        if entry["path"] == "/v1/chat/completions" and isinstance(body, dict) and body.get("tools"):
            return dict(body)
    sys.exit(f"opencode sent no request with tools (see {work})")


def asking(body: dict[str, Any], task: str) -> dict[str, Any]:
    """The agent's request with ``task`` as its last user message, one token, guardrails off."""
    out = copy.deepcopy(body)
    last = max(i for i, m in enumerate(out["messages"]) if m["role"] == "user")
    out["messages"][last]["content"] = task
    out.update(
        stream=False, max_tokens=1, temperature=0, model="smollm2-135m-instruct", tether={"preset": "bare"}
    )
    out.pop("stream_options", None)
    return out


def timed(base: str, body: dict[str, Any]) -> tuple[float, int, int]:
    """(seconds, prompt tokens, cached tokens) of one request."""
    started = time.perf_counter()
    r = httpx.post(f"{base}/chat/completions", json=body, timeout=1800)
    elapsed = time.perf_counter() - started
    r.raise_for_status()
    usage = r.json()["usage"]
    return elapsed, usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ctx", type=int, default=16384, help="16,384 shows opencode's tools in full")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--request", type=Path, help="a captured request body (JSON) instead of capturing one"
    )
    parser.add_argument("--save-request", type=Path, help="write the captured body here")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tether-bench-prefix-"))
    try:
        body = (
            json.loads(args.request.read_text())
            if args.request
            else capture_opencode_request(work / "capture")
        )
        if args.save_request:
            args.save_request.write_text(json.dumps(body))
        model, cache = str(bundled_model_path()), work / "prefix"
        common = ["--embedding-model", "off"]
        rows: list[tuple[str, float, int, int]] = []
        with tether_server(
            model, ctx=args.ctx, threads=args.threads, extra=[*common, "--prefix-cache-ram-gb", "0"]
        ) as base:
            rows.append(("cold, cache off", *timed(base, asking(body, TASK))))
        with_disk = [*common, "--prefix-cache-dir", str(cache)]
        with tether_server(model, ctx=args.ctx, threads=args.threads, extra=with_disk) as base:
            rows.append(("cold, cache on (stores it)", *timed(base, asking(body, TASK))))
            save_s = httpx.get(base.removesuffix("/v1") + "/health").json()["prefix_cache"]["save_s"]
        written = sum(p.stat().st_size for p in cache.glob("*.kv"))
        with tether_server(model, ctx=args.ctx, threads=args.threads, extra=with_disk) as base:
            rows.append(("restored from disk after a restart", *timed(base, asking(body, FOLLOW_UPS[0]))))
            rows.append(("resident in the context", *timed(base, asking(body, FOLLOW_UPS[1]))))
            other = {
                "model": "smollm2-135m-instruct",
                "max_tokens": 1,
                "tether": {"preset": "bare"},
                "messages": [{"role": "user", "content": "Tell me about lighthouses. " * 300}],
            }
            timed(base, other)  # another conversation takes the context
            rows.append(
                ("restored from RAM after another conversation", *timed(base, asking(body, FOLLOW_UPS[2])))
            )
        cold = rows[1][1]
        print(
            f"prompt: opencode's first request, {rows[0][2]} tokens; state on disk {written / 2**20:.0f} MiB"
        )
        print(f"{'request':<46} {'TTFT s':>8} {'vs cold':>8} {'cached':>7}")
        for name, seconds, _, cached in rows:
            print(f"{name:<46} {seconds:>8.2f} {seconds / cold:>7.3f}x {cached:>7}")
        print(
            f"storing the state: copying it out of the context took {save_s * 1000:.0f} ms, "
            f"{save_s / rows[1][1]:.2%} of the cold request (the disk write runs after, on its own thread); "
            f"the cold request took {rows[1][1] / rows[0][1]:.3f}x the time without a cache (two processes: noise)"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
