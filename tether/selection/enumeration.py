"""How many things a request enumerates: the number of calls a reply should make at most.

"the weather in Paris, London and Berlin" names three places; "factorial of 5, of 3 and
of 4" three numbers; "four different DNA sequences" says four. A request that enumerates
nothing asks for one call. The count is a cap on the call list (layer 0 ends it there),
not a quota: the model may still make fewer calls.
"""

from __future__ import annotations

import re

__all__ = ["enumerated_items", "enumerated_list", "listed_items"]

_ITEM = r"[\w$%°'’.\-/]+(?:\s+[\w$%°'’.\-/]+){0,3}"
# "A, B, and C" / "A, B and C" / "A and B" / "A or B": items of at most four words each.
_LIST = re.compile(
    rf"({_ITEM})((?:\s*,\s*{_ITEM})*)\s*,?\s+(?:and|or|&)\s+(?:then\s+)?({_ITEM})", re.IGNORECASE
)
_COUNT_WORDS = {
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
}
_COUNTED = re.compile(
    r"\b(two|three|four|five|six|seven|eight|nine|ten|both)\s+(?:different\s+|separate\s+)?\w+", re.I
)
_SEQUENCE = re.compile(r"\b(?:first|second|third|fourth|fifth|then|finally|after that|also)\b", re.IGNORECASE)
_MAX = 10
_TRIM = " .,;:!?'\"()"
_WORDS = re.compile(r"\S+")


def enumerated_list(text: str) -> tuple[int, int] | None:
    """Where in ``text`` its longest list ("Paris, London and Berlin") stands, as a character range.

    The first and last items are cut to as many words as the longest middle item has (one
    without middle items): in "the weather in Paris and London for 3 days" the list is
    "Paris and London", not the words around it.
    """
    best: tuple[int, int] | None = None
    count = 1
    for m in _LIST.finditer(text):
        middle = [p for p in m.group(2).split(",") if p.strip()]
        if 2 + len(middle) <= count:
            continue
        count = 2 + len(middle)
        k = max((len(p.split()) for p in middle), default=1)
        first = list(_WORDS.finditer(m.group(1)))
        last = list(_WORDS.finditer(m.group(3)))
        start = m.start(1) + first[-min(k, len(first))].start()
        end = m.start(3) + last[min(k, len(last)) - 1].end()
        best = (start, end)
    return best


_SEPARATOR = re.compile(r"\s*,\s*(?:(?:and|or|&)\s+)?(?:then\s+)?|\s+(?:and|or|&)\s+(?:then\s+)?", re.I)


def listed_items(text: str) -> list[list[str]]:
    """The items of each list ``text`` makes, in order ("copper and aluminum" → copper, aluminum);
    the first and last items cut as in :func:`enumerated_list` ("Lakers and Bulls in seasons 2018
    and 2020": two lists)."""
    out = []
    at = 0
    while (m := _LIST.search(text, at)) is not None:
        middle = [p.strip() for p in m.group(2).split(",") if p.strip()]
        k = max((len(p.split()) for p in middle), default=1)
        first = m.group(1).split()[-k:]
        last = list(_WORDS.finditer(m.group(3)))[:k]
        items = [" ".join(first), *middle, " ".join(w.group() for w in last)]
        out.append([i.strip(_TRIM) for i in items if i.strip(_TRIM)])
        at = m.start(3) + last[-1].end()  # the words after the cut last item may start another list
    return out


def enumerated_items(text: str) -> int:
    """The most items any one list (or count word) in ``text`` names; 1 when there is none."""
    best = 1
    for m in _LIST.finditer(text):
        middle = [p for p in m.group(2).split(",") if p.strip()]
        best = max(best, 2 + len(middle))
    for m in _COUNTED.finditer(text):
        word = m.group(1).lower()
        best = max(best, 2 if word == "both" else _COUNT_WORDS[word])
    steps = len(_SEQUENCE.findall(text))
    if steps >= 2:
        best = max(best, steps)
    return min(best, _MAX)
