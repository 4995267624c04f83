"""Answers from the result (bundled model): after a tool result, the text answer is made of the
values the result gave, where the model alone composes its own.

opencode's ``read`` numbers a file's lines (``1: 4.2.7``). The same decided answer is generated twice,
greedy, on the same prompt: with the reply's grounding (and so :class:`tether.grammar.answers.AnswerGrounding`)
and without. Over a real socket, ``strict`` answers from the result.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tether.calls import ToolCall
from tether.chat import Message
from tether.engine.base import SamplingParams, Token
from tether.engine.llama_cpp import LlamaCppEngine
from tether.engine.prompt import build_prompt
from tether.engine.template import ChatTemplate
from tether.grammar.formats import get_format
from tether.grammar.formats.base import ToolSpec
from tether.grammar.local import LocalCompiler
from tether.grammar.spec import GroundingSpec, ReplySpec

READ = ToolSpec(
    "read",
    "Read a file or directory from the local filesystem. If the path does not exist, an error is returned.",
    {
        "type": "object",
        "properties": {"filePath": {"type": "string", "description": "The path to the file to read"}},
        "required": ["filePath"],
    },
)
VERSION = (
    "<path>/work/project/VERSION.txt</path>\n<type>file</type>\n<content>\n1: 4.2.7\n\n"
    "(End of file - total 1 lines)\n</content>"
)
LISTING = (
    "<path>/work/project/src</path>\n<type>directory</type>\n<entries>\nalpha.py\nbeta.py\n\n"
    "(2 entries)\n</entries>"
)
VERSION_ASK = "Which version number is written in VERSION.txt?"


def history(ask: str, path: str, result: str) -> list[Message]:
    call = ToolCall("read", {"filePath": path}, id="c0")
    return [
        Message("user", ask),
        Message("assistant", tool_calls=(call,)),
        Message("tool", result, tool_call_id="c0"),
    ]


def decided_answer(engine: LlamaCppEngine, ask: str, path: str, result: str, *, grounded: bool) -> str:
    """The answer the reply gives once decided as one (greedy), with or without the reply's grounding."""
    fmt = get_format("generic")
    messages = history(ask, path, result)
    prompt = build_prompt(ChatTemplate(engine.info.chat_template), fmt, messages, [READ])
    ids = engine.tokenize(prompt)
    grounding = GroundingSpec(prompt, b'"arguments":', request=ask, latest_args=path, latest_results=result)
    spec = ReplySpec(fmt, (READ,), "strict", answer_only=True, grounding=grounding if grounded else None)
    constraint = LocalCompiler(engine).compile(spec, prompt_len=len(ids))
    params = SamplingParams(max_tokens=48, temperature=0.0)
    text = "".join(
        ev.text for ev in engine.generate(ids, params, logits_processor=constraint) if isinstance(ev, Token)
    )
    return str(json.loads(text)["response"]) if text.endswith("}") else text


def test_an_answer_after_a_read_is_the_value_the_file_holds(smollm: LlamaCppEngine) -> None:
    alone = decided_answer(smollm, VERSION_ASK, "VERSION.txt", VERSION, grounded=False)
    assert "4.2.7" not in alone, alone  # the model's own answer: pieces of the line
    grounded = decided_answer(smollm, VERSION_ASK, "VERSION.txt", VERSION, grounded=True)
    assert "4.2.7" in grounded, grounded


@pytest.fixture(scope="module")
def base(served_as_serve: str) -> str:
    return served_as_serve


def test_strict_answers_a_listing_with_its_files(base: str) -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "List the files in the src folder."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c0",
                    "type": "function",
                    "function": {"name": "read", "arguments": '{"filePath": "src"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c0", "content": LISTING},
    ]
    tool = {
        "type": "function",
        "function": {"name": READ.name, "description": READ.description, "parameters": READ.parameters},
    }
    body = {
        "model": "smollm2-135m-instruct",
        "messages": messages,
        "tools": [tool],
        "temperature": 0,
        "max_tokens": 64,
    }
    r = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    content = str(r.json()["choices"][0]["message"]["content"])
    assert "alpha.py" in content and "beta.py" in content, content
