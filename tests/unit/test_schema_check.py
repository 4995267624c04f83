"""The cached metaschema check (``tether.schema_check``) that the proxy and the guard share."""

from __future__ import annotations

from typing import Any

from tether.guardrails.arguments import ArgumentChecker
from tether.proxy.wire import tool_spec
from tether.schema_check import SchemaProblem, _checked, schema_problem

VALID: dict[str, Any] = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}


def test_a_valid_schema_has_no_problem() -> None:
    assert schema_problem(VALID) is None


def test_an_invalid_schema_says_what_and_where() -> None:
    problem = schema_problem({"type": "object", "properties": {"n": {"type": "integr"}}})
    assert isinstance(problem, SchemaProblem)
    assert problem.path == ("properties", "n", "type")
    assert "integr" in problem.message


def test_the_same_schema_is_checked_once_whatever_its_key_order() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string", "minLength": 1}}}
    reordered = {"properties": {"q": {"minLength": 1, "type": "string"}}, "type": "object"}
    before = _checked.cache_info()
    assert schema_problem(schema) is None
    assert schema_problem(reordered) is None
    after = _checked.cache_info()
    assert after.misses - before.misses <= 1
    assert after.hits - before.hits >= 1


def test_the_proxy_and_the_guard_share_the_verdict() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40}}}
    before = _checked.cache_info()
    tool_spec("weather", None, schema, "tools[0].function.parameters")
    assert ArgumentChecker(schema).usable
    assert _checked.cache_info().hits - before.hits >= 1


def test_a_schema_that_is_not_plain_json_is_still_checked() -> None:
    assert schema_problem({"type": "object", "enum": [float("nan")]}) is None  # NaN: not JSON, uncached
    problem = schema_problem({"type": "object", "required": {"a"}})  # a set: not JSON either
    assert problem is not None and problem.path == ("required",)
