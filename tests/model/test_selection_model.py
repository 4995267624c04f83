"""Deciding, choosing and filling on the bundled model: the issue's cases as a new user meets them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.support.asgi import asgi_client
from tether.config import ServerConfig
from tether.engine.llama_cpp import LlamaCppEngine

MODEL = "smollm2-135m-instruct"


def tool(name: str, description: str, **props: dict[str, Any]) -> dict[str, Any]:
    schema = {"type": "object", "properties": props, "required": list(props)}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": schema}}


GET_TIME = tool("get_time", "Current time in a time zone", tz={"type": "string"})
AREA = tool(
    "calculate_triangle_area",
    "Calculate the area of a triangle given its base and height.",
    base={"type": "integer"},
    height={"type": "integer"},
)
WEATHER = tool("get_weather", "Current weather for a city", city={"type": "string"})


@pytest.fixture
async def client(smollm: LlamaCppEngine) -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(smollm, ServerConfig(), timeout=300) as c:
        yield c


async def ask(
    client: httpx.AsyncClient, text: str, tools: list[dict[str, Any]], **extra: Any
) -> dict[str, Any]:
    body = {"model": MODEL, "messages": [{"role": "user", "content": text}], "tools": tools, "temperature": 0}
    r = await client.post("/v1/chat/completions", json={"max_tokens": 160, **body, **extra})
    assert r.status_code == 200, r.text
    return dict(r.json())


def kinds(reply: dict[str, Any]) -> list[str]:
    return [i["kind"] for i in reply.get("tether", {}).get("interventions", [])]


async def test_goodbye_gets_a_sensible_text_answer(client: httpx.AsyncClient) -> None:
    # Under strict: the decision is not in the default preset (full calls get_time here).
    for preset in ("strict",):
        r = await ask(client, "Thanks, that is all. Bye!", [GET_TIME, WEATHER], tether={"preset": preset})
        message = r["choices"][0]["message"]
        assert not message.get("tool_calls"), (preset, message)
        content = message["content"] or ""
        assert len(content.split()) >= 2, (preset, content)
        for copied in ("YOUR ANSWER", "example", "TOOL_NAME", "<text>"):
            assert copied.casefold() not in content.casefold(), (preset, content)
        # Asked without the tool block: no talk of the format (inside the JSON envelope it answered
        # "The user asked for a JSON object with a list of tools ...").
        for leaked in ("json", "tool", '"response"'):
            assert leaked not in content.casefold(), (preset, content)


async def test_named_tool_choice_copies_nothing_from_the_prompt(client: httpx.AsyncClient) -> None:
    choice = {"type": "function", "function": {"name": "get_time"}}
    text = "What time is it in Europe/Paris?"
    r = await ask(client, text, [GET_TIME, WEATHER], tool_choice=choice)
    assert "example" not in json.dumps(r["choices"][0]["message"]).casefold()
    r = await ask(client, text, [GET_TIME, WEATHER], tool_choice=choice, tether={"preset": "strict"})
    (call,) = r["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "get_time"
    assert json.loads(call["function"]["arguments"]) == {"tz": "Europe/Paris"}


async def test_strict_fills_values_from_the_request_and_picks_the_fitting_tool(
    client: httpx.AsyncClient,
) -> None:
    r = await ask(
        client,
        "Find the area of a triangle with a base of 10 units and height of 5 units.",
        [WEATHER, AREA, GET_TIME],
        tether={"preset": "strict"},
    )
    # The first call is the fitting tool with the request's values. (The request's "10 units and height of
    # 5 units" reads as two enumerated items, so a second call is allowed and the model makes one.)
    call = r["choices"][0]["message"]["tool_calls"][0]
    assert call["function"]["name"] == "calculate_triangle_area"
    assert json.loads(call["function"]["arguments"]) == {"base": 10, "height": 5}


async def test_strict_never_returns_an_empty_reply(client: httpx.AsyncClient) -> None:
    """Requests no offered tool fits: a text answer or a call, never nothing."""
    for text in ("Tell me a joke about cats.", "What is the capital of France?", "How are you today?"):
        r = await ask(client, text, [AREA], tether={"preset": "strict"})
        message = r["choices"][0]["message"]
        assert message.get("tool_calls") or (message["content"] or "").strip(), (text, r)


INTEREST = tool(
    "compound_interest",
    "Compound interest on an investment.",
    principal={"type": "number", "description": "The amount invested."},
    rate={"type": "number", "description": "The annual interest rate."},
    years={"type": "integer", "description": "How many years."},
)
DENSITY = tool(
    "population_density",
    "Population density of a country.",
    population={"type": "integer", "description": "How many people live there."},
    area={"type": "number", "description": "Land area in square kilometers."},
)


async def test_strict_reads_numbers_as_the_parameter_means_them(client: httpx.AsyncClient) -> None:
    """ "$10,000" is 10000 (not the 10 before its comma), "5%" a fraction for a fractional rate and
    "213 million" the scaled count."""
    strict = {"preset": "strict"}
    text = "Calculate the compound interest on $10,000 at an interest rate of 5% for 10 years."
    (call,) = (await ask(client, text, [INTEREST], tether=strict))["choices"][0]["message"]["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == {"principal": 10000, "rate": 0.05, "years": 10}
    text = "What is the population density of Brazil with 213 million people on 8500000 square kilometers?"
    (call,) = (await ask(client, text, [DENSITY], tether=strict))["choices"][0]["message"]["tool_calls"]
    assert json.loads(call["function"]["arguments"])["population"] == 213000000


def _two(name: str, description: str) -> dict[str, Any]:
    return tool(name, description, num1={"type": "integer"}, num2={"type": "integer"})


async def test_strict_names_the_tool_the_request_talks_about_where_names_share_a_beginning(
    client: httpx.AsyncClient,
) -> None:
    gcd = _two("math_gcd", "Greatest common divisor of two numbers.")
    lcm = _two("math_lcm", "Least common multiple of two numbers.")
    for text, expected in (
        ("Calculate the least common multiple of 18 and 12.", "math_lcm"),
        ("Calculate the greatest common divisor of 18 and 12.", "math_gcd"),
    ):
        r = await ask(client, text, [gcd, lcm], tether={"preset": "strict"})
        calls = r["choices"][0]["message"]["tool_calls"]
        assert calls[0]["function"]["name"] == expected, (text, calls)


async def test_strict_adds_the_option_the_request_names_and_abstains_from_an_unsaid_value(
    client: httpx.AsyncClient,
) -> None:
    bird = tool(
        "identify_bird",
        "Identify a bird from its looks.",
        color={"type": "string"},
        habitat={"type": "string"},
    )
    bird["function"]["parameters"]["properties"]["size"] = {
        "type": "string",
        "enum": ["small", "medium", "large"],
    }
    # The model writes the required arguments and stops; "small" is what the user said.
    r = await ask(client, "Identify a small green bird in forest.", [bird], tether={"preset": "strict"})
    (call,) = r["choices"][0]["message"]["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == {
        "color": "green",
        "habitat": "forest",
        "size": "small",
    }
    assert "args_filled" in kinds(r)
    scorer = tool(
        "top_scorer", "A team's top scorer in a season.", team={"type": "string"}, season={"type": "string"}
    )
    r = await ask(
        client, "Who is the top scorer of Manchester United?", [scorer], tether={"preset": "strict"}
    )
    message = r["choices"][0]["message"]
    # No season was given: no call is made (decided, or abstained from), and the reply says something.
    assert not message.get("tool_calls") and (message["content"] or "").strip(), r


async def test_strict_asks_a_fitting_call_again_within_the_request_and_merges_its_variants(
    client: httpx.AsyncClient,
) -> None:
    """The right tool with an invented value ("Poron" for Portland) is asked once more with the value
    limited to the request's words; two calls that only swap the request's values are one call."""
    restaurant = tool(
        "find_restaurant",
        "Find a restaurant in a city by cuisine.",
        city={"type": "string", "description": "The city."},
        cuisine={"type": "string", "description": "The kind of food."},
    )
    r = await ask(client, "Find a Vietnamese restaurant in Portland.", [restaurant])  # the server default
    (call,) = r["choices"][0]["message"]["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == {"city": "Portland", "cuisine": "Vietnamese"}
    grounded = [i for i in r["tether"]["interventions"] if i["kind"] == "args_grounded"]
    assert grounded and grounded[0]["before"]["city"] != "Portland", r["tether"]
    assert r["tether"]["generations"] == 2  # the turn and the re-ask, both in usage
    difference = tool(
        "time_difference",
        "Time difference between two places.",
        place1={"type": "string"},
        place2={"type": "string"},
    )
    sunrise = tool("sunrise_time", "Sunrise time of a city.", city={"type": "string"})
    r = await ask(client, "Find the time difference between Cairo and Seoul.", [difference, sunrise])
    (call,) = r["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "time_difference"
    assert json.loads(call["function"]["arguments"]) == {"place1": "Cairo", "place2": "Seoul"}
    assert {"args_grounded", "variant_merged"} <= set(kinds(r)), r["tether"]
