"""The client task suite: real coding clients finish small tasks on the bundled model through tether.

Each task runs in a fresh project with ``tether launch CLIENT --no-start`` (the config a user gets)
against one ``tether serve`` on the bundled SmolLM2-135M (greedy, strict), inside the offline
namespace the client tests use. A task is checked by the files it leaves or the answer the client
prints, never by exit codes. Run ``scripts/install_clients.sh`` first, then::

    python -m benchmarks.client_tasks                 # opencode and cn, 5 tasks each
    python -m benchmarks.client_tasks --client cn --task create

It prints a table per client (docs/evals.md keeps the current one) and, with ``--out``, one JSON
line per run: the check's verdict, the client's answer, the files, the requests and interventions.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.clients.harness import CLIENTS, ROOT, Netns, Server, client_env, load_log, run_client
from tests.support.socket_server import free_port

__all__ = ["TASKS", "Task", "main"]

MODEL = "smollm2-135m-instruct"


@dataclass(frozen=True)
class Task:
    """A request, the project it starts from, and what must hold afterwards (files, answer)."""

    name: str
    prompt: str
    check: Callable[[Path, str], bool]
    files: dict[str, str] = field(default_factory=dict)


def _text(project: Path, name: str) -> str:
    path = project / name
    return path.read_text(errors="replace") if path.is_file() else ""


TASKS = (
    Task(
        "create",
        "Create a file hello.txt containing hi",
        lambda project, _answer: _text(project, "hello.txt").strip() == "hi",
    ),
    Task(
        "edit",
        "In settings.txt, change the line color = red to color = blue",
        lambda project, _answer: (
            _text(project, "settings.txt").splitlines() == ["name = demo", "color = blue", "size = 3"]
        ),
        {"settings.txt": "name = demo\ncolor = red\nsize = 3\n"},
    ),
    Task(
        "read",
        "Which version number is written in VERSION.txt?",
        lambda _project, answer: "4.2.7" in answer,
        {"VERSION.txt": "4.2.7\n"},
    ),
    Task(
        "list",
        "List the files in the src folder.",
        lambda _project, answer: "alpha.py" in answer and "beta.py" in answer,
        {"src/alpha.py": "A = 1\n", "src/beta.py": "B = 2\n"},
    ),
    Task(
        "run",
        'Run the command python3 -c "print(6*7*1001)" and tell me what it printed.',
        lambda _project, answer: "42042" in answer,
    ),
)


def _opencode_answer(stdout: str) -> str:
    """The text parts of ``opencode run --format json``'s events (tool outputs left out)."""
    texts: list[str] = []
    for line in stdout.splitlines():
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        part = event.get("part") or {}
        if event.get("type") == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
    return "\n".join(texts)


def _command(client: str, server: Server, home: Path, prompt: str) -> tuple[list[str], Callable[[str], str]]:
    """``tether launch CLIENT --no-start`` merging into a config of the user's, and how to read its answer."""
    launch = [sys.executable, "-m", "tether.cli", "launch", client, "--no-start", "--port", str(server.port)]
    if client == "opencode":
        config = home / "opencode.json"
        config.write_text(json.dumps({"permission": {"edit": "allow", "bash": "allow"}}))
        return [
            *launch,
            "--config-path",
            str(config),
            "--",
            "run",
            "--format",
            "json",
            prompt,
        ], _opencode_answer
    config = home / "continue-user.yaml"
    config.write_text("name: user\nversion: 1.0.0\nschema: v1\nmodels: []\n")
    return [*launch, "--config-path", str(config), "--", "-p", "--auto", prompt], lambda out: out


def run_task(
    client: str, task: Task, server: Server, netns: Netns, root: Path, timeout: float
) -> dict[str, Any]:
    """One client on one task in a fresh project and home: the check's verdict and what led to it."""
    project, home = root / f"{client}-{task.name}" / "project", root / f"{client}-{task.name}" / "home"
    project.mkdir(parents=True)
    home.mkdir(parents=True)
    for name, text in task.files.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    cmd, answer_of = _command(client, server, home, task.prompt)
    env = client_env(
        home,
        CONTINUE_GLOBAL_DIR=str(home / ".continue"),
        PATH=f"{CLIENTS / 'node_modules/.bin'}:{os.environ.get('PATH', '')}",
    )
    offset = server.quiet_offset()
    run = run_client(netns, cmd, env=env, cwd=project, timeout=timeout)
    answer = answer_of(run.stdout)
    entries = _log_since(server, offset)
    return {
        "client": client,
        "task": task.name,
        "passed": task.check(project, answer),
        "seconds": round(run.seconds, 1),
        "timed_out": run.timed_out,
        "answer": answer[-2000:],
        "files": {
            str(p.relative_to(project)): p.read_text(errors="replace")[:500]
            for p in sorted(project.rglob("*"))
            if p.is_file()
        },
        "requests": sum(e.get("event") == "http_request" and "/chat/" in str(e.get("path")) for e in entries),
        "tool_calls": [e.get("tool_calls", 0) for e in entries if e.get("event") == "generation_finished"],
        "interventions": [
            f"{e['event'].removeprefix('guardrail_')}: {e.get('detail', '')}"[:200]
            for e in entries
            if str(e.get("event", "")).startswith("guardrail_")
        ],
    }


def _log_since(server: Server, offset: int) -> list[dict[str, Any]]:
    part = server.log_path.with_suffix(".part")
    part.write_bytes(server.log_path.read_bytes()[offset:])
    return load_log(part)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--client", action="append", choices=("opencode", "cn"), help="repeatable (default: both)"
    )
    parser.add_argument(
        "--task", action="append", choices=[t.name for t in TASKS], help="repeatable (default: all)"
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per run (default: 300)")
    parser.add_argument("--out", type=Path, help="write one JSON line per run here")
    args = parser.parse_args(argv)
    if not (CLIENTS / "installed.json").exists():
        parser.error("real clients not installed: run scripts/install_clients.sh")
    clients = args.client or ["opencode", "cn"]
    tasks = [t for t in TASKS if not args.task or t.name in args.task]
    root = Path(tempfile.mkdtemp(prefix="tether-client-tasks-"))
    netns = Netns()
    port = free_port()
    cmd = [sys.executable, "-m", "tether.cli", "serve", "--port", str(port), "--constrain", "strict"]
    env = {**os.environ, "TETHER_TEMPERATURE": "0", "TETHER_MAX_TOKENS": "256", "PYTHONPATH": str(ROOT)}
    server = Server(netns, cmd, port, root / "tether.log", env=env)
    results: list[dict[str, Any]] = []
    try:
        with server.running():
            for client in clients:
                for task in tasks:
                    result = run_task(client, task, server, netns, root, args.timeout)
                    results.append(result)
                    verdict = "pass" if result["passed"] else "FAIL"
                    print(f"{client:9s} {task.name:7s} {verdict}  {result['seconds']:6.1f} s", flush=True)
                    if args.out:
                        with args.out.open("a") as out:
                            out.write(json.dumps(result) + "\n")
    finally:
        netns.close()
    print()
    print("| client | " + " | ".join(t.name for t in tasks) + " | passed |")
    print("|---|" + "---|" * (len(tasks) + 1))
    for client in clients:
        mine = [r for r in results if r["client"] == client]
        marks = " | ".join("✓" if r["passed"] else "✗" for r in mine)
        print(f"| {client} | {marks} | {sum(r['passed'] for r in mine)} / {len(mine)} |")
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
