"""Validators for a finished scenario run: argument matchers, call expectations, final state, answer.

A matcher is either a literal (equality: strings exact after trimming, numbers
numerically, lists element-wise) or a mapping of operators, all of which must
hold: ``eq`` (the way to match a literal object), ``ieq`` (case-insensitive),
``contains``, ``icontains``, ``not_contains``, ``regex`` (search), ``approx``
(absolute ``tol`` if given, else 1e-6 relative), ``one_of``, ``gt``, ``lt``,
``exists`` (is the value present at all), ``json`` (the string parses as JSON
matching the nested matcher), ``all`` and ``any_of`` (lists of matchers).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from tether.evals.backend import Backend, CallOutcome
from tether.evals.scenario_spec import CallExpect, Expect, StateCheck

__all__ = ["MISSING", "check_expect", "matches"]


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


MISSING: Any = _Missing()


def _equal(value: Any, want: Any) -> bool:
    if isinstance(want, str) and isinstance(value, str):
        return value.strip() == want.strip()
    if isinstance(want, bool) or isinstance(value, bool):
        return value is want
    if isinstance(want, int | float) and isinstance(value, int | float):
        return math.isclose(float(value), float(want), rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(want, Mapping) and isinstance(value, Mapping):
        return set(want) == set(value) and all(_equal(value[k], want[k]) for k in want)
    if isinstance(want, list) and isinstance(value, list):
        return len(want) == len(value) and all(_equal(v, w) for v, w in zip(value, want, strict=True))
    return bool(value == want)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    return None


def matches(matcher: Any, value: Any) -> bool:
    """Does ``value`` (``MISSING`` when absent) satisfy ``matcher``?"""
    if not isinstance(matcher, Mapping):
        return value is not MISSING and _equal(value, matcher)
    if "exists" in matcher and (value is not MISSING) != bool(matcher["exists"]):
        return False
    rest = {k: v for k, v in matcher.items() if k not in ("exists", "tol")}
    if not rest:
        return True
    if value is MISSING:
        return False
    return all(_one(op, want, value, matcher) for op, want in rest.items())


def _one(op: str, want: Any, value: Any, matcher: Mapping[str, Any]) -> bool:
    if op == "eq":
        return _equal(value, want)
    if op == "ieq":
        return _text(value).strip().casefold() == _text(want).strip().casefold()
    if op == "contains":
        return _text(want) in _text(value)
    if op == "icontains":
        return _text(want).casefold() in _text(value).casefold()
    if op == "not_contains":
        return _text(want).casefold() not in _text(value).casefold()
    if op == "regex":
        return re.search(str(want), _text(value)) is not None
    if op == "approx":
        got, target = _number(value), _number(want)
        if got is None or target is None:
            return False
        if "tol" in matcher:
            return abs(got - target) <= float(matcher["tol"])
        return math.isclose(got, target, rel_tol=1e-6, abs_tol=1e-9)
    if op == "one_of":
        return any(matches(w, value) for w in want)
    if op in ("gt", "lt"):
        got = _number(value)
        return got is not None and (got > float(want) if op == "gt" else got < float(want))
    if op == "json":
        try:
            parsed = json.loads(value) if isinstance(value, str) else value
        except json.JSONDecodeError:
            return False
        return matches(want, parsed)
    if op == "all":
        return all(matches(w, value) for w in want)
    if op == "any_of":
        return any(matches(w, value) for w in want)
    raise ValueError(f"unknown matcher {op!r}")


def _call_ok(expect: CallExpect, call: CallOutcome) -> bool:
    if call.name != expect.tool or call.arguments is None or (expect.succeeded and not call.ok):
        return False
    return all(matches(m, call.arguments.get(arg, MISSING)) for arg, m in expect.args.items())


def _describe(expect: CallExpect) -> str:
    return f"{expect.tool}({json.dumps(expect.args, ensure_ascii=False, default=str)})"


def _calls(expect: Expect, calls: Sequence[CallOutcome]) -> str | None:
    if expect.ordered:
        pos = 0
        for want in expect.calls:
            while pos < len(calls) and not _call_ok(want, calls[pos]):
                pos += 1
            if pos == len(calls):
                return f"no call {_describe(want)} in the expected order"
            pos += 1
        return None
    used: set[int] = set()
    for want in expect.calls:
        hit = next((i for i, c in enumerate(calls) if i not in used and _call_ok(want, c)), None)
        if hit is None:
            return f"no call {_describe(want)}"
        used.add(hit)
    return None


def _state(check: StateCheck, backend: Backend) -> str | None:
    if check.table is not None:
        rows = [
            r
            for r in backend.tables[check.table]
            if all(matches(m, r.get(k, MISSING)) for k, m in check.where.items())
        ]
        where = json.dumps(check.where, default=str)
        if check.count is not None and len(rows) != check.count:
            return f"table {check.table} has {len(rows)} rows where {where}, expected {check.count}"
        if check.row is not None:
            row = check.row
            if not any(all(matches(m, r.get(k, MISSING)) for k, m in row.items()) for r in rows):
                return f"no {check.table} row where {where} has {json.dumps(row, default=str)}"
        return None
    if check.counter is not None:
        got = backend.counters[check.counter]
        return (
            None if matches(check.value, got) else f"counter {check.counter} is {got}, expected {check.value}"
        )
    assert check.file is not None
    files = backend.files()
    content = files.get(check.file.removeprefix("./"), MISSING)
    if check.exists is not None and (content is not MISSING) != check.exists:
        return f"file {check.file} {'is missing' if check.exists else 'still exists'}"
    if check.content is not None and not matches(check.content, content):
        shown = "missing" if content is MISSING else repr(content[:120])
        return f"file {check.file} content {shown} does not match {json.dumps(check.content, default=str)}"
    return None


def check_expect(
    expect: Expect, calls: Sequence[CallOutcome], backend: Backend, answer: str | None
) -> list[str]:
    """Every failed expectation, as one line each (empty: the scenario passed)."""
    failures: list[str] = []
    if expect.no_calls and calls:
        failures.append(f"expected no tool call, got {', '.join(c.name for c in calls)}")
    if expect.max_calls is not None and len(calls) > expect.max_calls:
        failures.append(f"{len(calls)} tool calls, at most {expect.max_calls} expected")
    if expect.calls and (problem := _calls(expect, calls)):
        failures.append(problem)
    if expect.terminal is not None:
        last = calls[-1] if calls else None
        if last is None or not _call_ok(expect.terminal, last):
            got = f"{last.name}({json.dumps(last.arguments, default=str)})" if last else "no call"
            failures.append(f"terminal call should be {_describe(expect.terminal)}, got {got}")
    failures += [f"forbidden tool {c.name} was called" for c in calls if c.name in expect.forbid]
    failures += [p for check in expect.state if (p := _state(check, backend))]
    if expect.answer is not None:
        if answer is None:
            failures.append("no final answer")
        elif not matches(expect.answer, answer):
            failures.append(
                f"final answer {answer[:160]!r} does not match {json.dumps(expect.answer, default=str)}"
            )
    return failures
