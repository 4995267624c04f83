"""The invented-result check: a text answer about what an offered tool supplies is decided again as a call.

The stage is driven with a scripted inner pipeline (what the core would stream) and a small
embedder whose vectors are keyword counts, so the test is about the stage's decisions: what it
holds, when it re-runs, what it reports. The real model is in tests/model/test_relevance_model.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from tether.calls import ToolCall
from tether.chat import Message, Usage
from tether.grammar.formats.base import ToolSpec
from tether.guardrails.interventions import GuardrailStats, Intervention
from tether.guardrails.presets import PRESETS
from tether.selection.semantic import SemanticRelevance
from tether.turns.answer_check import AnswerCheckStage, invented_tool, refused_tool
from tether.turns.events import ChatJob, FinishOut, TextOut, TurnEvent
from tether.turns.stages import Turn

WORDS = ("weather", "temperature", "rain", "currency", "euro", "joke")


class KeywordEmbedder:
    """Unit vectors of keyword counts: texts about the same thing point the same way."""

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        rows = []
        for text in texts:
            v = np.array([text.lower().count(w) for w in WORDS] + [0.3], dtype=np.float32)
            rows.append(v / np.linalg.norm(v))
        return np.stack(rows)


WEATHER = ToolSpec("get_weather", "Current weather and temperature for a city", {"type": "object"})
CURRENCY = ToolSpec("convert_currency", "Convert an amount between currency pairs, euro to pound", {})
GUARD = replace(PRESETS["strict"], recheck_answers=0.6)
ASK = ChatJob((Message("user", "What's the weather like in Riga?"),), (WEATHER, CURRENCY), guard=GUARD)
CALL = ToolCall("get_weather", {"city": "Riga"}, id="call_1")


class Inner:
    """The rest of the pipeline: each run streams the next scripted reply; records the jobs it got."""

    def __init__(self, *replies: Sequence[TurnEvent]) -> None:
        self.replies = list(replies)
        self.jobs: list[ChatJob] = []

    async def __call__(self, turn: Turn) -> AsyncIterator[TurnEvent]:
        self.jobs.append(turn.job)
        for ev in self.replies.pop(0):
            yield ev


def text_reply(text: str, tokens: int = 10) -> list[TurnEvent]:
    return [TextOut(text[:5]), TextOut(text[5:]), FinishOut("stop", Usage(50, tokens, 50, generations=1))]


def call_reply() -> list[TurnEvent]:
    return [
        CALL,
        FinishOut("tool_calls", Usage(50, 8, 50, generations=1), (Intervention("args_coerced", "x"),)),
    ]


async def run(stage: AnswerCheckStage, job: ChatJob, inner: Inner) -> list[TurnEvent]:
    return [ev async for ev in stage(Turn(job), inner)]


def stage() -> tuple[AnswerCheckStage, GuardrailStats]:
    stats = GuardrailStats()
    return AnswerCheckStage(SemanticRelevance(KeywordEmbedder()), stats), stats


async def test_an_invented_reading_is_decided_again_as_a_call() -> None:
    check, stats = stage()
    inner = Inner(text_reply("In Riga the weather is sunny, temperature 22 degrees."), call_reply())
    events = await run(check, ASK, inner)
    assert [type(e) for e in events] == [ToolCall, FinishOut]  # the fake never reaches the client
    assert [j.call_decided for j in inner.jobs] == [False, True]
    finish = events[-1]
    assert isinstance(finish, FinishOut)
    assert finish.usage.completion_tokens == 18 and finish.usage.generations == 2  # both runs counted
    assert [n.kind for n in finish.interventions] == ["answer_recalled", "args_coerced"]
    assert finish.interventions[0].tool == "get_weather"
    assert stats.interventions == {"answer_recalled": 1}


async def test_a_recalled_call_the_guard_abstains_from_leaves_the_first_answer() -> None:
    check, _ = stage()
    answer = "In Riga the weather is sunny, temperature 22 degrees."
    abstained = Intervention("call_abstained", "the conversation does not say its city", "get_weather")
    nothing = [FinishOut("stop", Usage(50, 8, 50, generations=1), (abstained,))]  # the guard dropped it
    inner = Inner(text_reply(answer), nothing)
    events = await run(check, ASK, inner)
    assert "".join(e.text for e in events if isinstance(e, TextOut)) == answer  # no third generation
    assert len(inner.jobs) == 2
    finish = events[-1]
    assert isinstance(finish, FinishOut) and finish.finish_reason == "stop"
    assert [n.kind for n in finish.interventions] == ["answer_recalled", "call_abstained"]
    assert finish.usage.generations == 2


async def test_an_answer_given_after_an_abstained_call_is_not_recalled() -> None:
    check, stats = stage()
    answer = "In Riga the weather is sunny, temperature 22 degrees."
    abstained = Intervention("call_abstained", "the conversation does not say its city", "get_weather")
    inner = Inner([TextOut(answer), FinishOut("stop", Usage(50, 8, 50, generations=2), (abstained,))])
    events = await run(check, ASK, inner)
    assert "".join(e.text for e in events if isinstance(e, TextOut)) == answer
    assert len(inner.jobs) == 1 and not stats.interventions


async def test_an_answer_about_something_no_tool_supplies_streams_as_it_is() -> None:
    check, stats = stage()
    joke = ChatJob((Message("user", "Tell me a joke"),), (WEATHER, CURRENCY), guard=GUARD)
    inner = Inner(text_reply("Here is a joke: why did the joke cross the road?"))
    events = await run(check, joke, inner)
    assert "".join(e.text for e in events if isinstance(e, TextOut)).startswith("Here is a joke")
    assert len(inner.jobs) == 1 and not stats.interventions


async def test_a_reply_to_a_request_about_no_tool_streams_from_its_first_token() -> None:
    check, _ = stage()
    joke = ChatJob((Message("user", "Tell me a joke"),), (WEATHER, CURRENCY), guard=GUARD)
    produced: list[str] = []

    async def inner(turn: Turn) -> AsyncIterator[TurnEvent]:
        for part in ("Why did ", "the chicken ", "cross?"):
            produced.append(part)
            yield TextOut(part)
        yield FinishOut("stop", Usage(50, 3, 50, generations=1))

    events = check(Turn(joke), inner)
    first = await anext(events)
    assert isinstance(first, TextOut) and first.text == "Why did " and produced == ["Why did "]
    assert [type(e) async for e in events] == [TextOut, TextOut, FinishOut]


async def test_a_long_answer_streams_once_its_opening_reads_clean() -> None:
    check, _ = stage()
    about = ChatJob((Message("user", "Weather talk: tell me a long joke"),), (WEATHER, CURRENCY), guard=GUARD)
    produced: list[str] = []
    parts = ["Here is a joke. " * 10, "It goes on. " * 20, "The end."]  # the opening: 160 + 240 chars

    async def inner(turn: Turn) -> AsyncIterator[TurnEvent]:
        for part in parts:
            produced.append(part)
            yield TextOut(part)
        yield FinishOut("stop", Usage(50, 90, 50, generations=1))

    events = check(Turn(about), inner)
    first = await anext(events)
    assert isinstance(first, TextOut) and first.text == parts[0] and len(produced) == 2  # not the end
    assert [type(e) async for e in events] == [TextOut, TextOut, FinishOut]


class CountingEmbedder(KeywordEmbedder):
    def __init__(self) -> None:
        self.texts = 0

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.texts += len(texts)
        return super().embed(texts)


async def test_a_long_invented_answer_is_held_to_its_end_and_recalled_reading_its_opening_once() -> None:
    embedder = CountingEmbedder()
    check = AnswerCheckStage(SemanticRelevance(embedder))
    sentence = "In Riga the weather is sunny, temperature 22 degrees. "
    reply: list[TurnEvent] = [TextOut(sentence) for _ in range(40)]  # one event per sentence
    inner = Inner([*reply, FinishOut("stop", Usage(50, 400, 50, generations=1))], call_reply())
    events = await run(check, ASK, inner)
    assert [type(e) for e in events] == [ToolCall, FinishOut]
    # The request and the tools once each, the opening once and the whole answer once: not one
    # embedding per event after the opening.
    assert embedder.texts <= 6, embedder.texts


async def test_a_reply_that_calls_streams_at_once_and_is_not_checked() -> None:
    check, _ = stage()
    inner = Inner([TextOut("Let me check. "), CALL, FinishOut("tool_calls", Usage(50, 8, 50, generations=1))])
    events = await run(check, ASK, inner)
    assert [type(e) for e in events] == [TextOut, ToolCall, FinishOut] and len(inner.jobs) == 1


async def test_only_a_fresh_auto_ask_with_the_preset_on_is_checked() -> None:
    check, _ = stage()
    answer = "The weather in Riga: temperature 22 degrees."
    for job in (
        replace(ASK, guard=replace(GUARD, recheck_answers=0.0)),  # recheck off
        replace(ASK, tool_choice="none"),
        replace(ASK, messages=(*ASK.messages, Message("tool", "22 C", tool_call_id="c"))),  # mid-task
        replace(ASK, call_decided=True),  # already decided again: never a loop
    ):
        inner = Inner(text_reply(answer))
        events = await run(check, job, inner)
        assert "".join(e.text for e in events if isinstance(e, TextOut)) == answer and len(inner.jobs) == 1


def test_invented_tool_needs_both_the_request_and_the_answer_on_one_tool() -> None:
    semantic = SemanticRelevance(KeywordEmbedder())
    tools = (WEATHER, CURRENCY)
    assert invented_tool(semantic, "weather in Riga?", "The weather: rain.", tools, 0.6) is not None
    assert invented_tool(semantic, "weather in Riga?", "Here is a joke about a joke.", tools, 0.6) is None
    assert invented_tool(semantic, "Tell me a joke", "The weather is fine.", tools, 0.6) is None
    assert invented_tool(semantic, "weather in Riga?", "", tools, 0.6) is None


def test_a_refusal_to_a_request_about_a_tool_names_that_tool() -> None:
    semantic = SemanticRelevance(KeywordEmbedder())
    tools = (WEATHER, CURRENCY)
    refusal = "I'm sorry, but as a chatbot I don't have the ability to check the sky."
    found = refused_tool(semantic, "weather in Riga?", refusal, tools, 0.6)
    assert found is not None and found[0] == "get_weather" and found[1] >= 0.6
    assert refused_tool(semantic, "weather in Riga?", "I don’t have access to that.", tools, 0.6) is not None
    assert refused_tool(semantic, "Tell me a joke", refusal, tools, 0.6) is None  # no tool fits the ask
    assert refused_tool(semantic, "weather in Riga?", "Sunny, I think.", tools, 0.6) is None  # no refusal
    late = "Sure! " + "x" * 400 + " I cannot say more."
    assert refused_tool(semantic, "weather in Riga?", late, tools, 0.6) is None  # a refusal leads


async def test_a_refusal_is_decided_again_as_a_call() -> None:
    check, _ = stage()
    inner = Inner(text_reply("I'm sorry, I don't have the ability to do that."), call_reply())
    events = await run(check, ASK, inner)
    assert [type(e) for e in events] == [ToolCall, FinishOut]
    finish = events[-1]
    assert isinstance(finish, FinishOut) and "refused what get_weather does" in finish.interventions[0].detail
