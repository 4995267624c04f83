"""The live dashboard: ``/ui`` shows each recent turn's tool calls (what the model wrote, what the guard
did, what was returned), ``/ui/events`` streams it live (real socket), and a headless Chromium renders
the page (skipped only when ``chromium`` is not installed)."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from importlib.resources import files
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import make_client
from tests.support.engines import PrefillingEngine, SlowEngine
from tests.support.scripted import READ_FILE, lookup_tools
from tests.support.socket_server import serving
from tether.config import ServerConfig
from tether.engine.scheduler import Scheduler
from tether.engine.scripted import ScriptedEngine
from tether.proxy.app import create_app

TOOLS = [READ_FILE]
# The model calls "Read" with a string limit: the guard resolves the name and coerces the number.
MISNAMED = json.dumps({"tool_calls": [{"name": "Read", "arguments": {"path": "a.txt", "limit": "5"}}]})
RETURNED = 'read_file({"path": "a.txt", "limit": 5})'


def ask(text: str = "show a.txt", **extra: Any) -> dict[str, Any]:
    return {"model": "scripted", "messages": [{"role": "user", "content": text}], **extra}


def boot(page: str) -> dict[str, Any]:
    """The snapshot embedded in the page."""
    found = re.search(r'<script id="boot" type="application/json">(.*?)</script>', page, re.S)
    assert found is not None
    data: dict[str, Any] = json.loads(found.group(1))
    return data


def turn(data: dict[str, Any], rid: str) -> dict[str, Any]:
    (found,) = [t for t in data["turns"] if t["id"] == rid]
    return found


async def test_page_shows_what_the_model_wrote_what_the_guard_did_and_what_was_returned() -> None:
    client, _ = make_client([MISNAMED], preset="full")
    async with client:
        r = await client.post("/v1/chat/completions", json=ask(tools=TOOLS, tether={"constrain": "off"}))
        page = await client.get("/ui")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "<script src" not in page.text and "<link" not in page.text  # self-contained
    rid = r.json()["id"].removeprefix("chatcmpl-")
    shown = turn(boot(page.text), rid)
    assert shown["state"] == "done" and shown["finish_reason"] == "tool_calls"
    assert shown["usage"]["completion_tokens"] == r.json()["usage"]["completion_tokens"]
    (row,) = shown["rows"]
    assert row["kind"] == "call" and row["tool"] == "read_file"
    assert '"Read"' in row["wrote"] and '"5"' in row["wrote"]  # as the model wrote it
    assert [g.split(":")[0] for g in row["guard"]] == ["name_resolved", "args_coerced"]
    assert row["returned"] == RETURNED
    assert [i["kind"] for i in shown["interventions"]] == [
        i["kind"] for i in r.json()["tether"]["interventions"]
    ]


async def test_model_text_cannot_break_out_of_the_page() -> None:
    client, _ = make_client(["</script><script>alert(1)</script>"], preset="full")
    async with client:
        await client.post("/v1/chat/completions", json=ask("hi"))
        page = (await client.get("/ui")).text
    assert "<script>alert(1)" not in page
    assert boot(page)["turns"][0]["text"] == "</script><script>alert(1)</script>"


async def test_server_tool_runs_show_their_results() -> None:
    stage = lookup_tools()
    calls = [json.dumps({"tool_calls": [{"name": "lookup", "arguments": {"key": k}}]}) for k in ("zz", "a")]
    app = create_app(
        ServerConfig(preset="full"),
        Scheduler([ScriptedEngine([*calls, '{"response": "alpha"}'])]),
        server_tools=stage,
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        r = await client.post("/v1/chat/completions", json=ask("a?"))
        page = (await client.get("/ui")).text
    rows = turn(boot(page), r.json()["id"].removeprefix("chatcmpl-"))["rows"]
    assert [(x["kind"], x["wrote"], x["guard"]) for x in rows] == [
        ("server", 'lookup({"key": "zz"})', ["ran on the server: error"]),
        ("server", 'lookup({"key": "a"})', ["ran on the server: ok"]),
    ]
    assert "KeyError" in rows[0]["returned"] and rows[1]["returned"] == "alpha"


async def test_dashboard_needs_the_key_as_query_or_header() -> None:
    client, _ = make_client(api_key="sekrit")
    async with client:
        assert (await client.get("/ui")).status_code == 401
        assert (await client.get("/ui?key=wrong")).status_code == 401
        assert (await client.get("/ui/events?key=wrong")).status_code == 401
        assert (await client.get("/ui?key=sekrit")).status_code == 200
        assert (await client.get("/ui", headers={"authorization": "Bearer sekrit"})).status_code == 200


def snapshots(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """The ``snapshot`` events of an event stream."""
    event = ""
    for line in lines:
        if line.startswith("event: "):
            event = line.removeprefix("event: ")
        elif line.startswith("data: ") and event == "snapshot":
            yield json.loads(line.removeprefix("data: "))


def first(feed: Iterator[dict[str, Any]], holds: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    for snap in feed:
        if holds(snap):
            return snap
    raise AssertionError("the event stream ended")


def test_event_stream_delivers_a_request_made_while_watching() -> None:
    """Through a real socket: the feed shows the turn while it streams (slot busy, in flight), then
    finished with its usage."""
    engine = SlowEngine([" ".join(f"w{i}" for i in range(40))], delay=0.01)
    app = create_app(ServerConfig(preset="full"), Scheduler([engine]))
    started: dict[str, str] = {}
    with (
        serving(app) as base,
        httpx.Client(base_url=base, timeout=httpx.Timeout(10, read=5)) as http,
        http.stream("GET", "/ui/events") as events,
    ):
        assert events.headers["content-type"].startswith("text/event-stream")
        feed = snapshots(events.iter_lines())
        assert next(feed)["turns"] == []

        def chat() -> None:
            with http.stream("POST", "/v1/chat/completions", json=ask("hi", stream=True)) as r:
                started["rid"] = r.headers["x-request-id"]
                started["body"] = r.read().decode()

        client = threading.Thread(target=chat)
        client.start()
        running = first(feed, lambda s: any(t["state"] == "running" for t in s["turns"]))
        assert running["in_flight"] == 1 and running["scheduler"]["busy_slots"] == 1
        done = first(feed, lambda s: bool(s["turns"]) and s["turns"][0]["state"] == "done")
        client.join(10)
    (shown,) = done["turns"]
    assert shown["id"] == started["rid"] == running["turns"][0]["id"]
    assert done["in_flight"] == 0 and shown["route"] == "/v1/chat/completions"
    assert shown["text"].startswith("w0 w1") and shown["usage"]["completion_tokens"] > 0


def test_a_long_prefill_shows_its_progress_on_the_running_turn() -> None:
    """Through a real socket: while the engine evaluates the prompt the feed carries its progress,
    keyed by the turn's request id; once tokens flow it is gone."""
    app = create_app(ServerConfig(preset="full"), Scheduler([PrefillingEngine(["done"])]))
    with (
        serving(app) as base,
        httpx.Client(base_url=base, timeout=httpx.Timeout(10, read=5)) as http,
        http.stream("GET", "/ui/events") as events,
    ):
        feed = snapshots(events.iter_lines())
        rid: dict[str, str] = {}

        def chat() -> None:
            r = http.post("/v1/chat/completions", json=ask("a long prompt " * 50))
            rid["id"] = r.headers["x-request-id"]

        client = threading.Thread(target=chat)
        client.start()
        moving = first(feed, lambda s: bool(s["prefill"]) and s["prefill"][0]["done"] > 0)
        done = first(feed, lambda s: bool(s["turns"]) and s["turns"][0]["state"] == "done")
        client.join(10)
    (progress,) = moving["prefill"]
    assert progress["slot"] == 0 and 0 < progress["done"] < progress["total"] and progress["tok_s"] > 0
    assert progress["request_id"] == rid["id"] == moving["turns"][0]["id"]
    assert done["prefill"] == []
    page = files("tether.proxy").joinpath("dashboard.html").read_text(encoding="utf-8")
    assert "prefillText(" in page and "byRequest[t.id]" in page  # the page shows it on that turn


def test_event_stream_ends_when_the_server_shuts_down() -> None:
    """An open dashboard must not hold up shutdown's grace period: the feed ends once the scheduler
    is shutting down (the first SIGTERM does that before uvicorn waits for connections)."""
    app = create_app(ServerConfig(), Scheduler([ScriptedEngine()]))
    with (
        serving(app) as base,
        httpx.Client(base_url=base, timeout=httpx.Timeout(10, read=5)) as http,
        http.stream("GET", "/ui/events") as events,
    ):
        lines = events.iter_lines()
        next(snapshots(lines))
        app.state.tether.scheduler.shutdown()
        rest = list(lines)  # returns once the server ends the stream (a hang is a ReadTimeout)
    assert all(not line.startswith("data: ") for line in rest)


CHROMIUM = shutil.which("chromium")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_headless_chromium_renders_a_request_made_during_the_test(tmp_path: Path) -> None:
    """The page, rendered by Chromium: the turn made just before is on it, with its tool-call row.
    The screenshot is kept at ``tmp_path / "dashboard.png"``."""
    assert CHROMIUM is not None
    app = create_app(ServerConfig(preset="full", api_key="sekrit"), Scheduler([ScriptedEngine([MISNAMED])]))
    shot = tmp_path / "dashboard.png"
    browser = [
        CHROMIUM,
        "--headless",
        "--disable-gpu",
        "--no-sandbox",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--window-size=1280,900",
    ]
    with serving(app) as base:
        r = httpx.post(
            f"{base}/v1/chat/completions",
            json=ask(tools=TOOLS, tether={"constrain": "off"}),
            headers={"authorization": "Bearer sekrit"},
        )
        rid = r.json()["id"].removeprefix("chatcmpl-")
        url = f"{base}/ui?key=sekrit"
        dom = subprocess.run(
            [*browser, "--dump-dom", url], capture_output=True, text=True, timeout=90, check=True
        ).stdout
        subprocess.run([*browser, f"--screenshot={shot}", url], capture_output=True, timeout=90, check=True)
    assert f'id="turn-{rid}"' in dom  # built by the page's script, not just present in its data
    rendered = html.unescape(dom)
    for text in ("model wrote", "name_resolved: alias match", "args_coerced", RETURNED, "0 of 1 busy"):
        assert text in rendered, text
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
