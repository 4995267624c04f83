"""Tool-call arguments: JSON Schema validation, safe coercions and precise error reports.

Arguments are validated with the Draft 2020-12 validator of ``jsonschema`` against
the tool's ``parameters`` schema (OpenAI's subset: ``type``, ``enum``, ``const``,
``anyOf``/``oneOf``, nested objects and arrays, local ``$ref``, ``default``).

Coercions are made only when they are lossless, fix the value where it stands, and
are recorded. A coercion is kept only if the coerced value validates against the
schema at that spot; otherwise the original value stays and is reported. The rules:

* string → integer: JSON integer syntax only (``"5"``, ``"-3"``); not ``"5.5"``,
  ``"05"``, ``"+5"``, ``" 5"`` or ``"5.0"``.
* string → number: JSON number syntax whose value a float holds exactly as written
  (``"2.5"``, ``"1e3"``); ``"0.10000000000000000001"`` is left alone.
* string → boolean: ``"true"``/``"false"`` (and Python's ``"True"``/``"False"``).
* string → null: ``"null"``, only where the schema allows null.
* string → object/array: a string holding strict JSON of the wanted container type.
* integer → string: an integer where only a string is allowed becomes its decimal text.
* a single value where an array is wanted is NOT wrapped (ambiguous); floats and
  booleans are never turned into strings (their spelling is a guess).
* no coercion ever happens where the value's own type is allowed (``"5"`` stays a
  string for ``{"type": ["string", "integer"]}``).

The arguments text itself may be double-encoded (a JSON string holding the object)
or almost-JSON (single quotes, Python literals, trailing commas); both are decoded
and recorded as coercions. Truncated JSON is never completed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from tether.coercion import SchemaWalker, compact_json, json_type, path_text
from tether.jsonscan import loads_lenient
from tether.schema_check import schema_problem

__all__ = [
    "ArgCheck",
    "ArgumentChecker",
    "FieldError",
    "check_arguments",
    "compact_json",
    "describe_expected",
]

log = structlog.get_logger(__name__)

_MAX_ERRORS = 8


@dataclass(frozen=True)
class FieldError:
    """One validation failure. ``path`` is ``edits[0].old_string`` style, ``""`` for the whole
    arguments object; ``got`` is the offending value as compact JSON (``"missing"`` when absent)."""

    path: str
    message: str
    expected: str
    schema_fragment: dict[str, Any]
    got: str = ""


@dataclass(frozen=True)
class ArgCheck:
    """Checked arguments: the (possibly coerced) ``arguments``, what was changed, what is wrong.

    ``coercions`` and ``defaults`` are human-readable records, one per change.
    """

    arguments: dict[str, Any]
    coercions: tuple[str, ...] = ()
    errors: tuple[FieldError, ...] = ()
    defaults: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def changed(self) -> bool:
        return bool(self.coercions or self.defaults)


def describe_expected(schema: Any) -> str:
    """A short phrase for what ``schema`` accepts: ``integer``, ``string or null``, ``one of "a", "b"``."""
    if not isinstance(schema, Mapping):
        return "any value"
    if "const" in schema:
        return f"exactly {compact_json(schema['const'], 80)}"
    if isinstance(schema.get("enum"), list):
        return "one of " + ", ".join(compact_json(v, 60) for v in schema["enum"])
    raw = schema.get("type")
    if isinstance(raw, str):
        return raw
    if isinstance(raw, list) and raw:
        return " or ".join(str(t) for t in raw)
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return " or ".join(dict.fromkeys(describe_expected(s) for s in schema[key]))
    if "properties" in schema:
        return "object"
    if "items" in schema:
        return "array"
    if "$ref" in schema:
        return f"a value matching {schema['$ref']}"
    return "any value"


class ArgumentChecker:
    """Validates and coerces arguments for one tool schema (compiled once, reusable).

    An invalid schema disables checking (``usable`` is False): without a schema we
    cannot tell right from wrong, and guessing is worse than not checking.
    """

    def __init__(
        self, schema: Mapping[str, Any], *, coerce: bool = True, fill_defaults: bool = False
    ) -> None:
        self.schema: dict[str, Any] = dict(schema)
        self.coerce = coerce
        self.fill_defaults = fill_defaults
        problem = schema_problem(self.schema)
        if problem is not None:
            log.warning("guardrail_schema_invalid", error=problem.message)
        self.usable = problem is None
        self._validator = Draft202012Validator(self.schema if self.usable else {})
        self._walker = SchemaWalker(self.schema, self._validator, coerce=coerce, fill_defaults=fill_defaults)

    # -- decoding --------------------------------------------------------------------

    def decode(self, arguments: str | Mapping[str, Any] | None) -> tuple[Any, list[str], str | None]:
        """(value, coercions, error): the arguments text read as JSON, repairs recorded."""
        if arguments is None:
            return {}, [], None
        if isinstance(arguments, Mapping):
            return dict(arguments), [], None
        text = arguments.strip()
        if not text:
            return {}, [], None
        notes: list[str] = []
        try:
            value: Any = json.loads(text)
        except ValueError:
            if not self.coerce:
                return None, [], "arguments are not valid JSON"
            try:
                value, repairs = loads_lenient(text)
            except ValueError:
                return None, [], "arguments are not valid JSON"
            notes.append("arguments JSON repaired (" + ", ".join(repairs) + ")")
        if isinstance(value, str) and self.coerce and value.strip()[:1] == "{":
            try:
                inner = json.loads(value)
            except ValueError:
                inner = None
            if isinstance(inner, dict):
                value = inner
                notes.append("arguments were double-encoded JSON; decoded")
        return value, notes, None

    # -- validation ------------------------------------------------------------------

    def _field_errors(self, error: ValidationError) -> list[FieldError]:
        path = list(error.absolute_path)
        schema: Mapping[str, Any] = error.schema if isinstance(error.schema, Mapping) else {}
        instance = error.instance
        raw_props = schema.get("properties")
        props: Mapping[str, Any] = raw_props if isinstance(raw_props, Mapping) else {}
        if error.validator == "required" and isinstance(instance, Mapping):
            wanted = error.validator_value if isinstance(error.validator_value, list) else []
            missing = [k for k in wanted if k not in instance]
            out: list[FieldError] = []
            for key in missing:
                sub = self._walker.deref(props.get(key, {}))
                fragment = dict(sub) if isinstance(sub, Mapping) else {}
                expected = describe_expected(fragment)
                out.append(
                    FieldError(
                        path_text([*path, key]),
                        f"missing required field (expected {expected})",
                        expected,
                        fragment,
                        "missing",
                    )
                )
            return out
        if error.validator == "additionalProperties" and isinstance(instance, Mapping):
            allowed = ", ".join(props) or "none"
            return [
                FieldError(
                    path_text([*path, key]),
                    f"unexpected field (allowed fields: {allowed})",
                    f"no field {key!r}",
                    {"additionalProperties": False},
                    compact_json(instance[key], 120),
                )
                for key in instance
                if key not in props
            ]
        fragment = dict(self._walker.deref(schema)) if isinstance(self._walker.deref(schema), Mapping) else {}
        expected = describe_expected(fragment)
        got = compact_json(instance, 120)
        where = f"{got} ({json_type(instance)})"
        if error.validator in ("type", "enum", "const", "anyOf", "oneOf"):
            message = f"expected {expected}, got {where}"
        else:
            message = f"{error.message} (expected {expected}, got {where})"
        return [FieldError(path_text(path), message, expected, fragment, got)]

    def validate(self, value: Any) -> tuple[FieldError, ...]:
        """Every field error in ``value`` (at most 8), ordered by path."""
        if not self.usable:
            return ()
        found: dict[tuple[str, str], FieldError] = {}
        for error in self._validator.iter_errors(value):
            for fe in self._field_errors(error):
                found.setdefault((fe.path, fe.message), fe)
        return tuple(sorted(found.values(), key=lambda fe: fe.path))[:_MAX_ERRORS]

    def check(self, arguments: str | Mapping[str, Any] | None) -> ArgCheck:
        """Decode, coerce (when enabled) and validate ``arguments``."""
        value, notes, problem = self.decode(arguments)
        if problem is not None:
            text = arguments if isinstance(arguments, str) else ""
            return ArgCheck(
                {},
                (),
                (FieldError("", problem, "a JSON object", {"type": "object"}, compact_json(text, 120)),),
            )
        if not isinstance(value, dict):
            return ArgCheck(
                {},
                tuple(notes),
                (
                    FieldError(
                        "",
                        f"arguments must be a JSON object, got {json_type(value)}",
                        "object",
                        {"type": "object"},
                        compact_json(value, 120),
                    ),
                ),
            )
        defaults: list[str] = []
        if self.usable:
            value = self._walker.walk(value, self.schema, [], notes, defaults)
        return ArgCheck(value, tuple(notes), self.validate(value), tuple(defaults))


def check_arguments(
    arguments: str | Mapping[str, Any] | None,
    schema: Mapping[str, Any],
    *,
    coerce: bool = True,
    fill_defaults: bool = False,
) -> ArgCheck:
    """One-shot :meth:`ArgumentChecker.check` (compile an ``ArgumentChecker`` to check many)."""
    return ArgumentChecker(schema, coerce=coerce, fill_defaults=fill_defaults).check(arguments)
