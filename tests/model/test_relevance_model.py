"""Everyday questions whose tool is offered get a call, not an invented answer (bundled model, strict).

A new user's first tries against `tether serve`: the weather in a city, the time in a city, a share
price, an amount in another currency, whether it rains somewhere — each with the tool that answers
it. The server runs as `tether serve` does, with the bundled embedding model (relevance in meaning,
the invented-result check), over a real socket.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.socket_server import ask_with_tools


def tool(name: str, description: str, **params: str) -> dict[str, Any]:
    props = {k: {"type": "string", "description": v} for k, v in params.items()}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": props, "required": list(props)},
        },
    }


WEATHER = tool("get_weather", "Get the current weather for a city.", city="The city name")
TIME = tool("get_time", "Get the current local time in a city.", city="The city name")
STOCK = tool("get_stock_price", "Get the latest share price of a company.", symbol="The ticker symbol")
CURRENCY = tool(
    "convert_currency",
    "Convert an amount of money from one currency to another.",
    amount="The amount",
    from_currency="Currency code to convert from",
    to_currency="Currency code to convert to",
)
RAIN = tool("get_precipitation", "Tell whether it is raining in a city right now.", city="The city name")

QUESTIONS = [
    ("What's the weather in Paris right now?", WEATHER),
    ("What time is it in Tokyo?", TIME),
    ("What is Apple's share price? The ticker is AAPL.", STOCK),
    ("How much is 75 euros in British pounds (EUR to GBP)?", CURRENCY),
    ("Is it raining in Lima?", RAIN),
]


@pytest.fixture(scope="module")
def base(served_as_serve: str) -> str:
    return served_as_serve


@pytest.mark.parametrize(
    ("question", "offered"), QUESTIONS, ids=[t["function"]["name"] for _, t in QUESTIONS]
)
def test_an_everyday_question_gets_its_tool_called(base: str, question: str, offered: dict[str, Any]) -> None:
    message = ask_with_tools(base, question, [offered])["choices"][0]["message"]
    assert message.get("tool_calls"), f"answered in text instead: {message.get('content')!r}"
    assert message["tool_calls"][0]["function"]["name"] == offered["function"]["name"]


def test_a_question_no_tool_fits_is_answered_in_one_run(base: str) -> None:
    """The prior alone settles the answer: no pass over the tool prompt before the plain answer."""
    reply = ask_with_tools(base, "Who wrote Pride and Prejudice?", [WEATHER])
    message = reply["choices"][0]["message"]
    assert not message.get("tool_calls") and message["content"]
    assert "generations" not in reply["tether"]  # reported only when a reply took more than one run
    notes = reply["tether"]["interventions"]
    assert [n["kind"] for n in notes] == ["decision_steered"] and "beyond" in notes[0]["detail"]
