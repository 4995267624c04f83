"""Random reply schemas within the subset a structured reply supports (hypothesis strategies).

Drawn from the keywords :data:`tether.grammar.structured.ENFORCED` lists, nested up to two levels:
scalars, enums, bounded strings and formats, arrays with ``maxItems``, objects with some required
properties, ``anyOf`` of scalars.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

__all__ = ["reply_schemas"]

_NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=8)

_SCALARS: st.SearchStrategy[dict[str, Any]] = st.one_of(
    st.sampled_from(["string", "integer", "number", "boolean", "null"]).map(lambda t: {"type": t}),
    st.lists(_NAMES, min_size=1, max_size=4, unique=True).map(lambda e: {"enum": e}),
    st.integers(1, 20).map(lambda n: {"type": "string", "maxLength": n}),
    st.sampled_from(["date", "date-time", "time", "uuid"]).map(lambda f: {"type": "string", "format": f}),
    st.lists(st.sampled_from(["string", "integer", "boolean"]), min_size=2, max_size=2, unique=True).map(
        lambda ts: {"anyOf": [{"type": t} for t in ts]}
    ),
)


def _array(items: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(lambda i, n: {"type": "array", "items": i, "maxItems": n}, items, st.integers(1, 4))


def _object(values: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    def build(props: dict[str, dict[str, Any]], required: list[bool]) -> dict[str, Any]:
        names = list(props)
        return {
            "type": "object",
            "properties": props,
            "required": [n for n, r in zip(names, required, strict=False) if r],
            "additionalProperties": False,
        }

    return st.builds(
        build, st.dictionaries(_NAMES, values, min_size=1, max_size=4), st.lists(st.booleans(), max_size=4)
    )


def reply_schemas() -> st.SearchStrategy[dict[str, Any]]:
    """An object schema whose properties are scalars, arrays of scalars or objects of scalars."""
    return _object(st.one_of(_SCALARS, _array(_SCALARS), _object(_SCALARS)))
