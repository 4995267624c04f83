"""The next step after a tool result: call while the request asks for a tool that has not answered."""

from __future__ import annotations

from tether.calls import ToolCall
from tether.chat import Message
from tether.grammar.formats.base import ToolSpec
from tether.selection.decision import DecisionModel, relevance, steering_for
from tether.selection.next_step import next_step

LOGIN = ToolSpec(
    "login",
    "Log in to the bank with a username. Required before any account call.",
    {"type": "object", "properties": {"username": {"type": "string"}}},
)
BALANCE = ToolSpec(
    "get_balance",
    "Balance of one of the logged-in user's accounts.",
    {"type": "object", "properties": {"account": {"type": "string", "enum": ["checking", "savings"]}}},
)
JOKE = ToolSpec("tell_joke", "Tell a joke about a topic.", {"type": "object", "properties": {"topic": {}}})
TOOLS = [LOGIN, BALANCE, JOKE]
ASK = Message("user", "Log in as jdoe and tell me the balance of my checking account.")
MODEL = DecisionModel()


def step(*exchanges: tuple[ToolCall, str]) -> list[Message]:
    out = [ASK]
    for call, result in exchanges:
        out += [Message("assistant", "", tool_calls=(call,)), Message("tool", result, tool_call_id=call.id)]
    return out


def judged(messages: list[Message]) -> tuple[float, tuple[str, ...]]:
    found = next_step(messages, TOOLS, relevance(messages, TOOLS), MODEL)
    return found.prior, found.pending


LOGGED_IN = (ToolCall("login", {"username": "jdoe"}, "c1"), "Logged in as jdoe.")
BALANCED = (ToolCall("get_balance", {"account": "checking"}, "c2"), "checking: 1204.5 USD")


def test_a_tool_the_request_asks_for_that_has_not_answered_is_the_next_step() -> None:
    assert judged(step(LOGGED_IN)) == (MODEL.in_loop_step_prior, ("get_balance",))


def test_every_asked_for_tool_answered_is_a_finished_task() -> None:
    assert judged(step(LOGGED_IN, BALANCED)) == (-MODEL.in_loop_done_prior, ())


def test_a_failure_that_names_a_tool_points_to_it_first() -> None:
    early = (
        ToolCall("get_balance", {"account": "checking"}, "c0"),
        "Error: not logged in. Call login first.",
    )
    prior, pending = judged(step(early))
    assert prior == MODEL.in_loop_step_prior and pending[0] == "login"
    steered = steering_for(step(early), TOOLS, MODEL, decide=True, names=True)
    assert steered.name_prior["login"] - steered.name_prior["get_balance"] > MODEL.pending_name_bias
    # A failure that names nothing leaves the choice to the model (retry, or answer).
    failed = (ToolCall("login", {"username": "jdoe"}, "c1"), "Error: the bank is closed.")
    assert judged(step(BALANCED, failed)) == (0.0, ())


def test_only_the_current_task_counts() -> None:
    earlier = step(LOGGED_IN, BALANCED)
    again = [*earlier, Message("assistant", "1204.5 USD."), Message("user", "And my savings balance?")]
    call = ToolCall("get_balance", {"account": "savings"}, "c3")
    later = [
        *again,
        Message("assistant", "", tool_calls=(call,)),
        Message("tool", "savings: 88 USD", tool_call_id="c3"),
    ]
    assert judged(later)[0] == -MODEL.in_loop_done_prior  # get_balance answered this task


def test_the_name_prior_favours_the_tools_still_to_call() -> None:
    loop = steering_for(step(LOGGED_IN), TOOLS, MODEL, decide=True, names=True)
    fresh = steering_for([ASK], TOOLS, MODEL, decide=True, names=True)
    assert loop.call_prior == MODEL.in_loop_step_prior
    assert loop.name_prior["get_balance"] - loop.name_prior["login"] > 0
    assert fresh.call_prior == MODEL.prior(relevance([ASK], TOOLS))  # a fresh ask is judged as before


def test_a_tool_whose_parts_have_answered_is_not_the_next_step_while_another_is_left() -> None:
    # The balance answered before the login the request also asks for: login is left, and another
    # balance call (the model's habit: the same tool again, a value from its result) is not preferred.
    found = next_step(
        step(BALANCED), TOOLS, relevance(step(BALANCED), TOOLS), MODEL, ("login", "get_balance")
    )
    assert found.pending == ("login",) and found.served == ("get_balance",)
    both = next_step(
        step(LOGGED_IN), TOOLS, relevance(step(LOGGED_IN), TOOLS), MODEL, ("login", "get_balance")
    )
    assert both.served == ("login",)
    twice = next_step(
        step(BALANCED), TOOLS, relevance(step(BALANCED), TOOLS), MODEL, ("get_balance", "get_balance")
    )
    assert twice.served == ()  # a second part asks for it again


def test_a_tool_that_fits_the_whole_request_is_no_step_when_its_parts_ask_for_another() -> None:
    place = ToolSpec(
        "place_order",
        "Place an order for shares of a stock.",
        {"type": "object", "properties": {"symbol": {"type": "string"}, "amount": {"type": "integer"}}},
    )
    details = ToolSpec(
        "get_order_details",
        "Get the details of an order.",
        {"type": "object", "properties": {"order_id": {"type": "integer"}}},
    )
    tools = [place, details]
    ask = Message(
        "user",
        "My order to place shares of a stock was placed. Provide me with the details of my order.",
    )
    call = ToolCall("get_order_details", {"order_id": 12446}, "c1")
    messages = [
        ask,
        Message("assistant", "", tool_calls=(call,)),
        Message("tool", "{'id': 12446}", tool_call_id="c1"),
    ]
    steps = ["get_order_details"]
    assert (
        MODEL.prior([r for r in relevance(messages, tools) if r.tool == "place_order"]) > 0
    )  # it fits the whole
    found = next_step(messages, tools, relevance(messages, tools), MODEL, steps)
    assert (found.prior, found.pending) == (-MODEL.in_loop_done_prior, ())
