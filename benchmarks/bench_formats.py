"""Cost of tool-call parsing: parse throughput and the streaming detector's cost per token.

For every format: a realistic reply (a sentence of prose and three calls, one with a
long code argument) is parsed repeatedly (calls/s), then streamed into a
``StreamDetector`` in token-sized pieces (µs per fed token), as is a plain-prose
reply of about 200 words (the common case: no call at all).

Usage: .venv/bin/python -m benchmarks.bench_formats [--seconds 0.5] [--format hermes]
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Callable, Sequence

from tether.calls import ToolCall
from tether.grammar.detector import StreamDetector
from tether.grammar.formats import available_formats, get_format
from tether.grammar.formats.base import ToolCallFormat, ToolSpec

TOOLS = (
    ToolSpec(
        "get_weather",
        "Current weather.",
        {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    ),
    ToolSpec("search", "Web search.", {"type": "object", "properties": {"query": {"type": "string"}}}),
    ToolSpec(
        "write_file",
        "Write a file.",
        {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}},
    ),
)
CODE = "\n".join(f'def f{i}(x):\n    return {{"k{i}": x + {i}}}  # "}}" inside a string' for i in range(12))
CALLS = (
    ToolCall("get_weather", {"city": "San Francisco, CA", "days": 3}),
    ToolCall("search", {"query": "best hiking trails near the Golden Gate bridge with views"}),
    ToolCall("write_file", {"path": "src/app.py", "content": CODE}),
)
PROSE = " ".join(
    "The forecast for the coming week shows mild temperatures, light winds from the west and a chance "
    "of rain on Thursday; pack a jacket, keep an eye on the updates, and enjoy the trails."
    for _ in range(6)
)
_TOKEN = re.compile(r" ?[A-Za-z]+| ?\d| ?[^\sA-Za-z\d]+|\s+")


def tokens(text: str) -> list[str]:
    """Rough BPE-sized pieces: words with their leading space, digits, punctuation runs (≤ 6 chars)."""
    out: list[str] = []
    for m in _TOKEN.finditer(text):
        piece = m.group()
        out.extend(piece[i : i + 6] for i in range(0, len(piece), 6))
    assert "".join(out) == text
    return out


def timed(fn: Callable[[], object], seconds: float) -> tuple[int, float]:
    """(iterations, elapsed) of running ``fn`` for about ``seconds``."""
    fn()
    n = 0
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        fn()
        n += 1
    return n, elapsed


def stream(fmt: ToolCallFormat, pieces: Sequence[str]) -> None:
    detector = StreamDetector(fmt, TOOLS)
    for piece in pieces:
        detector.feed(piece)
    detector.close()


def bench(fmt: ToolCallFormat, seconds: float) -> tuple[float, float, float, int]:
    reply = fmt.render_calls("" if fmt.text_envelope else "Let me look that up for you.", CALLS)
    parsed = fmt.parse(reply, TOOLS)
    assert [c.name for c in parsed.calls] == [c.name for c in CALLS], fmt.name
    n, elapsed = timed(lambda: fmt.parse(reply, TOOLS), seconds)
    calls_per_s = n * len(CALLS) / elapsed
    call_pieces = tokens(reply)
    n, elapsed = timed(lambda: stream(fmt, call_pieces), seconds)
    us_call = elapsed / (n * len(call_pieces)) * 1e6
    prose = json.dumps({"response": PROSE}) if fmt.text_envelope else PROSE
    prose_pieces = tokens(prose)
    n, elapsed = timed(lambda: stream(fmt, prose_pieces), seconds)
    us_prose = elapsed / (n * len(prose_pieces)) * 1e6
    return calls_per_s, us_call, us_prose, len(call_pieces)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.5, help="time per measurement")
    parser.add_argument("--format", action="append", help="only these formats (repeatable)")
    args = parser.parse_args()
    names = args.format or available_formats()
    print(
        f"{'format':<15} {'parse calls/s':>14} {'µs/token (calls)':>17} {'µs/token (prose)':>17} {'tokens':>7}"
    )
    for name in names:
        calls_per_s, us_call, us_prose, n_tokens = bench(get_format(name), args.seconds)
        print(f"{name:<15} {calls_per_s:>14,.0f} {us_call:>17.2f} {us_prose:>17.2f} {n_tokens:>7}")


if __name__ == "__main__":
    main()
