"""Every registered format, end to end through the proxy: rendered calls come back as ``tool_calls``.

The scripted engine replays what each family's own renderer writes (its chat-template shape), so this
checks the proxy's use of the registry (prompt, streaming detector, parser), not a model.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import sse_events
from tether.calls import ToolCall
from tether.grammar.formats import BUILTIN_FORMATS, get_format

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    }
]
ARGS = {"city": "Paris", "days": 2}


@pytest.mark.parametrize("name", sorted(BUILTIN_FORMATS))
@pytest.mark.parametrize("stream", [False, True])
async def test_family_round_trip(scripted, name: str, stream: bool) -> None:
    fmt = get_format(name)
    reply = fmt.render_calls("Let me check.", [ToolCall("get_weather", ARGS)])
    client, engines = scripted([reply], tool_format=name, constrain="off")
    body = {
        "model": "scripted",
        "messages": [{"role": "user", "content": "weather in Paris?"}],
        "tools": TOOLS,
        "stream": stream,
    }
    r = await client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200
    if stream:
        chunks = [e for e in sse_events(r.text)[:-1] if e["choices"]]
        deltas = [d for c in chunks for d in c["choices"][0]["delta"].get("tool_calls") or []]
        names = [d["function"]["name"] for d in deltas if d.get("function", {}).get("name")]
        args = "".join(d["function"].get("arguments", "") for d in deltas)
        finish = chunks[-1]["choices"][0]["finish_reason"]
    else:
        message = r.json()["choices"][0]["message"]
        names = [c["function"]["name"] for c in message["tool_calls"]]
        args = message["tool_calls"][0]["function"]["arguments"]
        finish = r.json()["choices"][0]["finish_reason"]
    assert names == ["get_weather"], (name, reply)
    assert json.loads(args) == ARGS
    assert finish == "tool_calls"
    assert "get_weather" in engines[0].prompts[-1]  # offered through the format (or the template)
