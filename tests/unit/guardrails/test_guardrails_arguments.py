"""Argument validation and safe coercion: one table row per rule, applied and refused."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tether.guardrails import ArgumentChecker, FieldError, check_arguments, invalid_arguments_text


def obj(**props: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props}


INT = {"type": "integer"}
NUM = {"type": "number"}
BOOL = {"type": "boolean"}
STR = {"type": "string"}
NULLABLE_INT = {"type": ["integer", "null"]}
NULL_OR_OBJ = {"anyOf": [{"type": "null"}, obj(k=INT)]}


@pytest.mark.parametrize(
    ("schema", "given", "wanted", "rule"),
    [
        (INT, "5", 5, "string to integer"),
        (INT, "-3", -3, "string to integer"),
        (INT, "0", 0, "string to integer"),
        (INT, "12345678901234567890", 12345678901234567890, "string to integer"),
        (NUM, "2.5", 2.5, "string to number"),
        (NUM, "-0.125", -0.125, "string to number"),
        (NUM, "1e3", 1000.0, "string to number"),
        (NUM, "7", 7, "string to number"),
        (BOOL, "true", True, "string to boolean"),
        (BOOL, "false", False, "string to boolean"),
        (BOOL, "True", True, "string to boolean"),
        ({"type": "null"}, "null", None, "string to null"),
        (NULLABLE_INT, "null", None, "string to null"),
        (NULLABLE_INT, "4", 4, "string to integer"),
        (obj(k=INT), '{"k": 1}', {"k": 1}, "JSON string to object"),
        ({"type": "array", "items": INT}, "[1, 2]", [1, 2], "JSON string to array"),
        (STR, 42, "42", "integer to string"),
        ({"enum": [5, 10]}, "5", 5, "string to integer"),
        ({"anyOf": [INT, {"type": "null"}]}, "3", 3, "string to integer"),
        (NULL_OR_OBJ, '{"k": 2}', {"k": 2}, "JSON string to object"),
    ],
)
def test_coercion_applied(schema: dict[str, Any], given: Any, wanted: Any, rule: str) -> None:
    check = check_arguments({"v": given}, obj(v=schema))
    assert check.ok, check.errors
    assert check.arguments == {"v": wanted}
    assert type(check.arguments["v"]) is type(wanted)
    assert len(check.coercions) == 1 and rule in check.coercions[0] and check.coercions[0].startswith("v:")


@pytest.mark.parametrize(
    ("schema", "given"),
    [
        (INT, "5.5"),  # lossy
        (INT, "5.0"),  # not integer syntax
        (INT, "05"),  # leading zero: maybe an identifier
        (INT, "+5"),
        (INT, " 5"),
        (INT, "five"),
        (NUM, "0.10000000000000000001"),  # a float cannot hold it as written
        (NUM, "1e999"),
        (NUM, "nan"),
        (NUM, "Infinity"),
        (BOOL, "yes"),
        (BOOL, "1"),
        (BOOL, 1),
        ({"type": "null"}, "None"),
        ({"type": "null"}, ""),
        (obj(k=INT), "{not json}"),
        (obj(k=INT), "[1]"),  # decodes, but to the wrong container
        ({"type": "array", "items": STR}, "a.txt"),  # single value where an array is wanted: ambiguous
        ({"type": "array", "items": STR}, '"a.txt"'),
        ({"type": "array", "items": INT}, 3),
        (STR, 2.5),  # float spelling is a guess
        (STR, True),
        (STR, None),
        ({"enum": [5, 10]}, "7"),  # coercing would not make it valid: keep what the model wrote
        ({"type": "integer", "minimum": 10}, "5"),
    ],
)
def test_coercion_refused(schema: dict[str, Any], given: Any) -> None:
    check = check_arguments({"v": given}, obj(v=schema))
    assert check.coercions == ()
    assert check.arguments == {"v": given}
    assert [e.path for e in check.errors] == ["v"]


@pytest.mark.parametrize(
    ("schema", "given"),
    [
        ({"type": ["string", "integer"]}, "5"),  # the value's own type is allowed
        ({"anyOf": [STR, INT]}, "5"),
        ({"type": "number"}, 5),  # an integer is a number
        ({"type": "integer"}, 5.0),  # 5.0 is an integer in JSON Schema
        ({}, "anything"),
    ],
)
def test_no_coercion_where_the_type_is_allowed(schema: dict[str, Any], given: Any) -> None:
    check = check_arguments({"v": given}, obj(v=schema))
    assert check.ok and check.coercions == () and check.arguments == {"v": given}


def test_nested_objects_arrays_and_refs() -> None:
    schema = {
        "type": "object",
        "$defs": {"edit": obj(line=INT, text=STR)},
        "properties": {"edits": {"type": "array", "items": {"$ref": "#/$defs/edit"}}, "dry": BOOL},
        "required": ["edits"],
    }
    check = check_arguments(
        {"edits": [{"line": "3", "text": "x"}, {"line": 4, "text": "y"}], "dry": "false"}, schema
    )
    assert check.ok
    assert check.arguments == {"edits": [{"line": 3, "text": "x"}, {"line": 4, "text": "y"}], "dry": False}
    assert sorted(c.split(":")[0] for c in check.coercions) == ["dry", "edits[0].line"]


def test_json_string_object_is_decoded_then_its_fields_coerced() -> None:
    check = check_arguments({"o": '{"k": "3"}'}, obj(o=obj(k=INT)))
    assert check.ok and check.arguments == {"o": {"k": 3}}
    assert len(check.coercions) == 2


def test_arguments_text_decoding() -> None:
    schema = obj(path=STR)
    assert check_arguments('{"path": "a"}', schema).coercions == ()
    double = check_arguments(json.dumps(json.dumps({"path": "a"})), schema)
    assert double.ok and double.arguments == {"path": "a"} and "double-encoded" in double.coercions[0]
    repaired = check_arguments("{'path': 'a',}", schema)
    assert repaired.ok and repaired.arguments == {"path": "a"} and "repaired" in repaired.coercions[0]
    assert check_arguments("", schema).arguments == {}
    assert check_arguments(None, schema).arguments == {}


@pytest.mark.parametrize("text", ['{"path": "a"', "not json", "[1, 2]", "5", '"just text"'])
def test_unreadable_or_non_object_arguments(text: str) -> None:
    check = check_arguments(text, obj(path=STR))
    assert not check.ok and check.errors[0].path == "" and check.arguments == {}


def test_coerce_off_changes_nothing() -> None:
    checker = ArgumentChecker(obj(n=INT), coerce=False)
    check = checker.check({"n": "5"})
    assert check.coercions == () and check.arguments == {"n": "5"} and not check.ok
    assert not checker.check("{'n': 5}").ok  # no JSON repair either


def test_defaults_filled_only_when_asked_and_recorded() -> None:
    schema = {
        "type": "object",
        "properties": {
            "mode": {"type": "string", "default": "fast"},
            "opts": obj(depth={"type": "integer", "default": 2}),
        },
    }
    plain = check_arguments({"opts": {}}, schema)
    assert plain.arguments == {"opts": {}} and plain.defaults == ()
    filled = check_arguments({"opts": {}}, schema, fill_defaults=True)
    assert filled.arguments == {"mode": "fast", "opts": {"depth": 2}}
    assert sorted(d.split(":")[0] for d in filled.defaults) == ["mode", "opts.depth"]
    assert filled.changed and filled.coercions == ()


def test_field_errors_name_path_expected_value_and_fragment() -> None:
    schema = {
        "type": "object",
        "properties": {
            "path": STR,
            "mode": {"type": "string", "enum": ["r", "w"]},
            "edits": {"type": "array", "items": obj(old=STR)},
            "size": {"type": "integer", "minimum": 1},
        },
        "required": ["path"],
        "additionalProperties": False,
    }
    check = check_arguments({"mode": "x", "edits": [{"old": 3.5}], "size": 0, "extra": 1}, schema)
    by_path = {e.path: e for e in check.errors}
    assert set(by_path) == {"path", "mode", "edits[0].old", "size", "extra"}
    assert by_path["path"] == FieldError(
        "path", "missing required field (expected string)", "string", STR, "missing"
    )
    assert by_path["mode"].expected == 'one of "r", "w"' and by_path["mode"].got == '"x"'
    assert by_path["edits[0].old"].expected == "string" and by_path["edits[0].old"].got == "3.5"
    assert (
        "minimum" in by_path["size"].message
        and by_path["size"].schema_fragment == schema["properties"]["size"]
    )
    assert by_path["extra"].message.startswith("unexpected field")
    assert [e.path for e in check.errors] == sorted(by_path)


def test_nudge_text_is_precise() -> None:
    schema = obj(count=INT, name=STR)
    check = check_arguments({"count": "5.5"}, {**schema, "required": ["name"]})
    text = invalid_arguments_text("make", check.errors)
    assert text.splitlines()[0] == "Error: invalid arguments for tool 'make':"
    assert '- count: expected integer, got "5.5" (string); schema: {"type":"integer"}' in text
    assert '- name: missing required field (expected string); schema: {"type":"string"}' in text
    tier3 = invalid_arguments_text("make", check.errors, schema=schema, tier=3)
    assert "Fix exactly these fields" in tier3 and '"properties":{"count":{"type":"integer"}' in tier3


def test_invalid_schema_disables_checking() -> None:
    checker = ArgumentChecker({"type": "object", "properties": {"n": {"type": "no-such-type"}}})
    assert not checker.usable
    check = checker.check({"n": "5"})
    assert check.ok and check.arguments == {"n": "5"} and check.coercions == ()
