"""Each real client completes a tool round trip against tether on a scripted engine.

The engine writes a call to the client's own write tool; the client runs it (the
file appears), sends the result back, and gets a text answer. The recorded traffic
also re-checks the assumptions tests/unit/proxy/test_client_contracts.py makes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.clients.commands import aider_command, cn_command, opencode_command
from tests.clients.harness import load_log, run_client

FINAL = "Wrote hello.txt through tether."


def tool_requests(log: Path) -> list[dict[str, Any]]:
    return [
        e["body"]
        for e in load_log(log)
        if e["path"] == "/v1/chat/completions" and isinstance(e["body"], dict) and e["body"].get("tools")
    ]


def round_trip_turn(requests: list[dict[str, Any]], tool: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The (assistant call, tool result) pair the client sent back after our call."""
    for body in requests:
        messages = body["messages"]
        for i, m in enumerate(messages):
            if m["role"] == "assistant" and m.get("tool_calls") and i + 1 < len(messages):
                call = m["tool_calls"][0]
                assert call["function"]["name"] == tool
                return m, messages[i + 1]
    raise AssertionError(f"no request carried the tool result back: {json.dumps(requests)[:2000]}")


def test_opencode_writes_a_file_through_a_tool_call(netns, scripted_server, workdir, installed) -> None:
    target = workdir["project"] / "hello.txt"
    arguments = {"filePath": str(target), "content": "written by opencode through tether\n"}
    server, log = scripted_server("--tool", "write", "--arguments", json.dumps(arguments), "--final", FINAL)
    cmd, env = opencode_command(
        server.base, "scripted", "Create hello.txt", workdir["home"], context=200_000, output=4096
    )
    run = run_client(netns, cmd, env=env, cwd=workdir["project"], timeout=120)
    assert not run.timed_out and run.returncode == 0, run.tail()
    assert target.read_text() == arguments["content"], run.tail()
    events = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert any(e.get("part", {}).get("text") == FINAL for e in events), run.tail()
    requests = tool_requests(log)
    call, result = round_trip_turn(requests, "write")
    assert call["content"] in ("", None) and result["role"] == "tool"
    assert result["tool_call_id"] == call["tool_calls"][0]["id"]
    # What test_client_contracts.py assumes about opencode's requests:
    assert all(r["stream"] and r["stream_options"] == {"include_usage": True} for r in requests)
    assert all(r.get("tool_choice") == "auto" for r in requests)
    assert all("$schema" in t["function"]["parameters"] for t in requests[0]["tools"])


def test_continue_cli_writes_a_file_through_a_tool_call(netns, scripted_server, workdir, installed) -> None:
    target = workdir["project"] / "hello.txt"
    arguments = {"filepath": str(target), "content": "written by cn through tether\n"}
    server, log = scripted_server("--tool", "Write", "--arguments", json.dumps(arguments), "--final", FINAL)
    cmd, env = cn_command(server.base, "scripted", "Create hello.txt", workdir["home"])
    run = run_client(netns, cmd, env=env, cwd=workdir["project"], timeout=120)
    assert not run.timed_out and run.returncode == 0, run.tail()
    assert target.read_text() == arguments["content"], run.tail()
    assert FINAL in run.stdout, run.tail()
    requests = tool_requests(log)
    call, result = round_trip_turn(requests, "Write")
    assert result["role"] == "tool" and result["tool_call_id"] == call["tool_calls"][0]["id"]
    # cn sends no tool_choice (so tether's default, auto, applies).
    assert all("tool_choice" not in r for r in requests)


def test_aider_applies_a_streamed_edit_block(netns, scripted_server, workdir, installed, tmp_path) -> None:
    source = workdir["project"] / "hello.py"
    source.write_text('print("old")\n')
    reply = tmp_path / "reply.txt"
    reply.write_text(
        'Changing the greeting.\n\nhello.py\n```python\n<<<<<<< SEARCH\nprint("old")\n=======\n'
        'print("hello from tether")\n>>>>>>> REPLACE\n```\n'
    )
    server, log = scripted_server("--reply-file", str(reply))
    cmd, env = aider_command(
        server.base,
        "scripted",
        "Change the greeting",
        workdir["home"],
        ["hello.py"],
        context=200_000,
        max_tokens=4096,
    )
    run = run_client(netns, cmd, env=env, cwd=workdir["project"], timeout=150)
    assert not run.timed_out, run.tail()
    # aider exits 0 even when the API fails: the edit on disk is the evidence.
    assert source.read_text() == 'print("hello from tether")\n', run.tail()
    requests = [e["body"] for e in load_log(log) if e["path"] == "/v1/chat/completions"]
    assert requests and all(r["stream"] and "tools" not in r for r in requests)
    assert all(r.get("max_tokens") == 4096 for r in requests)  # from the model settings' extra_params


def test_opencode_stops_when_its_own_prompt_cannot_fit(netns, scripted_server, workdir, installed) -> None:
    server, log = scripted_server("--ctx", "20000")  # bytes are tokens: opencode's first request is ~30 kB
    cmd, env = opencode_command(
        server.base, "scripted", "Create hello.txt", workdir["home"], context=20_000, output=1024
    )
    run = run_client(netns, cmd, env=env, cwd=workdir["project"], timeout=20)
    refused = [e for e in load_log(log) if e["status"] == 400]
    assert refused, run.tail()
    # Compaction cannot help when opencode's own system prompt and tools do not fit: the refusal says so
    # in words outside opencode's overflow patterns ...
    assert json.loads(refused[0]["response"])["error"]["code"] == "system_prompt_too_large"
    # ... and opencode gives up instead of compacting and retrying in a loop.
    assert not run.timed_out and len(refused) <= 2, f"{len(refused)} overflow refusals in {run.seconds} s"
