"""The app over a scripted engine, and the scripted replies and tools several proxy tests share."""

from __future__ import annotations

from typing import Any

from tether.config import ServerConfig
from tether.engine.scheduler import Scheduler
from tether.engine.scripted import ScriptedEngine
from tether.proxy.app import create_app
from tether.sandbox import PermissionPolicy, ToolBox
from tether.turns.stages import ServerToolsStage
from tether.workflows.tools import python_tool

__all__ = ["READ_FILE", "WEATHER_CALL", "lookup_tools", "scripted_app", "weather_round_trip"]


def scripted_app(engine: ScriptedEngine, **config: Any) -> Any:
    """tether's app over ``engine``, preset ``full`` unless ``config`` names another: scripted calls
    invent their values, which the default preset's decision and grounding would steer or drop."""
    cfg = ServerConfig(**{"preset": "full", **config})
    return create_app(cfg, Scheduler([engine], queue_limit=cfg.queue_limit))


WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
WEATHER_CALL = '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}'


def weather_round_trip(prompt: str) -> str:
    """A ``get_weather`` call first; a text answer once the last user turn is the tool's result."""
    if prompt.rsplit("<|im_start|>user\n", 1)[-1].startswith("Result of get_weather:"):
        return '{"response": "Sunny in Paris."}'
    return WEATHER_CALL


# An OpenAI chat tool whose "limit" a guard can coerce from a string.
READ_FILE = {
    "type": "function",
    "function": {
        "name": "read_file",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["path"],
        },
    },
}


def lookup_tools() -> ServerToolsStage:
    """One server tool, ``lookup(key)``: ``"a"`` gives ``"alpha"``, any other key raises (an error result)."""

    def lookup(key: str) -> str:
        return {"a": "alpha"}[key]

    tool = python_tool(
        "lookup",
        lookup,
        parameters={"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
    )
    return ServerToolsStage(ToolBox([tool], policy=PermissionPolicy.from_settings("plan")))
