"""Agents take the next step (bundled model, strict, over a real socket): after a tool result the
call continues while the request still asks for a tool, and a value another tool gives is fetched
with that tool first."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.support.socket_server import ask_with_tools


def tool(name: str, description: str, **props: dict[str, Any]) -> dict[str, Any]:
    parameters = {"type": "object", "properties": props, "required": list(props)}
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


LOGIN = tool(
    "login",
    "Log in to the bank with a username. Required before any account call.",
    username={"type": "string"},
)
BALANCE = tool(
    "get_balance",
    "Balance of one of the logged-in user's accounts.",
    account={"type": "string", "enum": ["checking", "savings"]},
)
FIND = tool(
    "find_orders",
    "Find the user's orders for an item; returns order ids and statuses.",
    item={"type": "string"},
)
CANCEL = tool(
    "cancel_order",
    "Cancel an order by its numeric id (use find_orders to get it).",
    order_id={"type": "integer"},
)
ASK = "Log in as jdoe and tell me the balance of my checking account."


@pytest.fixture(scope="module")
def base(served_as_serve: str) -> str:
    return served_as_serve


def after(base: str, *exchanges: tuple[str, dict[str, Any], str]) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": ASK}]
    for n, (name, args, result) in enumerate(exchanges):
        made = {"id": f"c{n}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [made]},
            {"role": "tool", "tool_call_id": f"c{n}", "content": result},
        ]
    body = {
        "model": "smollm2-135m-instruct",
        "messages": messages,
        "tools": [LOGIN, BALANCE],
        "temperature": 0,
    }
    r = httpx.post(f"{base}/v1/chat/completions", json={**body, "max_tokens": 128}, timeout=300)
    assert r.status_code == 200, r.text
    return dict(r.json()["choices"][0]["message"])


def test_after_login_the_balance_is_the_next_call_and_then_the_answer(base: str) -> None:
    logged_in = ("login", {"username": "jdoe"}, "Logged in as jdoe.")
    step = after(base, logged_in)
    calls = step.get("tool_calls") or []
    assert calls and {c["function"]["name"] for c in calls} == {"get_balance"}, step
    done = after(base, logged_in, ("get_balance", {"account": "checking"}, "checking: 1204.5 USD"))
    assert not done.get("tool_calls") and done["content"], done


def test_a_refusal_that_names_the_prerequisite_gets_it_called(base: str) -> None:
    refused = ("get_balance", {"account": "checking"}, "Error: not logged in. Call login first.")
    step = after(base, refused)
    assert [c["function"]["name"] for c in step.get("tool_calls") or []][:1] == ["login"], step


def test_an_order_id_nobody_said_is_looked_up_first(base: str) -> None:
    reply = ask_with_tools(base, "Cancel my order for the lamp.", [CANCEL, FIND])
    (call,) = reply["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "find_orders"
    assert "lamp" in json.loads(call["function"]["arguments"])["item"]
    assert "call_redirected" in [n["kind"] for n in reply["tether"]["interventions"]]
