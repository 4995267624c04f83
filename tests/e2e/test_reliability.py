"""A real ``tether serve`` process: the hang-up scenario of the bug report, bounded shutdown, env config.

Each test starts its own server on the bundled model (fresh counters), talks to it as
``curl`` would, and stops it.
"""

from __future__ import annotations

import signal
import threading
import time

import httpx

from tests.support.processes import tether_serve

MODEL = "smollm2-135m-instruct"


def test_hanging_up_mid_stream_does_not_stop_the_server() -> None:
    """The issue's two curl commands: a long story read for 400 bytes, then a short request."""
    with tether_serve("--ctx", "4096") as (base, _):
        story = {
            "model": MODEL,
            "max_tokens": 2000,
            "stream": True,
            "messages": [{"role": "user", "content": "Write a very long story."}],
        }
        with (
            httpx.Client(timeout=60) as client,
            client.stream("POST", f"{base}/v1/chat/completions", json=story) as r,
        ):
            got = 0
            for chunk in r.iter_bytes():
                got += len(chunk)
                if got >= 400:
                    break
        hung_up = time.monotonic()
        hi = {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
        answer = httpx.post(f"{base}/v1/chat/completions", json=hi, timeout=60)
        assert answer.status_code == 200
        assert time.monotonic() - hung_up < 1.0
        sched = httpx.get(f"{base}/health", timeout=5).json()["scheduler"]
        assert sched["busy_slots"] == 0 and sched["cancelled"] == 1 and sched["queue_depth"] == 0


def test_sigterm_with_a_stream_in_flight_exits_within_the_grace_period() -> None:
    with tether_serve("--ctx", "4096", "--shutdown-grace", "3") as (base, proc):
        body = {
            "model": MODEL,
            "max_tokens": 3000,
            "stream": True,
            "messages": [{"role": "user", "content": "Write a very long story."}],
            # No end of text, turn or a new turn: a story that ended within the grace period would
            # end the stream with [DONE] before shutdown had anything to cut.
            "logit_bias": {"0": -100, "1": -100, "2": -100},
        }
        lines: list[str] = []
        reading = threading.Event()

        def read() -> None:
            # A client that keeps reading whatever comes: the server must not wait for it to finish.
            try:
                with (
                    httpx.Client(timeout=60) as c,
                    c.stream("POST", f"{base}/v1/chat/completions", json=body) as r,
                ):
                    for line in r.iter_lines():
                        reading.set()
                        lines.append(line)
            except httpx.HTTPError:
                pass

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        assert reading.wait(30)
        time.sleep(0.3)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        took = time.monotonic() - sent
        reader.join(10)
        assert took < 4.0, took
        assert any("shutting_down" in line for line in lines), (len(lines), lines[-6:])


def test_tether_ctx_from_the_environment() -> None:
    with tether_serve(env={"TETHER_CTX": "4096", "TETHER_SLOTS": "2"}) as (base, _):
        card = httpx.get(f"{base}/v1/models", timeout=5).json()["data"][0]["tether"]
        assert (card["n_ctx"], card["slots"]) == (4096, 2)
    with tether_serve("--ctx", "2048", env={"TETHER_CTX": "4096"}) as (base, _):
        assert httpx.get(f"{base}/v1/models", timeout=5).json()["data"][0]["tether"]["n_ctx"] == 2048
