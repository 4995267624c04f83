"""Rescue parsing: reading the tool calls small models almost got right.

Shared by every format's ``parse_region``:

* :mod:`tether.jsonscan` (a bottom module, also used by :mod:`tether.coercion`) finds
  where JSON values end (strings respected) and decodes almost-JSON, naming each repair;
* :mod:`~tether.grammar.rescue.calls` turns decoded values into ``ToolCall`` s
  (accepted shapes, truncated calls kept only when valid; values as written);
* :mod:`~tether.grammar.rescue.regions` holds the prefix-stable start/end checks
  the streaming detector asks formats for.
"""

from __future__ import annotations

from tether.grammar.rescue.calls import (
    ARG_KEYS,
    NAME_KEYS,
    args_valid,
    calls_from_value,
    clean_leftover,
    extract_json_calls,
    find_tool,
    make_call,
)
from tether.grammar.rescue.regions import (
    after_fence,
    armed_region_end,
    json_arm,
    marker_json_end,
    pythonic_arm,
    skip_marker,
    value_run_end,
)
from tether.jsonscan import (
    JsonSpan,
    find_json_values,
    loads_lenient,
    scan_value_end,
    string_end,
)

__all__ = [
    "ARG_KEYS",
    "NAME_KEYS",
    "JsonSpan",
    "after_fence",
    "args_valid",
    "armed_region_end",
    "calls_from_value",
    "clean_leftover",
    "extract_json_calls",
    "find_json_values",
    "find_tool",
    "json_arm",
    "loads_lenient",
    "make_call",
    "marker_json_end",
    "pythonic_arm",
    "scan_value_end",
    "skip_marker",
    "string_end",
    "value_run_end",
]
