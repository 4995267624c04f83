"""Runs the corpus of realistic malformed outputs in ``tests/data/formats/corpus.jsonl``."""

from __future__ import annotations

import json
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from formats_support import assert_split_invariant

from tether.grammar.formats import get_format
from tether.grammar.formats.base import ToolSpec
from tether.guardrails import check_arguments

DATA = Path(__file__).resolve().parents[2] / "data" / "formats"
TOOLS = tuple(ToolSpec.from_openai(t) for t in json.loads((DATA / "tools.json").read_text(encoding="utf-8")))
CASES: list[dict[str, Any]] = [
    json.loads(line)
    for line in (DATA / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    if line.strip()
]


def test_corpus_size_and_coverage() -> None:
    assert len(CASES) >= 150
    assert len({c["id"] for c in CASES}) == len(CASES)
    per_format = Counter(c["format"] for c in CASES)
    assert all(n >= 4 for n in per_format.values()) and len(per_format) >= 13


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_corpus_case(case: dict[str, Any]) -> None:
    fmt = get_format(case["format"])
    tools = [t for t in TOOLS if t.name in case["tools"]] if "tools" in case else TOOLS
    result = assert_split_invariant(fmt, tools, case["text"], seed=zlib.crc32(case["id"].encode()), splits=25)
    assert result.content == case["content"], case["note"]
    names = {t.name for t in tools}
    got = [(c.name, dict(c.arguments), c.name in names) for c in result.calls]
    want = [(c["name"], c["arguments"], c.get("offered", True)) for c in case["calls"]]
    assert got == want, case["note"]
    for call, expected in zip(result.calls, case["calls"], strict=True):
        assert set(expected.get("repairs", ())) <= set(call.repairs), (case["note"], call.repairs)
        if "checked" in expected:  # what the guard's one coercion rule set makes of the values
            spec = next(t for t in tools if t.name == call.name)
            check = check_arguments(call.arguments, spec.parameters)
            assert check.ok and check.arguments == expected["checked"] and check.coercions, case["note"]
