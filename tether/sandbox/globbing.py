"""Glob patterns to regular expressions, for the ``glob`` tool.

Semantics follow shell globbing on relative POSIX paths: ``*`` and ``?`` never
match ``/``, ``**`` matches any number of directories (``**/`` also matches
none), ``[abc]``/``[!a-z]`` are character classes and ``{a,b}`` alternatives.
Absolute patterns and ``..`` components are refused: the pattern is matched
against paths inside the work dir only.
"""

from __future__ import annotations

import re

from tether.errors import ToolError

__all__ = ["glob_regex"]

_CLASS_ESCAPE = set("\\[]&~|")


def _translate(pattern: str) -> str:
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**", i):
            i += 2
            if i < n and pattern[i] == "/":
                out.append("(?:.*/)?")
                i += 1
            else:
                out.append(".*")
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            start = i + 1
            if start < n and pattern[start] in "!^":
                start += 1
            if start < n and pattern[start] == "]":
                start += 1
            end = pattern.find("]", start)
            if end == -1:
                out.append(re.escape(c))
                i += 1
                continue
            body = pattern[i + 1 : end]
            negate = body[:1] in ("!", "^")
            if negate:
                body = body[1:]
            escaped = "".join("\\" + ch if ch in _CLASS_ESCAPE else ch for ch in body)
            out.append(f"[{'^/' if negate else ''}{escaped}]")
            i = end + 1
        elif c == "{":
            end = pattern.find("}", i)
            if end == -1:
                out.append(re.escape(c))
                i += 1
                continue
            alternatives = pattern[i + 1 : end].split(",")
            out.append("(?:" + "|".join(_translate(alt) for alt in alternatives) + ")")
            i = end + 1
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A compiled regex matching relative paths (no leading ``./``) against ``pattern``."""
    pattern = pattern.strip()
    while pattern.startswith("./"):
        pattern = pattern[2:]
    if not pattern:
        raise ToolError("glob pattern must not be empty")
    if pattern.startswith("/"):
        raise ToolError("glob pattern must be relative; put the directory in 'path'")
    if ".." in pattern.split("/"):
        raise ToolError("glob pattern must not contain '..'")
    try:
        return re.compile(_translate(pattern) + r"\Z", re.DOTALL)
    except re.error as exc:
        raise ToolError(f"invalid glob pattern {pattern!r}: {exc}") from exc
