"""Layer 2 and argument repair on the bundled model: constrained re-pick and schema-constrained repair."""

from __future__ import annotations

import jsonschema

from tether.chat import Message
from tether.engine.llama_cpp import LlamaCppEngine
from tether.engine.scheduler import Scheduler
from tether.engine.template import ChatTemplate
from tether.grammar.formats.base import ParsedCall, ToolSpec
from tether.grammar.provider import ConstraintProvider
from tether.proxy.guard import PRESETS, CallGuard

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


def guard_for(engine: LlamaCppEngine) -> CallGuard:
    template = ChatTemplate(engine.info.chat_template)
    return CallGuard(Scheduler([engine]), template, ConstraintProvider(engine))


async def test_repick_lands_on_an_offered_tool(smollm: LlamaCppEngine) -> None:
    guard = guard_for(smollm)
    bad = ParsedCall(
        "frobnicate_sky",
        {"city": "Paris"},
        raw='{"name": "frobnicate_sky", "arguments": {"city": "Paris"}}',
        offered=False,
    )
    outcome = await guard.fix(PRESETS["full"], ASK, TOOLS, [bad])
    kinds = [n.kind for n in outcome.interventions]
    assert "repick" in kinds, kinds
    (call,) = outcome.calls
    assert call.name in {"get_weather", "read_file"}
    if call.name == "get_weather":
        assert call.arguments == {"city": "Paris"}


async def test_missing_argument_is_repaired_under_the_schema(smollm: LlamaCppEngine) -> None:
    guard = guard_for(smollm)
    bad = ParsedCall(
        "get_weather", {"town": "Paris"}, raw='{"name": "get_weather", "arguments": {"town": "Paris"}}'
    )
    outcome = await guard.fix(PRESETS["full"], ASK, TOOLS, [bad])
    kinds = [n.kind for n in outcome.interventions]
    assert kinds == ["args_repaired"], outcome.interventions
    (call,) = outcome.calls
    jsonschema.validate(call.arguments, WEATHER.parameters)
    assert isinstance(call.arguments["city"], str)


async def test_valid_call_is_left_alone(smollm: LlamaCppEngine) -> None:
    guard = guard_for(smollm)
    good = ParsedCall("get_weather", {"city": "Paris"})
    outcome = await guard.fix(PRESETS["full"], ASK, TOOLS, [good])
    assert outcome.interventions == () and outcome.calls[0].arguments == {"city": "Paris"}
