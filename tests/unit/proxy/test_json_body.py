"""A body is read as JSON whatever its Content-Type says (``curl -d`` sends a form type), over a socket."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.support.scripted import scripted_app
from tests.support.socket_server import serving
from tether.engine.scripted import ScriptedEngine

ASK = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}], "stream": False}


@pytest.mark.parametrize("kind", [None, "application/x-www-form-urlencoded", "text/plain; charset=utf-8"])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/api/chat"])
def test_a_json_body_is_read_whatever_its_content_type(kind: str | None, path: str) -> None:
    headers = {"content-type": kind} if kind else {}
    with serving(scripted_app(ScriptedEngine(['{"response": "Hello!"}']))) as base:
        r = httpx.post(base + path, content=json.dumps(ASK), headers=headers, timeout=10)
    assert r.status_code == 200, r.text
    assert "Hello!" in r.text


def test_a_body_that_is_not_json_is_told_so() -> None:
    with serving(scripted_app(ScriptedEngine())) as base:
        form = httpx.post(
            base + "/v1/chat/completions",
            content=b"model=x&messages=y",
            timeout=10,
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
    assert form.status_code == 400 and form.json()["error"]["message"] == "request body is not valid JSON"


@pytest.mark.parametrize("name", ["get weather!", "a" * 65, "math.sqrt"])
def test_a_tool_name_outside_openais_rule_is_a_400(name: str) -> None:
    tool = {
        "type": "function",
        "function": {"name": name, "parameters": {"type": "object", "properties": {}}},
    }
    with serving(scripted_app(ScriptedEngine())) as base:
        r = httpx.post(base + "/v1/chat/completions", json={**ASK, "tools": [tool]}, timeout=10)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "tools[0].function.name" and "letters, digits" in error["message"]
