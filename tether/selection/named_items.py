"""The choices a request names: an array of ``enum`` items cut to those the request names.

A small model asked for "a pet-friendly library with facilities for disabled people" fills
``preferences`` with the whole enum — ``["Pet-friendly", "Disabled Access", "24 hours", "Cafe"]``
— as it appears in the schema. Where the request names some of the items, the rest are the
schema's, not the user's: :func:`unnamed_items` says which to leave out. An item is named when
the request says all of its words ("gluten-free" for "Gluten Free", "children" for "child",
"ratings" for "rating"), or one of its rarer words ("disabled" for "Disabled Access", "backstage"
for "Backstage Pass"; "free" names neither "Dairy Free" nor anything else). Items of one or two
letters ("A", "T" of a DNA alphabet) are never judged, and nothing is cut when the request names
none of the items: then the model's choice stands.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tether.selection.relevance import same_word, weight

__all__ = ["unnamed_items"]

_WORD = re.compile(r"[^\W_]+")
_RARE = 2.0  # a word this rare names its item alone ("disabled"); "free", "access" do not


def unnamed_items(
    request: str, arguments: Mapping[str, Any], parameters: Mapping[str, Any]
) -> dict[str, list[str]]:
    """The array-of-``enum`` arguments holding items ``request`` does not name beside some it does,
    each mapped to the items it names (in the model's order)."""
    props = parameters.get("properties") if isinstance(parameters, Mapping) else None
    if not isinstance(props, Mapping):
        return {}
    said = _WORD.findall(request.lower())
    out: dict[str, list[str]] = {}
    for key, value in arguments.items():
        spec = props.get(key)
        items = spec.get("items") if isinstance(spec, Mapping) else None
        if not isinstance(items, Mapping) or "enum" not in items or not isinstance(value, list):
            continue
        if not value or not all(isinstance(v, str) and len(v.strip()) > 2 for v in value):
            continue
        named = [v for v in value if _named(v, said)]
        if named and len(named) < len(value):
            out[key] = named
    return out


def _named(item: str, said: list[str]) -> bool:
    words = _WORD.findall(item.lower())
    if len(words) > 1 and "".join(words) in said:
        return True  # "wifi" for "Wi-Fi"
    hits = [any(same_word(w, s) for s in said) for w in words]
    return bool(words) and (
        all(hits) or any(h and weight(w) >= _RARE for w, h in zip(words, hits, strict=True))
    )
