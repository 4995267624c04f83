"""Layer 2 and argument repair on the bundled model: constrained re-pick and schema-constrained repair."""

from __future__ import annotations

from collections.abc import Sequence

import jsonschema

from tether.calls import ToolCall
from tether.chat import Message
from tether.engine.llama_cpp import LlamaCppEngine
from tether.engine.scheduler import Scheduler
from tether.engine.template import ChatTemplate
from tether.grammar.formats import detect_format, get_format
from tether.grammar.formats.base import ToolSpec
from tether.guardrails.pipeline import GuardResult, guard_steps, run_guard
from tether.guardrails.presets import PRESETS
from tether.turns.regenerate import SchedulerRegenerator

WEATHER = ToolSpec(
    "get_weather",
    "Current weather for a city",
    {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
    },
)
READ = ToolSpec(
    "read_file",
    "Read a file",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)
TOOLS = (WEATHER, READ)
ASK = (Message("user", "What is the weather like in Paris today?"),)


async def guarded(engine: LlamaCppEngine, calls: Sequence[ToolCall]) -> GuardResult:
    """The guard pipeline under ``full`` with the server's regenerator on the real engine."""
    template = ChatTemplate(engine.info.chat_template)
    fmt = get_format(detect_format(engine.info.chat_template))
    regenerator = SchedulerRegenerator(Scheduler([engine]), template, fmt)
    steps = guard_steps(calls, TOOLS, PRESETS["full"], ASK, can_regenerate=True)
    return await run_guard(steps, regenerator)


async def test_repick_lands_on_an_offered_tool(smollm: LlamaCppEngine) -> None:
    bad = ToolCall(
        "frobnicate_sky", {"city": "Paris"}, raw='{"name": "frobnicate_sky", "arguments": {"city": "Paris"}}'
    )
    outcome = await guarded(smollm, [bad])
    kinds = [n.kind for n in outcome.interventions]
    assert "repick" in kinds, kinds
    (call,) = outcome.calls
    assert outcome.usage.completion_tokens > 0  # the re-pick's tokens are counted
    assert call.name in {"get_weather", "read_file"}
    if call.name == "get_weather":
        assert call.arguments == {"city": "Paris"}


async def test_missing_argument_is_repaired_under_the_schema(smollm: LlamaCppEngine) -> None:
    bad = ToolCall(
        "get_weather", {"town": "Paris"}, raw='{"name": "get_weather", "arguments": {"town": "Paris"}}'
    )
    outcome = await guarded(smollm, [bad])
    kinds = [n.kind for n in outcome.interventions]
    assert kinds == ["args_repaired"], outcome.interventions
    (call,) = outcome.calls
    jsonschema.validate(call.arguments, WEATHER.parameters)
    assert isinstance(call.arguments["city"], str)


async def test_valid_call_is_left_alone(smollm: LlamaCppEngine) -> None:
    good = ToolCall("get_weather", {"city": "Paris"})
    outcome = await guarded(smollm, [good])
    assert outcome.interventions == () and outcome.calls[0].arguments == {"city": "Paris"}
    assert outcome.usage.completion_tokens == 0
