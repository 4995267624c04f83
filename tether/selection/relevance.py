"""How well each offered tool matches the conversation: a lexical, model-free signal.

The request is reduced to content words (light stemming; ``get_weather`` and
``getWeather`` become ``get weather``), each weighted by how rare it is in English
(``wordfreq``'s Zipf scale: "the" weighs nothing, "quadratic" a lot). A tool is
described by the words of its name, its parameters and its description. Two numbers
per tool, both in [0, 1]:

* ``coverage`` — the share of the request's weight that the tool's words explain;
* ``name`` — the share of the tool *name*'s weight that the request mentions.

Numbers and other values do not count as words: they say nothing about which tool fits. A value
of a recognizable kind counts as that kind's word instead (:func:`value_kinds`): "Read
handbook.md" is about a *file*, "alice@example.com" an *email*, a link a *url*.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from wordfreq import zipf_frequency

from tether.caches import CacheFill, lru_fill
from tether.grammar.formats.base import ToolSpec

__all__ = [
    "ToolRelevance",
    "content_words",
    "listed_choices",
    "mentioned_choices",
    "mentioned_flags",
    "mentioned_switches",
    "rank_tools",
    "same_word",
    "stem",
    "value_kinds",
    "weight",
]

_SPLIT = re.compile(r"[^A-Za-z0-9]+")
_CAMEL = re.compile(
    r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])|(?<=[A-Za-z])(?=[0-9])|(?<=[0-9])(?=[A-Za-z])"
)
_MIN_WEIGHT = 1.0  # words this common ("what", "get", "the") are not evidence
_FIELD = {"name": 1.0, "param": 0.8, "description": 0.6, "param_description": 0.4}
# Words that make a switch of a name ("include_", "use_", "show_") without saying what it switches.
_SWITCH = frozenset(
    {"include", "use", "enable", "show", "return", "get", "with", "allow", "add", "is", "has", "want"}
    | {"need", "only"}
)


# Nouns made of a verb: "the calculator" asks for ``calculate``, "a conversion" for ``convert``.
_DERIVED: tuple[tuple[str, str, int], ...] = (
    *(("ations", "at", 4), ("ation", "at", 4), ("ators", "at", 4), ("ator", "at", 4)),
    *(("ions", "", 5), ("ion", "", 5)),
)


def stem(word: str) -> str:
    """A light English stem: plurals, -ing, -ed, -ly, and the nouns -ation, -ator, -ion make of a verb
    (enough to match "roots"/"root", "calculating"/"calculate", "calculator"/"calculate")."""
    w = word.lower()
    for suffix, repl, base in _DERIVED:
        if len(w) - len(suffix) >= base and w.endswith(suffix):
            return w[: len(w) - len(suffix)] + repl
    for suffix, repl, min_len in (
        ("ies", "y", 5),
        ("sses", "ss", 5),
        ("ches", "ch", 5),
        ("shes", "sh", 5),
        ("xes", "x", 4),
        ("ing", "", 6),
        ("ed", "", 5),
        ("ly", "", 5),
        ("s", "", 4),
    ):
        if (
            len(w) >= min_len
            and w.endswith(suffix)
            and not (suffix == "s" and w.endswith(("ss", "us", "is")))
        ):
            w = w[: len(w) - len(suffix)] + repl
            break
    if len(w) > 4 and w.endswith("e"):
        w = w[:-1]
    return w


_URL = re.compile(r"\b(?:https?|ftp)://[^\s'\"<>]+")
_EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
# The extensions of files people name in a request: documents, code, data, configuration, media.
_EXTENSIONS = (
    "txt md rst pdf doc docx odt rtf csv tsv xls xlsx json jsonl yaml yml toml ini cfg conf env xml "
    "html htm css js mjs ts tsx jsx py ipynb rb go rs java kt c h cc cpp hpp cs swift php pl sh bash "
    "zsh ps1 bat sql db sqlite log lock png jpg jpeg gif svg webp bmp ico mp3 wav mp4 mov zip tar gz "
    "tgz bz2 7z exe dll so bin iso apk dmg gguf"
)
_FILE = re.compile(
    r"(?<![\w/.@-])(?:[\w.-]+/)*[\w-]*[A-Za-z][\w-]*(?:\.[\w-]+)*\.(?:"
    + _EXTENSIONS.replace(" ", "|")
    + r")(?![\w/@-]|\.\w)"
)


def value_kinds(text: str) -> str:
    """``text`` with each link, email address and file name replaced by the word of its kind
    (``url``, ``email``, ``file``): a value is not evidence of a tool, its kind is."""
    text = _URL.sub(" url ", text)
    text = _EMAIL.sub(" email ", text)
    return _FILE.sub(" file ", text)


def cache_fill() -> dict[str, CacheFill]:
    return {"word_weights": lru_fill(weight)}


@lru_cache(maxsize=65536)
def weight(word: str) -> float:
    """How much a word says: 7 minus its Zipf frequency in English, at least 0 (unknown words: 6)."""
    zipf = zipf_frequency(word.lower(), "en")
    return 6.0 if zipf == 0 else max(0.0, 7.0 - zipf)


def content_words(text: str) -> list[str]:
    """The words of ``text`` (identifiers split), lowercased, digits-only tokens left out."""
    out: list[str] = []
    for chunk in _SPLIT.split(text):
        for part in _CAMEL.split(chunk):
            if part and not part.isdigit() and len(part) > 1:
                out.append(part.lower())
    return out


def _weighted_stems(words: Iterable[str]) -> dict[str, float]:
    stems: dict[str, float] = {}
    for w in words:
        wt = weight(w)
        if wt >= _MIN_WEIGHT:
            s = stem(w)
            stems[s] = max(stems.get(s, 0.0), wt)
    return stems


@dataclass(frozen=True)
class ToolRelevance:
    """One tool's match with the request (see the module doc); ``semantic``: the embedding similarity
    (:mod:`tether.selection.semantic`), 0 when no embedding model is loaded."""

    tool: str
    coverage: float
    name: float
    semantic: float = 0.0

    @property
    def score(self) -> float:
        return 0.5 * (self.coverage + self.name)


def _tool_fields(tool: ToolSpec) -> dict[str, float]:
    """Stem → the strongest field it appears in (name, parameter, description, parameter description)."""
    found: dict[str, float] = {}

    def add(text: str, field: str) -> None:
        for w in content_words(text):
            s = stem(w)
            found[s] = max(found.get(s, 0.0), _FIELD[field])

    add(tool.name, "name")
    add(tool.description, "description")
    props: Mapping[str, Any] = tool.parameters.get("properties") or {}
    for key, spec in props.items():
        add(key, "param")
        if isinstance(spec, Mapping):
            add(str(spec.get("description") or ""), "param_description")
    return found


def rank_tools(
    request: str, tools: Sequence[ToolSpec], semantic: Sequence[float] | None = None
) -> list[ToolRelevance]:
    """Every tool's relevance to ``request``, in the order of ``tools``; ``semantic``: each tool's
    embedding similarity, when there is one."""
    query = _weighted_stems(content_words(value_kinds(request)))
    total = sum(query.values())
    out: list[ToolRelevance] = []
    for i, tool in enumerate(tools):
        fields = _tool_fields(tool)
        covered = sum(wt * fields[s] for s, wt in query.items() if s in fields)
        name = _weighted_stems(content_words(tool.name))
        name_total = sum(name.values())
        named = sum(wt for s, wt in name.items() if s in query)
        out.append(
            ToolRelevance(
                tool.name,
                covered / total if total else 0.0,
                named / name_total if name_total else 0.0,
                semantic[i] if semantic is not None else 0.0,
            )
        )
    return out


def mentioned_flags(text: str, tools: Sequence[ToolSpec]) -> dict[str, frozenset[str]]:
    """Per tool, its boolean parameters whose every telling name word ``text`` uses: "including
    precipitation" mentions ``include_precipitation``, "avoiding toll roads" ``avoid_tolls``."""
    said = {stem(w) for w in content_words(text)}
    out: dict[str, frozenset[str]] = {}
    for tool in tools:
        props: Mapping[str, Any] = tool.parameters.get("properties") or {}
        found = set()
        for key, spec in props.items():
            if not isinstance(spec, Mapping) or spec.get("type") != "boolean":
                continue
            words = [stem(w) for w in content_words(key) if w not in _SWITCH and weight(w) >= _MIN_WEIGHT]
            if words and all(w in said for w in words):
                found.add(key)
        if found:
            out[tool.name] = frozenset(found)
    return out


_NEGATION = frozenset({"no", "not", "without", "never", "dont", "don't", "doesnt", "doesn't", "nor"})
_TRUTH = {"true": True, "false": False, "yes": True, "no": False}


def _switch_values(spec: Mapping[str, Any]) -> dict[bool, Any] | None:
    """How a parameter writes on and off: ``True``/``False`` for a boolean, the strings of an enum
    that says ``"True"``/``"False"`` (or yes/no); None for any other parameter."""
    if spec.get("type") == "boolean":
        return {True: True, False: False}
    enum = spec.get("enum")
    if not isinstance(enum, list):
        return None
    out = {_TRUTH[v.lower()]: v for v in enum if isinstance(v, str) and v.lower() in _TRUTH}
    return out if len(out) == 2 else None


def mentioned_switches(text: str, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """The on/off parameters whose every telling name word ``text`` uses, with the value it says:
    on, or off when a negation ("no", "not", "without") comes within four words before ("it should
    have laundry service" → ``has_laundry_service: True``; "no need for a garage" → ``has_garage:
    False``)."""
    tokens = [w.replace("’", "'") for w in re.findall(r"[a-z][a-z'’]*", text.lower())]
    stems = [stem(w) for w in tokens]
    props: Mapping[str, Any] = parameters.get("properties") or {}
    out: dict[str, Any] = {}
    for key, spec in props.items():
        values = _switch_values(spec) if isinstance(spec, Mapping) else None
        words = [stem(w) for w in content_words(key) if w not in _SWITCH and weight(w) >= _MIN_WEIGHT]
        if values is None or not words or not all(w in stems for w in words):
            continue
        at = min(stems.index(w) for w in words)
        out[key] = values[not _NEGATION & set(tokens[max(0, at - 4) : at])]
    return out


def _said_at(words: Sequence[str], value: str) -> int | None:
    """Where the stemmed ``words`` of a text say ``value`` word for word (None: nowhere, or a value
    as common as "all" that says nothing)."""
    parts = content_words(value)
    if not parts or (len(parts) == 1 and weight(parts[0]) < _MIN_WEIGHT):
        return None
    wanted = [stem(w) for w in parts]
    for i in range(len(words) - len(wanted) + 1):
        if words[i : i + len(wanted)] == wanted:
            return i
    if _CODE.fullmatch(value):  # a code in capitals says the word it begins: "EUR" for "euros"
        code = value.lower()
        return next((i for i, w in enumerate(words) if w.startswith(code)), None)
    return None


_CODE = re.compile(r"[A-Z]{3,}")
_QUOTED = re.compile(r"'([^'\n]{1,40})'|\"([^\"\n]{1,40})\"")


def listed_choices(spec: Mapping[str, Any]) -> list[str] | None:
    """The choices a string parameter without ``enum`` lists in its description, quoted ("Mode of
    analysis, e.g. 'static' or 'dynamic'"); None when it quotes fewer than two."""
    if spec.get("type") != "string" or not isinstance(spec.get("description"), str):
        return None
    found = [a or b for a, b in _QUOTED.findall(spec["description"])]
    return found if len(found) >= 2 else None


_PREFIX = 5  # letters two words share at their start to be one word ("covers" / "coverage")


def same_word(word: str, other: str) -> bool:
    """One word: the same stem, or the same first five letters ("covers" / "coverage", "children" /
    "child")."""
    return stem(word) == stem(other) or (
        min(len(word), len(other)) >= _PREFIX and word[:_PREFIX] == other[:_PREFIX]
    )


def mentioned_choices(text: str, parameters: Mapping[str, Any], *, required: bool = False) -> dict[str, Any]:
    """The optional (with ``required``, all) ``enum`` parameters whose values ``text`` names word for word: "a small green
    bird" names ``size: "small"``, "organic fruits and vegetables" names ``categories: ["Organic",
    "Fruits", "Vegetables"]`` (an array of enums, in the order said). A single-valued parameter
    counts only when exactly one of its values is named. A string parameter whose description
    quotes its choices ("e.g. 'static' or 'dynamic'") counts as an enum of them."""
    words = [stem(w) for w in content_words(text)]
    props: Mapping[str, Any] = parameters.get("properties") or {}
    needed = set(parameters.get("required") or ())
    out: dict[str, Any] = {}
    for key, spec in props.items():
        if (key in needed and not required) or not isinstance(spec, Mapping):
            continue
        items = spec.get("items")
        many = spec.get("type") == "array" and isinstance(items, Mapping)
        enum = (items or {}).get("enum") if many else spec.get("enum", listed_choices(spec))
        if not isinstance(enum, list):
            continue
        hits = sorted((at, v) for v in enum if isinstance(v, str) and (at := _said_at(words, v)) is not None)
        if many and hits:
            out[key] = [v for _, v in hits]
        elif len(hits) == 1:
            out[key] = hits[0][1]
    return out
