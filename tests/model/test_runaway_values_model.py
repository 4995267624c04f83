"""Runaway values on the bundled model: a strict call pushed to repeat stops where the repeat rule says.

Greedy and short: the prompts below make SmolLM2 loop inside a value (``[1, 1, 1, …`` and
``"1,1,1,…``) until ``max_tokens``; under ``strict`` the array closes after ``ARRAY_MIN_ITEMS`` items
and the string after ``STRING_MIN_BYTES`` bytes, and the call ends by itself.
"""

from __future__ import annotations

import json
from typing import Any

from tether.chat import Message
from tether.engine.base import Done, SamplingParams, Token
from tether.engine.llama_cpp import LlamaCppEngine
from tether.engine.prompt import build_prompt
from tether.engine.template import ChatTemplate
from tether.grammar.formats import get_format
from tether.grammar.formats.base import ToolSpec
from tether.grammar.provider import ConstraintProvider
from tether.grammar.spec import ReplySpec
from tether.grammar.steering import ARRAY_MIN_ITEMS, STRING_MIN_BYTES, Steering

INTERVALS = ToolSpec(
    "set_intervals",
    "Set the polling intervals in seconds.",
    {
        "type": "object",
        "properties": {"interval": {"type": "array", "items": {"type": "integer"}}},
        "required": ["interval"],
    },
)
WRITE_FILE = ToolSpec(
    "write_file",
    "Write text to a file.",
    {
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"],
    },
)


def strict_call(
    engine: LlamaCppEngine, tool: ToolSpec, request: str, *, max_tokens: int, bound: bool = True
) -> tuple[str, str]:
    """One greedy strict call of ``tool``: its text and how the generation ended."""
    fmt = get_format("generic")
    prompt = build_prompt(ChatTemplate(engine.info.chat_template), fmt, [Message("user", request)], [tool])
    ids = engine.tokenize(prompt)
    c = ConstraintProvider(engine).constraint(
        ReplySpec(
            fmt, (tool,), "strict", required=True, parallel=False, steering=Steering(bound_values=bound)
        ),
        prompt_len=len(ids),
    )
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0)
    text, finish = "", ""
    for ev in engine.generate(ids, params, logits_processor=c):
        if isinstance(ev, Token):
            text += ev.text
        elif isinstance(ev, Done):
            finish = ev.finish_reason
    return text, finish


def arguments(text: str) -> dict[str, Any]:
    args: dict[str, Any] = json.loads(text)["tool_calls"][0]["arguments"]
    return args


def test_a_repeated_list_is_closed(smollm: LlamaCppEngine) -> None:
    ones = ", ".join(["1"] * 40)
    request = f"Set the polling intervals to {ones} and so on forever."
    loose, finish = strict_call(smollm, INTERVALS, request, max_tokens=90, bound=False)
    assert finish == "length" and loose.count("1,") > ARRAY_MIN_ITEMS  # the model does loop
    text, finish = strict_call(smollm, INTERVALS, request, max_tokens=120)
    assert finish == "stop", text
    assert arguments(text)["interval"] == [1] * ARRAY_MIN_ITEMS


def test_a_looping_string_is_closed(smollm: LlamaCppEngine) -> None:
    ones = ", ".join(["1"] * 30)
    request = f"Create numbers.txt containing {ones} and so on."
    text, finish = strict_call(smollm, WRITE_FILE, request, max_tokens=240)
    assert finish == "stop", text
    content = arguments(text)["content"]
    assert len(content) <= STRING_MIN_BYTES + 8, content  # the loop, cut where the rule says
    assert content.startswith("1,1,1,1")
