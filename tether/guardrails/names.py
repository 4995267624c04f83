"""Layer 1 of the guardrails: deterministic tool-name normalization.

``resolve_name(name, offered)`` maps the name a model wrote to one of the offered
tool names, or says it cannot. The rule is *a wrong guess is worse than no guess*:
each stage below only resolves on a unique hit, the first ambiguous stage stops the
cascade (its hits are returned as ``candidates``), and the result is always one of
``offered`` or None. Stages, in order:

1. ``exact``: the name is offered.
2. ``case``: exactly one offered name equals it ignoring case.
3. ``declared``: the name, ignoring case, is one of the ``aliases`` a tool declares (an MCP tool's
   own name, ``mcp__server__tool``, ``server.tool``): the whole name, so ``mcp__git__write_file``
   never reaches another server's ``write_file``; one offered tool must declare it.
4. ``namespace``: one namespace prefix (``functions.``, ``functions__``, ``tools.``,
   ``tools__``, ``tool.``, ``tool__``, ``default_api.``, ``mcp__<server>__``) is
   stripped from the written name, or from the offered names (the model dropped an
   MCP prefix), then exact and then case-insensitive matching are retried.
5. ``squash``: lowercase with ``_-. `` removed: ``WriteFile``, ``write-file`` and
   ``write file`` all match ``write_file``.
6. ``alias``: the closed table of :mod:`tether.guardrails.aliases`; the first
   canonical target that is offered wins.
7. ``split``: the name holds other text as well (``functions.read_file:0``,
   ``to=read_file``, ``read_file(path="a")``): it is split at characters that
   cannot be part of a tool name and each piece is tried with stages 1-4; exactly
   one distinct offered hit resolves it.

Stages 5-7 work on the name with its namespace prefix stripped, if it had one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from tether.grammar.formats.base import ToolSpec
from tether.guardrails.aliases import alias_targets, squash

__all__ = [
    "NAMESPACE_PREFIXES",
    "Resolution",
    "ResolutionMethod",
    "declared_aliases",
    "resolve_name",
    "strip_namespace",
]

ResolutionMethod = Literal["exact", "case", "namespace", "declared", "squash", "alias", "split"]

#: fixed prefixes stripped by the namespace stage (matched case-insensitively).
NAMESPACE_PREFIXES: tuple[str, ...] = (
    "functions.",
    "functions__",
    "tools.",
    "tools__",
    "tool.",
    "tool__",
    "default_api.",
)
_MCP = re.compile(r"mcp__(?P<server>.+?)__(?P<tool>.+)", re.IGNORECASE | re.DOTALL)
_NOT_NAME = re.compile(r"[^A-Za-z0-9_.\-]+")


@dataclass(frozen=True)
class Resolution:
    """The outcome of :func:`resolve_name`.

    ``name`` is an offered name or None. ``method`` says which stage resolved it.
    ``candidates`` lists the offered names of the first ambiguous stage when the
    name stayed unresolved because several matched (empty otherwise).
    """

    name: str | None
    method: ResolutionMethod | None = None
    candidates: tuple[str, ...] = ()

    @property
    def resolved(self) -> bool:
        return self.name is not None


def strip_namespace(name: str) -> str | None:
    """``name`` without one namespace prefix, or None when it has none (or nothing follows it)."""
    lowered = name.lower()
    for prefix in NAMESPACE_PREFIXES:
        if lowered.startswith(prefix) and len(name) > len(prefix):
            return name[len(prefix) :]
    m = _MCP.fullmatch(name)
    return m.group("tool") if m else None


def _unique(offered: Sequence[str], match: Callable[[str], bool]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(o for o in offered if match(o)))


def _forms(name: str) -> tuple[str, ...]:
    stripped = strip_namespace(name)
    return (name,) if stripped is None else (name, stripped)


def _namespace_hits(name: str, offered: Sequence[str]) -> tuple[str, ...]:
    """Offered names equal to ``name`` once a namespace prefix is stripped on either side."""
    written = _forms(name)

    def pairs(o: str) -> list[tuple[str, str]]:
        return [(w, f) for w in written for f in _forms(o) if not (w == name and f == o)]

    exact = _unique(offered, lambda o: any(w == f for w, f in pairs(o)))
    if exact:
        return exact
    return _unique(offered, lambda o: any(w.lower() == f.lower() for w, f in pairs(o)))


def _direct(
    name: str, offered: Sequence[str], aliases: Mapping[str, str]
) -> tuple[tuple[str, ...], ResolutionMethod]:
    """Stages 1-4 for one name: the hits of the first stage that has any."""
    if name in offered:
        return (name,), "exact"
    lowered = name.lower()
    hits = _unique(offered, lambda o: o.lower() == lowered)
    if hits:
        return hits, "case"
    declared = aliases.get(lowered)
    if declared is not None and declared in offered:  # before any prefix is stripped: the server counts
        return (declared,), "declared"
    return _namespace_hits(name, offered), "namespace"


def _alias_hits(base: str, offered: Sequence[str]) -> tuple[str, ...]:
    for target in alias_targets(base):
        hits = tuple(dict.fromkeys(o for o in offered if target in _forms(o)))
        if hits:
            return hits
    return ()


def _split_hits(name: str, offered: Sequence[str], aliases: Mapping[str, str]) -> tuple[str, ...]:
    pieces = [p for p in _NOT_NAME.split(name) if p]
    if pieces == [name]:
        return ()
    found: list[str] = []
    for piece in pieces:
        hits, _ = _direct(piece, offered, aliases)
        found.extend(hits)
    return tuple(dict.fromkeys(found))


def resolve_name(name: str, offered: Sequence[str], aliases: Mapping[str, str] | None = None) -> Resolution:
    """The offered tool ``name`` refers to, by the stages in the module docstring. ``aliases``: the
    names tools declare (:attr:`ToolSpec.aliases <tether.grammar.formats.base.ToolSpec.aliases>`),
    lowercased, to the offered name that declares each (:func:`declared_aliases`)."""
    if name in offered:
        return Resolution(name, "exact")
    name = name.strip()
    if not name or not offered:
        return Resolution(None)
    hits, method = _direct(name, offered, aliases or {})
    if len(hits) == 1:
        return Resolution(hits[0], method)
    if hits:
        return Resolution(None, None, hits)
    base = strip_namespace(name) or name
    key = squash(base)
    stages: tuple[tuple[ResolutionMethod, Callable[[], tuple[str, ...]]], ...] = (
        ("squash", lambda: _unique(offered, lambda o: key != "" and key in map(squash, _forms(o)))),
        ("alias", lambda: _alias_hits(base, offered)),
        ("split", lambda: _split_hits(name, offered, aliases or {})),
    )
    for stage, find in stages:
        hits = find()
        if len(hits) == 1:
            return Resolution(hits[0], stage)
        if hits:
            return Resolution(None, None, hits)
    return Resolution(None)


def declared_aliases(tools: Iterable[ToolSpec]) -> dict[str, str]:
    """Each declared alias, lowercased, to the tool that declares it; an alias two tools declare
    names neither (a wrong guess is worse than no guess), nor does one that is an offered name."""
    tools = list(tools)
    names = {t.name.lower() for t in tools}
    owners: dict[str, set[str]] = {}
    for tool in tools:
        for alias in tool.aliases:
            owners.setdefault(alias.lower(), set()).add(tool.name)
    return {a: next(iter(o)) for a, o in owners.items() if len(o) == 1 and a not in names}
