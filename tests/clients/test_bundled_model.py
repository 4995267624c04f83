"""Each real client runs against ``tether serve --constrain strict`` on the bundled SmolLM2-135M.

A 135M model is not expected to do the task well; these tests check the protocol:
every request is answered (200, or a context-overflow 400 the client understands),
the client finishes on its own (no hang, no retry loop) and prints no protocol
error. What the guardrails did is attached to each test's report (section
"tether interventions"; shown with ``-rA``) and written next to the server log.

The server runs at temperature 0 with a 256-token default cap (``TETHER_TEMPERATURE``,
``TETHER_MAX_TOKENS``) so runs are repeatable and bounded on 2 CPU cores.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.clients.commands import aider_command, cn_command
from tests.clients.conftest import MODEL_NAME
from tests.clients.harness import CLIENTS, ClientRun, Netns, Server, client_env, load_log, run_client
from tests.clients.test_launch import dry_run

MAX_TOKENS = 256
# A hang or a retry loop is caught at this bound. On a quiet 2-core machine each run takes 0.5-2 min; the
# bound is wide because opencode's ~3.5k-token prompt prefills at ~160 tok/s there and several times
# slower when other jobs share the cores.
CLIENT_TIMEOUT = 900
AGENT_REQUESTS = 4
pytestmark = pytest.mark.timeout(CLIENT_TIMEOUT + 300)
CONTEXT = 8192
# Signs of a broken exchange in a client's output (parse failures, rejected deltas, server errors).
PROTOCOL_ERROR = re.compile(
    r"InvalidResponseData|Expected '(id|function\.name)'|JSONDecodeError|Unexpected token|"
    r"InternalServerError|APIConnectionError|ServiceUnavailable|status code 5\d\d|Traceback",
    re.IGNORECASE,
)
OVERFLOW = re.compile(r"context length exceeded|prompt is too long", re.IGNORECASE)


@pytest.fixture(scope="module")
def server(model_server: Server) -> Server:
    return model_server


def log_since(server: Server, offset: int) -> list[dict[str, Any]]:
    data = server.log_path.read_bytes()[offset:]
    tmp = server.log_path.with_suffix(".slice")
    tmp.write_bytes(data)
    return load_log(tmp)


def check_run(request: pytest.FixtureRequest, server: Server, offset: int, run: ClientRun, name: str) -> None:
    entries = log_since(server, offset)
    calls = [
        e for e in entries if e.get("event") == "http_request" and e.get("path") == "/v1/chat/completions"
    ]
    finished = [e for e in entries if e.get("event") == "generation_finished"]
    interventions = [e for e in entries if str(e.get("event", "")).startswith("guardrail_")]
    keep = (
        "event",
        "tool",
        "detail",
        "finish_reason",
        "tool_calls",
        "prompt_tokens",
        "completion_tokens",
        "seconds",
    )
    record = {
        "client": name,
        "seconds": run.seconds,
        "exit": run.returncode,
        "statuses": [e["status"] for e in calls],
        "generations": [{k: e[k] for k in keep if k in e} for e in finished],
        "interventions": [
            {k: v for k, v in e.items() if k not in ("level", "timestamp")} for e in interventions
        ],
    }
    text = json.dumps(record, indent=1)
    request.node.add_report_section("call", "tether interventions", text)
    server.log_path.with_name(f"interventions-{name}.json").write_text(text)

    assert not run.timed_out, f"{name} did not finish (hang or retry loop): {text}\n{run.tail()}"
    assert calls, f"{name} sent no chat request: {run.tail()}"
    statuses = {e["status"] for e in calls}
    assert statuses <= {200, 400}, text
    output = run.stdout + run.stderr
    if 400 in statuses:
        # Only a real overflow is refused, in words the client recognises, and it does not loop on it.
        assert OVERFLOW.search(output), f"{name} got a 400 that is not an overflow: {run.tail()}"
        assert sum(e["status"] == 400 for e in calls) <= 2, text
    else:
        assert finished, text
    assert not PROTOCOL_ERROR.search(output), run.tail()


def answered_at_least(server: Server, offset: int, n: int) -> Callable[[], bool]:
    """``n`` chat requests answered (one request may take several generations: a recalled answer)."""

    def answered() -> bool:
        entries = log_since(server, offset)
        return (
            sum(e.get("event") == "http_request" and e.get("path") == "/v1/chat/completions" for e in entries)
            >= n
        )

    return answered


def run_agent(
    netns: Netns, server: Server, offset: int, cmd: list[str], env: dict[str, str], workdir: dict[str, Path]
) -> ClientRun:
    """Run an agent client, stopped once it has had ``AGENT_REQUESTS`` requests answered."""
    return run_client(
        netns,
        cmd,
        env=env,
        cwd=workdir["project"],
        timeout=CLIENT_TIMEOUT,
        stop_when=answered_at_least(server, offset, AGENT_REQUESTS),
    )


def assert_loop_progressed(server: Server, offset: int) -> None:
    """A run stopped mid-loop was working: a tool-call reply was followed by a longer prompt (the
    client executed the calls and sent their results back; other requests, such as a title, may come
    in between)."""
    generations = [e for e in log_since(server, offset) if e.get("event") == "generation_finished"]
    grew = [
        any(a["prompt_tokens"] < b["prompt_tokens"] for b in generations[i + 1 :])
        for i, a in enumerate(generations)
        if a["tool_calls"]
    ]
    assert any(grew), generations


def test_opencode_on_the_bundled_model(request, netns, server, workdir, installed) -> None:
    """opencode on the config ``tether launch opencode`` writes for this 8k window (its small-model
    profile), merged into a user's config that allows edits: the first prompt fits in half the window.

    The agent loops of opencode and cn end only when the model answers in text, and the 135M model
    keeps calling tools (opencode's step limit only adds a note the model ignores). So those runs are
    stopped after ``AGENT_REQUESTS`` answered requests; what is checked is that every one was answered,
    the tool calls tether returned were executed and their results sent back, and no error surfaced."""
    config = workdir["home"] / "opencode.json"
    config.write_text(json.dumps({"permission": {"edit": "allow"}}))
    printed = dry_run(netns, server, config, "opencode")
    env = client_env(workdir["home"], OPENCODE_CONFIG_CONTENT=printed.stdout)
    task = "Create a file hello.txt containing hi"
    cmd = [str(CLIENTS / "node_modules/.bin/opencode"), "run", "--format", "json", task]
    offset = server.quiet_offset()
    run = run_agent(netns, server, offset, cmd, env, workdir)
    check_run(request, server, offset, run, "opencode")
    events = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert not [e for e in events if e.get("type") == "error"], run.tail()
    # Its first two requests (the session title, the agent's first turn) each fit in half the window.
    first = [e for e in log_since(server, offset) if e.get("event") == "generation_finished"][:2]
    assert max(e["prompt_tokens"] for e in first) < CONTEXT // 2, first
    if run.stopped:
        assert_loop_progressed(server, offset)


def test_continue_cli_on_the_bundled_model(request, netns, server, workdir, installed) -> None:
    offset = server.quiet_offset()
    cmd, env = cn_command(server.base, MODEL_NAME, "Reply with the word hello.", workdir["home"])
    run = run_agent(netns, server, offset, cmd, env, workdir)
    check_run(request, server, offset, run, "cn")
    if run.stopped:  # still looping on tool calls (measured: ~100 requests over 10 minutes, then exit 0)
        assert_loop_progressed(server, offset)
    else:
        assert run.returncode == 0, run.tail()


def test_aider_on_the_bundled_model(request, netns, server, workdir, installed) -> None:
    source: Path = workdir["project"] / "hello.py"
    source.write_text('print("hi")\n')
    offset = server.quiet_offset()
    cmd, env = aider_command(
        server.base,
        MODEL_NAME,
        "Change the greeting to hello world.",
        workdir["home"],
        ["hello.py"],
        context=CONTEXT,
        max_tokens=MAX_TOKENS,
        edit_format="whole",
    )
    run = run_client(netns, cmd, env=env, cwd=workdir["project"], timeout=CLIENT_TIMEOUT)
    check_run(request, server, offset, run, "aider")
    # aider exits 0 even when the API fails; its usage line only follows a completed reply.
    assert re.search(r"Tokens: [\d.]+k? sent, [\d.]+k? received", run.stdout), run.tail()
