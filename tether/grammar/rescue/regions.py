"""Where call regions start and end, shared by the formats' detector hooks.

``ToolCallFormat.arm`` and ``ToolCallFormat.region_end`` must be prefix-stable: a
decision made on a prefix of the stream never changes when more text arrives. The
helpers here keep that promise for the common cases: a JSON call (possibly in a
code fence) at the start of a message, a JSON value right after a marker, and a
bracketed list of pythonic calls.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from tether.jsonscan import scan_value_end

__all__ = [
    "after_fence",
    "armed_region_end",
    "json_arm",
    "marker_json_end",
    "pythonic_arm",
    "skip_marker",
    "value_run_end",
]

_FENCE = "```"
_FENCE_HEADER = re.compile(r"```[\w+-]*[ \t]*")
_IDENT_START = re.compile(r"[A-Za-z_]")
_IDENT = re.compile(r"[A-Za-z_][\w.\-]*")


def skip_marker(region: str, markers: Sequence[str]) -> int:
    """Length of the marker ``region`` starts with (0 for an armed, markerless region)."""
    return next((len(m) for m in markers if region.startswith(m)), 0)


def after_fence(head: str) -> str | bool | None:
    """For a head starting with a backtick: the text after a code fence's header line.

    False when it is not a fence, None while undecided.
    """
    if len(head) < len(_FENCE):
        return None if _FENCE.startswith(head) else False
    if not head.startswith(_FENCE):
        return False
    m = _FENCE_HEADER.match(head)
    j = m.end() if m else len(_FENCE)
    if j == len(head):
        return None
    return head[j + 1 :] if head[j] == "\n" else head[j:]


def _fenced(head: str, inner: Callable[[str], bool | None]) -> bool | None:
    if head.startswith("`"):
        rest = after_fence(head)
        if not isinstance(rest, str):
            return rest if rest is None else False
        head = rest.lstrip()
        if not head:
            return None
    return inner(head)


def _json_inner(head: str) -> bool | None:
    c = head[0]
    rest = head[1:].lstrip()
    if c not in "{[":
        return False
    if not rest:
        return None
    if c == "[":
        return _json_inner(rest) if rest[0] == "{" else False
    return rest[0] in "\"'"


def json_arm(head: str) -> bool | None:
    """Does a message starting with ``head`` open a JSON call, ``{"...`` or ``[{"...``,
    possibly inside a code fence?"""
    return _fenced(head, _json_inner)


def _pythonic_inner(head: str) -> bool | None:
    if head[0] != "[":
        return False
    rest = head[1:].lstrip()
    if not rest:
        return None
    if not _IDENT_START.match(rest):
        return False
    m = _IDENT.match(rest)
    tail = rest[m.end() if m else 0 :].lstrip()
    if not tail:
        return None
    return tail[0] == "("


def pythonic_arm(head: str) -> bool | None:
    """Does a message starting with ``head`` open ``[name(`` (possibly fenced)?"""
    return _fenced(head, _pythonic_inner)


def value_run_end(text: str, start: int, final: bool, separators: str = "") -> int | None:
    """End of the JSON value opening at ``text[start]``; with ``separators`` (e.g. ``";"``)
    a run ``{...}; {...}`` is followed to its last value."""
    end = scan_value_end(text, start)
    while end is not None and separators:
        i = end
        while i < len(text) and text[i].isspace():
            i += 1
        if i == len(text):
            return end if final else None
        if text[i] not in separators:
            return end
        j = i + 1
        while j < len(text) and text[j].isspace():
            j += 1
        if j == len(text):
            return end if final else None
        if text[j] not in "{[":
            return end
        nxt = scan_value_end(text, j)
        if nxt is None:
            return None
        end = nxt
    return end


def marker_json_end(region: str, skip: int, final: bool, separators: str = "") -> int | None:
    """End of a region whose payload is one JSON value right after a marker of length
    ``skip`` (formats without an end marker). None when the payload is not JSON: the
    region then runs to the next marker or the end of the stream."""
    i = skip
    while i < len(region) and region[i].isspace():
        i += 1
    if i == len(region) or region[i] not in "{[":
        return None
    return value_run_end(region, i, final, separators)


def armed_region_end(region: str, final: bool, separators: str = "") -> int | None:
    """End of a region armed at the start of the message: a closed code fence, or the
    end of the JSON value / bracketed list it starts with."""
    if region.startswith(_FENCE):
        m = _FENCE_HEADER.match(region)
        close = region.find(_FENCE, m.end() if m else len(_FENCE))
        return None if close < 0 else close + len(_FENCE)
    if region[:1] in "{[":
        return value_run_end(region, 0, final, separators)
    return None
