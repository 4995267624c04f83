"""The tool view: many long tools in a small window are shown briefly, the ones the request needs in full."""

from __future__ import annotations

from tether.chat import Message
from tether.grammar.formats.base import ToolSpec
from tether.selection.semantic import SemanticRelevance, tool_sentence
from tether.turns.tool_view import ToolView, brief

LONG = "Look it up. " + "This tool has a long description that goes on about many details. " * 12


def tool(name: str, words: str) -> ToolSpec:
    params = {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "The city, e.g. 'Paris, France'. " * 4}},
        "required": ["city"],
    }
    return ToolSpec(name, f"{words}. {LONG}", params)


TOOLS = [
    tool(f"tool_{i}", w) for i, w in enumerate(["Stock prices", "Hotel rooms", "Weather forecast", "Flights"])
]
TOOLS.append(tool("get_weather_now", "Current weather"))
ASK = (Message("user", "What is the weather forecast in Paris?"),)


def test_small_tool_sets_are_shown_as_they_are() -> None:
    assert ToolView().shown(ASK, TOOLS[:3], 4096) == tuple(TOOLS[:3])
    assert ToolView(share=0).shown(ASK, TOOLS, 512) == tuple(TOOLS)
    assert ToolView().shown(ASK, TOOLS, 100_000) == tuple(TOOLS)  # the window has room


def test_crowded_tools_keep_the_relevant_ones_in_full_and_every_name() -> None:
    shown = ToolView(share=0.25, keep=2).shown(ASK, TOOLS, 1024)
    assert [t.name for t in shown] == [t.name for t in TOOLS]  # every offered name is still there
    full = {t.name for t, orig in zip(shown, TOOLS, strict=True) if t == orig}
    assert {"tool_2", "get_weather_now"} <= full and "tool_0" not in full


def test_a_brief_tool_keeps_its_name_first_sentence_and_parameters() -> None:
    short = brief(TOOLS[0])
    assert short.name == "tool_0" and short.description == "Stock prices."
    assert short.parameters == {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    }


def test_a_tool_sentence_reads_its_name_description_and_parameters() -> None:
    spec = ToolSpec(
        "getCurrentWeather", "Weather now.", {"type": "object", "properties": {"unit_system": {}}}
    )
    assert tool_sentence(spec) == "get current weather: Weather now. (unit system)"


class Counting:
    """An embedder that counts its calls (the tool set's vectors are cached)."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def embed(self, texts):  # type: ignore[no-untyped-def]
        import numpy as np

        self.calls.append(len(texts))
        return np.eye(len(texts), 4, dtype=np.float32)


def test_tool_vectors_are_cached_per_tool_set() -> None:
    embedder = Counting()
    semantic = SemanticRelevance(embedder)
    semantic.scores("weather?", TOOLS[:2])
    semantic.scores("hotels?", TOOLS[:2])
    assert embedder.calls == [1, 2, 1]  # the request, the two tools, then only the second request
    assert semantic.scores("  ", TOOLS[:2]) == [0.0, 0.0]


def full_names(shown: tuple[ToolSpec, ...]) -> set[str]:
    return {t.name for t, orig in zip(shown, TOOLS, strict=True) if t == orig}


def test_the_next_task_keeps_the_tools_block_while_its_best_tool_is_shown_in_full() -> None:
    """An agent's next request renders the same tools (its prompt prefix stays cached) as long as the
    tool it needs most is among those in full; otherwise the choice is made again."""
    view = ToolView(share=0.25, keep=2)
    first = view.shown(ASK, TOOLS, 1024)
    again = view.shown((Message("user", "Is it raining in Paris right now? Current weather please."),), TOOLS, 1024)
    assert again == first
    hotels = view.shown((Message("user", "Find hotel rooms in Paris."),), TOOLS, 1024)
    assert "tool_1" in full_names(hotels) and hotels != first
    fresh = ToolView(share=0.25, keep=2).shown((Message("user", "Find hotel rooms in Paris."),), TOOLS, 1024)
    assert hotels == fresh  # a new choice is the choice a fresh view makes


async def test_the_share_is_a_server_setting() -> None:
    import httpx

    from tether.config import Settings
    from tether.engine.scheduler import Scheduler
    from tether.engine.scripted import ScriptedEngine
    from tether.proxy.app import create_app

    tools = [tool(f"{t.name}_{i}", t.description.split(".")[0]) for i in range(3) for t in TOOLS]
    seen = {}
    for share in (0.05, 0.0):  # a scripted token is a byte: the window must hold the tools in full
        engine = ScriptedEngine(["It is sunny."], n_ctx=32768)
        app = create_app(Settings(tool_view_share=share).to_config(), Scheduler([engine]))
        body = {
            "model": "scripted",
            "messages": [{"role": "user", "content": ASK[0].content}],
            "tools": [t.to_openai() for t in tools],
        }
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            assert (await client.post("/v1/chat/completions", json=body)).status_code == 200
        seen[share] = engine.prompts[0].count(LONG.strip())
    assert seen[0.0] == len(tools) > seen[0.05]  # 0: every tool in full; a small share shortens the crowd
