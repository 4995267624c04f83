"""File names as the values of a file parameter: copied whole, and not the one this tool already read.

A file name is copied, never composed. At the empty value of a file parameter the preferred first
tokens are those that begin a file name the text writes ("Read notes.txt" begins at ``notes``, not
at ``Read``); those that begin a name an answered call of this tool already took are apart, in any
case (denied ``READ``, a small model writes ``read`` on into ``readME.md``), less any token that also
begins another name. Within a name begun, the tokens that go on with it (toward a name not read yet
where the value may still become one: ``reports/q`` → ``2`` once ``q1`` was read), and the closing
quote where it ends (``greeting.txt``, not ``greentofiles.txt``). Where the user or a tool writes a
file name or a folder ("the src folder", :func:`folder_mentions`), a name only the client's
instructions give (opencode's example ``src/foo.c``) does not begin a value, and the folder is a
name like a file's.
"""

from __future__ import annotations

import re
from collections.abc import Set

import numpy as np
import numpy.typing as npt

from tether.grammar.spans import SpanIndex
from tether.grammar.vocab import TokenVocab

__all__ = ["FileNames", "folder_mentions", "whole_name_spans"]

# A folder a text names: "the src folder", "directory logs", or a path that ends in a slash.
_FOLDER_MENTION = re.compile(
    r"\b(?:folder|directory)\s+[`'\"]?([\w.-][\w./-]*)|([\w.-]+)/?[`'\"]?\s+(?:folder|directory)\b"
    r"|(?<![\w@/.:-])((?:[\w.-]+/)+)(?![\w@(-])",
    re.IGNORECASE,
)
# Words beside "folder" that are not its name ("the folder", "which directory", "folder of mine").
_NOT_A_NAME = frozenset(
    re.findall(
        r"\w+",
        "a an the this that these those which what whose my your our their his her its one each every any "
        "some same new other another whole entire current parent of in on at to for from with is was be "
        "and or as by into",
    )
)
_NAME_BYTE = re.compile(rb"[\w./-]")


def folder_mentions(text: str) -> list[str]:
    """The folders ``text`` names, in order, once each."""
    found = (next(g for g in m.groups() if g) for m in _FOLDER_MENTION.finditer(text))
    return list(dict.fromkeys(f for f in found if f.lower() not in _NOT_A_NAME))


def whole_name_spans(text: bytes, names: list[str]) -> list[tuple[int, int]]:
    """Where ``text`` writes each of ``names`` as a whole name (not the head of a longer path)."""
    spans = []
    for name in names:
        raw = name.encode("utf-8")
        at = text.find(raw)
        while at != -1:
            end = at + len(raw)
            if not (at and _NAME_BYTE.match(text, at - 1)) and not _NAME_BYTE.match(text, end):
                spans.append((at, end))
            at = text.find(raw, at + 1)
    return spans


class FileNames:
    """The text's file names for one request; ``answered``: (tool, parameter, value) of the calls that
    answered (:func:`tether.selection.next_step.answered_values`); ``said``: what the user and the
    tools wrote (empty: all of the text)."""

    def __init__(
        self,
        index: SpanIndex,
        vocab: TokenVocab,
        answered: frozenset[tuple[str, str, str]],
        said: bytes = b"",
    ) -> None:
        self.index = index
        self.vocab = vocab
        self.answered = answered
        self.said = said
        self._done: dict[tuple[str, str], set[int]] = {}
        self._quote: npt.NDArray[np.int32] | None = None
        self._instructions: set[int] | None = None

    def instructions_only(self) -> set[int]:
        """Where the names begin that only the client's instructions write, when the user or a tool
        writes one; else none."""
        if self._instructions is None:
            text, spans = self.index.text, self.index.file_names()
            unsaid = {a for a, b in spans if text[a:b] not in self.said}
            self._instructions = unsaid if self.said and len(unsaid) < len(spans) else set()
        return self._instructions

    def done(self, tool: str, key: str) -> set[int]:
        """Where the values that answered calls of ``tool`` gave ``key`` begin in the text."""
        found = self._done.get((tool, key))
        if found is None:
            found = set()
            for name, param, value in self.answered:
                if name == tool and param == key and value:
                    raw = value.encode("utf-8")
                    found |= {end - len(raw) for end in self.index.occurrences(raw)}
            self._done[(tool, key)] = found
        return found

    def first(
        self, tool: str, key: str, blocked: Set[int], opening: bool
    ) -> tuple[npt.NDArray[np.int32] | None, npt.NDArray[np.int32] | None]:
        """The first tokens of the names not read yet (with the opening quote where ``opening``), and
        apart those of the names read already; None for a set that is empty."""
        done = self.done(tool, key)
        blocked = set(blocked) | self.instructions_only()
        if opening:
            names = {a for a, _ in self.index.file_names(blocked | done)}
            ids = self.index.opening(names.__contains__)
            return (ids if names and ids.size else None), None
        named = self.index.file_name_starts(set(blocked) | done)
        read = None
        if done:
            spans = self.index.file_names(blocked)
            read = np.setdiff1d(
                self._openings([s for s in spans if s[0] in done]),
                np.union1d(named, self._openings([s for s in spans if s[0] not in done])),
            )
        return (named if named.size else None), (read if read is not None and read.size else None)

    def rest(self, tool: str, key: str, value: bytes) -> tuple[npt.NDArray[np.int32] | None, bool]:
        """Within a name the text writes: the tokens that go on with it, and the closing quote where it
        ends; and whether the name goes on (its middle is copied more firmly than its end)."""
        names = self.index.file_names(self.instructions_only())
        done = self.done(tool, key)
        free = [(a, b) for a, b in names if a not in done]
        found = self.index.occurrences(value)
        ends = [e for e in found if any(a <= e - len(value) and e <= b for a, b in free)] or [
            e for e in found if any(a <= e - len(value) and e <= b for a, b in names)
        ]
        if not ends:
            return None, False
        grow = self.index.continuations([e for e in ends if all(e != b for _, b in names)])
        going_on = bool(grow.size)
        if any(e == b for _, b in names for e in ends):
            grow = np.union1d(grow, self._closers())
        return (grow if grow.size else None), going_on

    def _openings(self, spans: list[tuple[int, int]]) -> npt.NDArray[np.int32]:
        """The tokens that begin one of the names at ``spans``, in any case."""
        text = self.index.text
        ids = {t for a, b in spans for k in range(a + 1, b + 1) for t in self.vocab.ids_folded(text[a:k])}
        return np.asarray(sorted(ids), dtype=np.int32)

    def _closers(self) -> npt.NDArray[np.int32]:
        if self._quote is None:
            self._quote = self.vocab.ids_starting_with([0x22])
        return self._quote
