"""The guard's step seam: ``STEPS`` in order, one module each, run by ``guard_steps``'s loop.

A step returns the call (changed or not) or None to drop it; ``ctx.settle`` keeps the call with
its verdict and skips the later steps; a step asks the model through ``ctx.ask``.
"""

from __future__ import annotations

import pytest

from tether.calls import ToolCall
from tether.chat import Message, Usage
from tether.grammar.formats.base import ToolSpec
from tether.guardrails import pipeline
from tether.guardrails.pipeline import (
    STEPS,
    CallVerdict,
    FixArguments,
    GuardContext,
    GuardResult,
    PickName,
    Regenerated,
    Request,
    Step,
    guard_steps,
    run_guard_sync,
)
from tether.guardrails.presets import PRESETS
from tether.guardrails.steps import context
from tether.guardrails.steps.context import StepRun, never_asks

READ = ToolSpec(
    "read_file",
    "Read a file",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)
ASK = [Message("user", "Read notes.txt")]


def recorder(seen: list[str], label: str) -> Step:
    """A step that notes which call it saw and keeps it."""

    @never_asks
    def step(call: ToolCall, ctx: GuardContext) -> ToolCall | None:
        seen.append(f"{label}:{call.id}")
        return call

    return step


def run(calls: list[ToolCall], steps: tuple[Step, ...]) -> GuardResult:
    return run_guard_sync(guard_steps(calls, [READ], PRESETS["full"], ASK, steps=steps))


def test_steps_are_the_documented_order_each_in_its_own_module() -> None:
    order = ["rescue_gate", "names", "arguments", "dates", "grounding", "shapes", "duplicates", "mentioned"]
    assert [s.__name__ for s in STEPS] == order
    assert [s.__module__ for s in STEPS] == [f"tether.guardrails.steps.{n}" for n in order]
    # guard_steps runs STEPS unless told otherwise.
    default = guard_steps.__kwdefaults__ or {}
    assert default["steps"] is STEPS


def test_the_public_names_are_the_same_objects_from_the_pipeline() -> None:
    for name in ("CallVerdict", "FixArguments", "GuardContext", "GuardResult", "PickName", "Regenerated"):
        assert getattr(pipeline, name) is getattr(context, name)
        assert name in pipeline.__all__


def test_a_custom_step_tuple_runs_in_order_on_every_call() -> None:
    seen: list[str] = []
    calls = [ToolCall("read_file", {"path": "a"}, id="1"), ToolCall("read_file", {"path": "b"}, id="2")]
    result = run(calls, (recorder(seen, "x"), recorder(seen, "y")))
    assert seen == ["x:1", "y:1", "x:2", "y:2"]
    assert [c.id for c in result.calls] == ["1", "2"]
    assert [v for _, v in result.checked] == [CallVerdict("ok", "read_file")] * 2
    assert result.interventions == ()


def test_no_steps_keeps_every_call_as_written() -> None:
    calls = [ToolCall("nope", {"x": 1}, id="1"), ToolCall("nope", {"x": 1}, id="2")]
    result = run(calls, ())
    assert result.calls == tuple(calls)
    assert [v.status for _, v in result.checked] == ["ok", "ok"]


def test_a_step_returning_none_drops_the_call_and_skips_the_later_steps() -> None:
    seen: list[str] = []

    @never_asks
    def drop_b(call: ToolCall, ctx: GuardContext) -> ToolCall | None:
        return None if call.arguments.get("path") == "b" else call

    calls = [ToolCall("read_file", {"path": "a"}, id="1"), ToolCall("read_file", {"path": "b"}, id="2")]
    result = run(calls, (drop_b, recorder(seen, "after")))
    assert seen == ["after:1"]
    assert [c.id for c in result.calls] == ["1"]


def test_a_changed_call_reaches_the_later_steps_and_the_result() -> None:
    seen: list[str] = []

    @never_asks
    def rename(call: ToolCall, ctx: GuardContext) -> ToolCall | None:
        return call.with_repairs("renamed", name="read_file", id="r" + call.id)

    result = run([ToolCall("Read", {"path": "a"}, id="1")], (rename, recorder(seen, "after")))
    assert seen == ["after:r1"]
    assert result.calls[0].name == "read_file"
    assert result.calls[0].repairs == ("renamed",)


def test_a_settled_call_is_kept_with_its_verdict_and_skips_the_later_steps() -> None:
    seen: list[str] = []

    @never_asks
    def settle_first(call: ToolCall, ctx: GuardContext) -> ToolCall | None:
        if call.id == "1":
            ctx.settle(CallVerdict("unchecked", call.name))
        return call

    calls = [ToolCall("read_file", {"path": "a"}, id="1"), ToolCall("read_file", {"path": "b"}, id="2")]
    result = run(calls, (settle_first, recorder(seen, "after")))
    assert seen == ["after:2"]  # the next call starts unsettled, under an ok verdict
    assert [(c.id, v.status) for c, v in result.checked] == [("1", "unchecked"), ("2", "ok")]


def test_an_unresolved_name_is_settled_by_the_names_step_before_the_rest() -> None:
    seen: list[str] = []
    steps = (*STEPS[:2], recorder(seen, "after"), *STEPS[2:])
    calls = [ToolCall("launch_rockets", {}, id="1"), ToolCall("read_file", {"path": "a"}, id="2")]
    result = run(calls, steps)
    assert seen == ["after:2"]
    (_, first), (_, second) = result.checked
    assert (first.status, first.written_name) == ("unresolved", "launch_rockets")
    assert second == CallVerdict("ok", "read_file")
    assert [i.kind for i in result.interventions] == ["name_unresolved"]


def test_a_step_asks_the_model_through_the_context_once_per_distinct_request() -> None:
    def ask_twice(call: ToolCall, ctx: GuardContext) -> StepRun:
        request = FixArguments(ctx.history, READ, call, ())
        first = yield from ctx.ask(request)
        again = yield from ctx.ask(request)  # the same request: answered without a generation
        assert again is first
        value = first.value if first is not None else None
        return call.with_repairs(arguments=value) if isinstance(value, dict) else None

    asked: list[Request] = []

    def regenerate(request: Request) -> Regenerated | None:
        asked.append(request)
        return Regenerated({"path": "fixed"}, Usage(10, 2, 4, 1))

    calls = [ToolCall("read_file", {"path": "a"}, id="1"), ToolCall("read_file", {"path": "b"}, id="2")]
    steps = guard_steps(calls, [READ], PRESETS["full"], ASK, steps=(ask_twice,))
    result = run_guard_sync(steps, regenerate)
    assert [r.call.id for r in asked] == ["1", "2"]
    assert [c.arguments for c in result.calls] == [{"path": "fixed"}] * 2
    assert result.usage == Usage(20, 4, 8, 2, window=(10, 4))


def test_the_names_step_yields_a_pick_name_request_the_loop_passes_on() -> None:
    steps = guard_steps([ToolCall("fetch", {"path": "a"})], [READ], PRESETS["full"], ASK, can_regenerate=True)
    request = next(steps)
    assert isinstance(request, PickName)
    assert request.tools == (READ,)
    assert request.call.name == "fetch"
    with pytest.raises(StopIteration) as stop:
        steps.send(Regenerated("read_file", Usage(5, 1, 5, 1)))
    result: GuardResult = stop.value.value
    assert [c.name for c in result.calls] == ["read_file"]
    assert result.checked[0][1] == CallVerdict("ok", "fetch")
    assert "repicked" in result.calls[0].repairs
    assert result.usage == Usage(5, 1, 5, 1)


def test_the_context_prepares_the_grounding_once_and_counts_a_lone_call() -> None:
    same = ToolCall("read_file", {"path": "a"})
    ctx = GuardContext.start([same, same], [READ], PRESETS["strict"], ASK)
    assert ctx.lone and ctx.spoken is ctx.spoken
    assert ctx.spoken.has_string("notes.txt")
    two = GuardContext.start([same, ToolCall("read_file", {"path": "b"})], [READ], PRESETS["strict"], ASK)
    assert not two.lone


def test_the_context_reads_the_previous_turns_answered_calls_only_under_end_loops() -> None:
    done = ToolCall("read_file", {"path": "a"}, id="t1")
    failed = ToolCall("read_file", {"path": "b"}, id="t2")
    history = [
        *ASK,
        Message("assistant", "", tool_calls=(done, failed)),
        Message("tool", "contents", tool_call_id="t1"),
        Message("tool", "Error: no such file", tool_call_id="t2"),
    ]
    strict = GuardContext.start([done], [READ], PRESETS["strict"], history)
    assert strict.answered == {context.call_key(done)}  # the failed call may be retried
    assert GuardContext.start([done], [READ], PRESETS["full"], history).answered == frozenset()


def test_a_call_that_failed_as_often_as_it_may_be_retried_is_not_made_again() -> None:
    same = ToolCall("read_file", {"path": "b"})

    def turns(*results: str) -> list[Message]:
        out = [*ASK]
        for n, result in enumerate(results):
            call = ToolCall("read_file", {"path": "b"}, id=f"t{n}")
            out += [
                Message("assistant", "", tool_calls=(call,)),
                Message("tool", result, tool_call_id=f"t{n}"),
            ]
        return out

    busy = "Error: the disk is busy."
    assert PRESETS["strict"].failed_retries == 2
    for history, out in (
        (turns(busy), False),  # a failed call may be retried ...
        (turns(busy, busy), False),
        (turns(busy, busy, busy), True),  # ... twice
        (turns("contents", busy, busy), False),
        (turns(busy, busy, "contents"), True),  # answered
    ):
        ctx = GuardContext.start([same], [READ], PRESETS["strict"], history)
        assert (context.call_key(same) in ctx.failing | ctx.answered) is out
    ctx = GuardContext.start([same], [READ], PRESETS["full"], turns(busy, busy, busy))
    assert ctx.failing == frozenset()  # only under end_loops


def _tool(name: str, required: tuple[str, ...] = (), **types: str) -> ToolSpec:
    """A tool whose parameters have the JSON ``types`` given, ``required`` among them."""
    props = {k: {"type": t} for k, t in types.items()}
    return ToolSpec(name, "", {"type": "object", "properties": props, "required": list(required)})


def test_a_repeated_call_takes_the_lists_next_item() -> None:
    """ "resistivity of copper and aluminum", the call with copper written twice: the repeat is the
    aluminum call the request lists; a repeat with nothing listed left is dropped as before."""
    wire = _tool("calculate_resistance", ("length", "resistivity"), length="number", resistivity="string")
    ask = (Message("user", "The resistance of a 5m wire with the resistivity of copper and aluminum?"),)
    copper = ToolCall("calculate_resistance", {"length": 5, "resistivity": "copper"})
    guarded = run_guard_sync(guard_steps([copper, copper, copper], [wire], PRESETS["strict"], ask))
    assert [dict(c.arguments) for c in guarded.calls] == [
        {"length": 5, "resistivity": "copper"},
        {"length": 5, "resistivity": "aluminum"},
    ]
    assert [n.kind for n in guarded.interventions] == ["duplicate_advanced", "duplicate_dropped"]
    ages = _tool("factorial", ("number",), number="integer")
    asked = (Message("user", "The factorials of 5, 3 and 4"),)
    five = ToolCall("factorial", {"number": 5})
    guarded = run_guard_sync(guard_steps([five, five], [ages], PRESETS["strict"], asked))
    # The repeat ended the model's list short of the items left: each gets its call.
    assert [dict(c.arguments) for c in guarded.calls] == [{"number": 5}, {"number": 3}, {"number": 4}]
    assert [n.kind for n in guarded.interventions] == ["duplicate_advanced"] * 2
    unlisted = (Message("user", "The factorial of 5"),)
    guarded = run_guard_sync(guard_steps([five, five], [ages], PRESETS["strict"], unlisted))
    assert [dict(c.arguments) for c in guarded.calls] == [{"number": 5}]


def test_a_repeat_is_not_advanced_along_words_that_are_no_list_of_its_kind() -> None:
    origin = _tool("religion_get_origin", religion="string")
    ask = (Message("user", "Who was the founder of Buddhism and where was it originated?"),)
    call = ToolCall("religion_get_origin", {"religion": "Buddhism"})
    guarded = run_guard_sync(guard_steps([call, call], [origin], PRESETS["strict"], ask))
    assert [dict(c.arguments) for c in guarded.calls] == [{"religion": "Buddhism"}]
    games = _tool("recommend", numPlayers="integer", category="string")
    asked = (Message("user", "Board games for 2 players and strategy based"),)
    played = ToolCall("recommend", {"numPlayers": 2, "category": "strategy"})
    guarded = run_guard_sync(guard_steps([played, played], [games], PRESETS["strict"], asked))
    assert len(guarded.calls) == 1  # "players" is the schema's own word
    cities = _tool("weather", city="string")
    where = (Message("user", "The weather in Paris, London and Berlin"),)
    paris = ToolCall("weather", {"city": "Paris"})
    guarded = run_guard_sync(guard_steps([paris, paris, paris], [cities], PRESETS["strict"], where))
    assert [c.arguments["city"] for c in guarded.calls] == ["Paris", "London", "Berlin"]
    route = ToolSpec(
        "distance",
        "",
        {
            "type": "object",
            "properties": {"start_location": {"type": "string"}, "end_location": {"type": "string"}},
        },
    )
    drive = (Message("user", "The shortest driving distance between New York, USA and Miami, USA."),)
    trip = ToolCall("distance", {"start_location": "New York", "end_location": "Miami"})
    guarded = run_guard_sync(guard_steps([trip, trip], [route], PRESETS["strict"], drive))
    assert len(guarded.calls) == 1  # "York" is the start's
    events = [_tool("create_event", date="string", title="string"), _tool("invite", email="string")]
    plan = (Message("user", "Create 'Design review' on 2025-05-02 and invite bob@example.com to it"),)
    made = ToolCall("create_event", {"date": "2025-05-02", "title": "Design review"})
    guarded = run_guard_sync(guard_steps([made, made], events, PRESETS["strict"], plan))
    assert len(guarded.calls) == 1  # "invite" is a step, not a date


def test_a_later_call_that_only_mixes_earlier_calls_values_is_dropped() -> None:
    """After (dataset1, 10, 100) and (dataset2, 20, 200), (dataset1, 20, 200) adds nothing the
    request says; a pairing of two lists' items ("Lakers and Bulls in 2018 and 2020") is meant."""
    forest = _tool("train", dataset="string", max_depth="integer", n_estimators="integer")
    ask = (
        Message(
            "user",
            "Train on 'dataset1' and 'dataset2': the first run with depth 10 and 100 trees, the second "
            "with depth 20 and 200 trees.",
        ),
    )
    first = ToolCall("train", {"dataset": "dataset1", "max_depth": 10, "n_estimators": 100})
    second = ToolCall("train", {"dataset": "dataset2", "max_depth": 20, "n_estimators": 200})
    mix = ToolCall("train", {"dataset": "dataset1", "max_depth": 20, "n_estimators": 200})
    guarded = run_guard_sync(guard_steps([first, second, mix], [forest], PRESETS["strict"], ask))
    assert [c.arguments for c in guarded.calls] == [first.arguments, second.arguments]
    assert [n.kind for n in guarded.interventions] == ["duplicate_mixed"]
    new = ToolCall("train", {"dataset": "dataset1", "max_depth": 30, "n_estimators": 200})
    guarded = run_guard_sync(guard_steps([first, second, new], [forest], PRESETS["strict"], ask))
    assert len(guarded.calls) == 3  # 30 is no earlier call's value
    seasons = _tool("win_rate", team="string", season="integer")
    both = (Message("user", "The winning percentage of Lakers and Bulls in seasons 2018 and 2020"),)
    calls = [
        ToolCall("win_rate", {"team": "Lakers", "season": 2018}),
        ToolCall("win_rate", {"team": "Bulls", "season": 2020}),
        ToolCall("win_rate", {"team": "Lakers", "season": 2020}),
    ]
    guarded = run_guard_sync(guard_steps(calls, [seasons], PRESETS["strict"], both))
    assert len(guarded.calls) == 3


def test_an_earlier_call_takes_the_unused_number_nearer_its_values() -> None:
    """ "5 years ago … 3 years ago", both calls with 3: the first call is rewritten in place."""
    cagr = _tool("cagr", initial="integer", final="integer", years="integer")
    ask = (
        Message(
            "user",
            "He invested $5000 5 years ago, now worth $7000; and $8000 3 years ago, now worth $12000.",
        ),
    )
    calls = [
        ToolCall("cagr", {"initial": 5000, "final": 7000, "years": 3}),
        ToolCall("cagr", {"initial": 8000, "final": 12000, "years": 3}),
    ]
    guarded = run_guard_sync(guard_steps(calls, [cagr], PRESETS["strict"], ask))
    assert [c.arguments["years"] for c in guarded.calls] == [5, 3]
    assert [n.kind for n in guarded.interventions] == ["args_reshaped"]


def test_a_repeat_takes_the_other_value_of_a_flag_the_request_says_both_ways() -> None:
    entropy = _tool("entropy_change", initial="integer", isothermal="boolean")
    ask = (Message("user", "From 300 K; the process is isothermal. What if the process is not isothermal?"),)
    call = ToolCall("entropy_change", {"initial": 300, "isothermal": True})
    guarded = run_guard_sync(guard_steps([call, call], [entropy], PRESETS["strict"], ask))
    assert [c.arguments["isothermal"] for c in guarded.calls] == [True, False]
    plain = (Message("user", "From 300 K; the process is isothermal."),)
    guarded = run_guard_sync(guard_steps([call, call], [entropy], PRESETS["strict"], plain))
    assert len(guarded.calls) == 1


def test_a_later_call_that_changes_one_value_to_a_guess_is_dropped() -> None:
    """ "a rental": ``intent: "rent"`` then the same call with ``"buy"``, which nobody said; a start
    that is one of the call's own stops. A value the request says ("Paris and Lyon") is a new call."""
    homes = _tool("find_home", area="string", intent="string", beds="integer")
    ask = (Message("user", "A rental in Austin with two bedrooms."),)
    rent = ToolCall("find_home", {"area": "Austin", "intent": "rent", "beds": 2})
    buy = ToolCall("find_home", {"area": "Austin", "intent": "buy", "beds": 2})
    guarded = run_guard_sync(guard_steps([rent, buy], [homes], PRESETS["strict"], ask))
    assert [c.arguments["intent"] for c in guarded.calls] == ["rent"]
    route = _tool("route", start="string", end="string", stops="array")
    trip = (Message("user", "From San Francisco to Los Angeles with stops at Santa Barbara and Monterey."),)
    stops = ["Santa Barbara", "Monterey"]
    first = ToolCall("route", {"start": "San Francisco", "end": "Los Angeles", "stops": stops})
    again = ToolCall("route", {"start": "Santa Barbara", "end": "Los Angeles", "stops": stops})
    guarded = run_guard_sync(guard_steps([first, again], [route], PRESETS["strict"], trip))
    assert [c.arguments["start"] for c in guarded.calls] == ["San Francisco"]
    weather = _tool("weather", city="string")
    both = (Message("user", "The weather in Paris and in Lyon"),)
    calls = [ToolCall("weather", {"city": "Paris"}), ToolCall("weather", {"city": "Lyon"})]
    assert len(run_guard_sync(guard_steps(calls, [weather], PRESETS["strict"], both)).calls) == 2


def test_calls_the_request_asks_for_are_no_guess_nor_mix() -> None:
    """A number equal to another parameter's, the next item of a list written the model's way, a
    pairing the request writes again: each is a call the request asks for."""
    power = _tool("power", base="integer", exponent="integer")
    ask = (Message("user", "Calculate 2 to the power of 3 and 2 to the power of 2"),)
    calls = [ToolCall("power", {"base": 2, "exponent": 3}), ToolCall("power", {"base": 2, "exponent": 2})]
    assert len(run_guard_sync(guard_steps(calls, [power], PRESETS["strict"], ask)).calls) == 2
    convert = _tool("convert", amount="number", to_currency="string")
    money = (Message("user", "Convert 100 USD to EUR and to Japanese yen"),)
    calls = [
        ToolCall("convert", {"amount": 100, "to_currency": "EUR"}),
        ToolCall("convert", {"amount": 100, "to_currency": "JPY"}),
    ]
    assert len(run_guard_sync(guard_steps(calls, [convert], PRESETS["strict"], money)).calls) == 2
    area = _tool("area", width="integer", height="integer")
    sides = (Message("user", "Find the areas of rectangles 5 by 10, 3 by 4 and 10 by 3"),)
    calls = [
        ToolCall("area", {"width": 5, "height": 10}),
        ToolCall("area", {"width": 3, "height": 4}),
        ToolCall("area", {"width": 10, "height": 3}),
    ]
    assert len(run_guard_sync(guard_steps(calls, [area], PRESETS["strict"], sides)).calls) == 3
    days = _tool("workdays", start="string", include_weekends="boolean")
    once = (Message("user", "Days from 2024-05-01, not counting weekends? Weekends here are Saturday and Sunday."),)
    call = ToolCall("workdays", {"start": "2024-05-01", "include_weekends": False})
    assert len(run_guard_sync(guard_steps([call, call], [days], PRESETS["strict"], once)).calls) == 1
