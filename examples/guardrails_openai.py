"""Guardrails around the official ``openai`` client: a tiny read-only agent loop.

Needs a capable model to answer well: the bundled SmolLM2-135M shows the plumbing (calls made,
checked and executed, interventions printed) but often reads a file that is not there or lists
the folder again instead of answering.

Start a server first (``tether serve`` listens on http://127.0.0.1:8000/v1 by
default; any OpenAI-compatible server works), then run:

    python examples/guardrails_openai.py --base-url http://127.0.0.1:8000/v1 \\
        "What files are in this folder, and what does README.md start with?"

The wrapped client resolves near-miss tool names (``Read`` → ``read_file``), coerces
safe argument mistakes (``"5"`` → 5), retries with precise error turns when a call
cannot be fixed, and leaves plain text answers alone. Each step prints the
interventions it made. The tools only read files below the current folder.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

from openai import OpenAI
from openai.types.chat import ChatCompletionFunctionToolParam

from tether.guardrails import GuardrailStats, interventions_of, wrap

TOOLS: list[ChatCompletionFunctionToolParam] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read the first lines of a text file.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Path relative to the current folder"},
                    "lines": {"type": "integer", "minimum": 1, "default": 20},
                },
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "list_dir",
            "description": "List the entries of a folder.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string", "default": "."}},
            },
        },
    },
]


def _inside(root: Path, raw: str) -> Path:
    path = (root / raw).resolve()
    if not path.is_relative_to(root):
        raise ValueError(f"{raw!r} is outside {root}")
    return path


def run_tool(root: Path, name: str, arguments: dict[str, Any]) -> str:
    """Execute one (already checked) tool call; errors become the tool result text."""
    try:
        if name == "read_file":
            text = _inside(root, arguments["path"]).read_text(errors="replace")
            return "\n".join(text.splitlines()[: int(arguments.get("lines", 20))])
        if name == "list_dir":
            folder = _inside(root, arguments.get("path", "."))
            return "\n".join(sorted(p.name + ("/" if p.is_dir() else "") for p in folder.iterdir()))
    except (OSError, ValueError, KeyError) as exc:
        return f"Error: {exc}"
    return f"Error: unknown tool {name!r}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("question", nargs="?", default="What files are in this folder?")
    parser.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    parser.add_argument("--api-key", default="not-needed")
    parser.add_argument("--model", default=None, help="default: the first model the server lists")
    parser.add_argument("--max-retries", type=int, default=2, help="guardrail retries per call")
    parser.add_argument("--steps", type=int, default=4, help="tool round trips before giving up")
    args = parser.parse_args()

    stats = GuardrailStats()
    client = wrap(
        OpenAI(base_url=args.base_url, api_key=args.api_key), max_retries=args.max_retries, stats=stats
    )
    model = args.model or client.models.list().data[0].id
    root = Path.cwd().resolve()
    messages: list[Any] = [{"role": "user", "content": args.question}]

    seen: Counter[str] = Counter()
    for step in range(1, args.steps + 1):
        response = client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
        message = response.choices[0].message
        for item in interventions_of(response):
            seen[item["kind"]] += 1
            print(f"  [guardrail] {item['kind']}: {item['detail']}")
        if not message.tool_calls:
            print(message.content or "(empty answer)")
            break
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            if call.type != "function":
                continue
            try:
                arguments = json.loads(call.function.arguments or "{}")
            except ValueError:  # retries ran out on unreadable arguments
                arguments = None
            print(f"step {step}: {call.function.name}({call.function.arguments})")
            result = (
                run_tool(root, call.function.name, arguments)
                if isinstance(arguments, dict)
                else "Error: arguments are not a JSON object"
            )
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    else:
        print(f"(stopped after {args.steps} tool steps)")
    # The server's interventions (tether's own guardrails) and the client-side ones together;
    # the wrapper's counters hold only what it did itself.
    print(f"interventions: {dict(seen) or 'none'} (client-side: {stats.snapshot()['interventions'] or 'none'})")


if __name__ == "__main__":
    main()
