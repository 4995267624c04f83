"""``tether launch cn`` and ``tether launch aider`` against a scripted server, with the real clients.

cn: the config a dry run prints (merged into a user's config, which stays untouched) is the whole
config of a real ``cn`` tool round trip; a real launch writes it, backs up the user's file and runs
cn with the arguments after ``--``. This is also what proves cn accepts the
``defaultCompletionOptions`` launch adds: it sends their ``maxTokens`` as ``max_tokens``.

aider: a dry run prints three files (the config and its two side files) and writes none, so the
run goes through a real launch, which must write exactly what the dry run printed; aider then
applies an edit block using only those files (the endpoint, key, window and ``max_tokens`` come
from them, none from the environment).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.clients.commands import AIDER_HEADLESS
from tests.clients.harness import CLIENTS, Server, client_env, load_log, run_client
from tests.clients.test_launch import dry_run, launch_command
from tests.clients.test_scripted_clients import FINAL, round_trip_turn, tool_requests
from tether.launch import continue_cli
from tether.launch.plan import SMALL_WINDOW

pytestmark = pytest.mark.clients

WINDOW = 200_000  # the scripted server's window (bytes are tokens there): launch reads it from /v1/models

# A user's Continue config: its own name and a chat model of its own (unreachable, so using it fails).
CN_USER: dict[str, Any] = {
    "name": "my assistant",
    "version": "0.0.1",
    "schema": "v1",
    "models": [
        {
            "name": "elsewhere",
            "provider": "openai",
            "model": "gpt-elsewhere",
            "apiBase": "http://127.0.0.1:9/v1",
            "apiKey": "sk-mine",
            "roles": ["chat"],
        }
    ],
}

# A user's aider config: the run needs both keys (the diff edit format parses the scripted reply).
AIDER_USER: dict[str, Any] = {"edit-format": "diff", "map-tokens": 0}
AIDER_USER_METADATA = {
    "openai/other": {
        "max_input_tokens": 4096,
        "max_tokens": 512,
        "input_cost_per_token": 0,
        "output_cost_per_token": 0,
        "litellm_provider": "openai",
        "mode": "chat",
    }
}
AIDER_USER_SETTINGS = [{"name": "openai/other", "edit_format": "whole"}]
AIDER_ARGS = AIDER_HEADLESS  # as tests/clients/commands.py runs aider (minus what launch's files set)
AIDER_REPLY = (
    'Changing the greeting.\n\nhello.py\n```python\n<<<<<<< SEARCH\nprint("old")\n=======\n'
    'print("hello from tether launch")\n>>>>>>> REPLACE\n```\n'
)


def cn_env(home: Path, **extra: str) -> dict[str, str]:
    return client_env(home, CONTINUE_GLOBAL_DIR=str(home / ".continue"), **extra)


def cn_user_config(home: Path) -> tuple[Path, str]:
    """The user's own cn config (launch must keep it), and its text."""
    config = home / "continue-user.yaml"
    config.write_text(yaml.safe_dump(CN_USER, sort_keys=False))
    return config, config.read_text()


def start_cn_server(scripted_server: Any, target: Path, content: str) -> tuple[Server, Path, str]:
    arguments = {"filepath": str(target), "content": content}
    server, log = scripted_server(
        "--tool", "Write", "--arguments", json.dumps(arguments), "--final", FINAL, "--ctx", str(WINDOW)
    )
    return server, log, content


def check_cn_entry(config: dict[str, Any], server: Server) -> dict[str, Any]:
    """The user's keys and model kept, launch's entry first; that entry."""
    assert {key: config[key] for key in CN_USER if key != "models"} == {
        key: value for key, value in CN_USER.items() if key != "models"
    }
    entry, *others = config["models"]
    assert others == CN_USER["models"]
    assert entry["name"] == "tether" and entry["model"] == "scripted"  # the name the server reported
    assert entry["apiBase"] == f"{server.base}/v1"
    assert entry["defaultCompletionOptions"]["contextLength"] == WINDOW
    return dict(entry)


def check_cn_requests(log: Path, entry: dict[str, Any]) -> None:
    requests = tool_requests(log)
    assert requests and all(r["model"] == "scripted" for r in requests)
    # cn read launch's defaultCompletionOptions: their maxTokens is what it asks for.
    assert all(r.get("max_tokens") == entry["defaultCompletionOptions"]["maxTokens"] for r in requests)
    call, result = round_trip_turn(requests, "Write")
    assert result["role"] == "tool" and result["tool_call_id"] == call["tool_calls"][0]["id"]


def test_cn_runs_on_the_config_launch_prints(netns, scripted_server, workdir, installed) -> None:
    target = workdir["project"] / "hello.txt"
    server, log, content = start_cn_server(scripted_server, target, "written by cn from launch's dry run\n")
    config, user_text = cn_user_config(workdir["home"])
    printed = dry_run(netns, server, config, "cn")
    assert config.read_text() == user_text  # a dry run writes nothing
    entry = check_cn_entry(yaml.safe_load(printed.stdout), server)  # stdout is the merged config alone

    launched = workdir["home"] / "continue-launched.yaml"
    launched.write_text(printed.stdout)
    cmd = [
        str(CLIENTS / "node_modules/.bin/cn"),
        "--config",
        str(launched),
        "-p",
        "--auto",
        "Create hello.txt",
    ]
    run = run_client(netns, cmd, env=cn_env(workdir["home"]), cwd=workdir["project"], timeout=120)
    assert not run.timed_out and run.returncode == 0, run.tail()
    assert target.read_text() == content, run.tail()
    assert FINAL in run.stdout, run.tail()
    check_cn_requests(log, entry)


def test_launch_writes_the_config_and_runs_cn(netns, scripted_server, workdir, installed) -> None:
    target = workdir["project"] / "hello.txt"
    server, log, content = start_cn_server(scripted_server, target, "written by cn through tether launch\n")
    config, user_text = cn_user_config(workdir["home"])
    env = cn_env(workdir["home"], PATH=f"{CLIENTS / 'node_modules/.bin'}:{os.environ.get('PATH', '')}")
    cmd = launch_command(server, config, "--", "-p", "--auto", "Create hello.txt", client="cn")
    run = run_client(netns, cmd, env=env, cwd=workdir["project"], timeout=180)
    assert not run.timed_out and run.returncode == 0, run.tail()
    assert target.read_text() == content, run.tail()
    assert FINAL in run.stdout, run.tail()
    (backup,) = workdir["home"].glob("continue-user.yaml.*.bak")
    assert backup.read_text() == user_text
    entry = check_cn_entry(yaml.safe_load(config.read_text()), server)
    check_cn_requests(log, entry)


def test_launch_runs_cn_with_the_small_model_profile_on_a_small_window(
    netns, scripted_server, workdir, installed
) -> None:
    # A 16k window (bytes are tokens on the scripted server): cn runs with only the file tools left.
    target = workdir["project"] / "hello.txt"
    arguments = {"filepath": str(target), "content": "written by cn with few tools\n"}
    server, log = scripted_server(
        "--tool", "Write", "--arguments", json.dumps(arguments), "--final", FINAL, "--ctx", str(SMALL_WINDOW)
    )
    config, _ = cn_user_config(workdir["home"])
    env = cn_env(workdir["home"], PATH=f"{CLIENTS / 'node_modules/.bin'}:{os.environ.get('PATH', '')}")
    cmd = launch_command(server, config, "--", "-p", "--allow", "Write", "Create hello.txt", client="cn")
    run = run_client(netns, cmd, env=env, cwd=workdir["project"], timeout=180)
    assert not run.timed_out and run.returncode == 0, run.tail()
    assert target.read_text() == arguments["content"], run.tail()
    requests = tool_requests(log)
    offered = {t["function"]["name"] for r in requests for t in r["tools"]}
    assert "Write" in offered and not offered & set(continue_cli.SMALL_EXCLUDE), offered
    round_trip_turn(requests, "Write")


def test_aider_runs_on_the_files_launch_prints_and_writes(
    netns, scripted_server, workdir, installed, tmp_path
) -> None:
    source = workdir["project"] / "hello.py"
    source.write_text('print("old")\n')
    reply = tmp_path / "reply.txt"
    reply.write_text(AIDER_REPLY)
    server, log = scripted_server("--reply-file", str(reply), "--ctx", str(WINDOW))
    # Not aider's default places, so aider finds these files only through the config launch wrote.
    folder = workdir["home"] / "dotfiles"
    folder.mkdir()
    conf = folder / ".aider.conf.yml"
    metadata, settings = folder / ".aider.model.metadata.json", folder / ".aider.model.settings.yml"
    conf.write_text(yaml.safe_dump(AIDER_USER, sort_keys=False))
    metadata.write_text(json.dumps(AIDER_USER_METADATA))
    settings.write_text(yaml.safe_dump(AIDER_USER_SETTINGS, sort_keys=False))
    files = (conf, metadata, settings)
    before = {path: path.read_text() for path in files}

    printed = dry_run(netns, server, conf, "aider")
    assert {path: path.read_text() for path in files} == before  # a dry run writes nothing
    assert not list(folder.glob("*.bak"))

    env = client_env(workdir["home"], PATH=f"{CLIENTS / 'aider-venv/bin'}:{os.environ.get('PATH', '')}")
    cmd = launch_command(
        server, conf, "--", *AIDER_ARGS, "--message", "Change the greeting", "hello.py", client="aider"
    )
    run = run_client(netns, cmd, env=env, cwd=workdir["project"], timeout=180)
    assert not run.timed_out and run.returncode == 0, run.tail()
    # aider exits 0 even when the API fails: the edit on disk is the evidence.
    assert source.read_text() == 'print("hello from tether launch")\n', run.tail()
    # The real launch wrote exactly what the dry run printed (stdout: the three files in order).
    assert printed.stdout == "".join(path.read_text() for path in files)

    written = yaml.safe_load(conf.read_text())
    assert {key: written[key] for key in AIDER_USER} == AIDER_USER
    assert written["model"] == "openai/scripted" and written["openai-api-base"] == f"{server.base}/v1"
    assert (written["model-metadata-file"], written["model-settings-file"]) == (str(metadata), str(settings))
    window = json.loads(metadata.read_text())
    assert window["openai/other"] == AIDER_USER_METADATA["openai/other"]
    assert window["openai/scripted"]["max_input_tokens"] == WINDOW
    other, ours = yaml.safe_load(settings.read_text())
    assert other == AIDER_USER_SETTINGS[0] and ours["name"] == "openai/scripted"
    for path in files:
        (backup,) = folder.glob(f"{path.name}.*.bak")
        assert backup.read_text() == before[path]

    requests = [e["body"] for e in load_log(log) if e["path"] == "/v1/chat/completions"]
    assert requests and all(r["stream"] and "tools" not in r and r["model"] == "scripted" for r in requests)
    # From the settings file launch wrote, which aider found only through the config.
    assert all(r.get("max_tokens") == ours["extra_params"]["max_tokens"] for r in requests)
