"""The conversation's spans for grounded arguments: where values can be copied from, and which are used.

:class:`SpanIndex` recognizes exactly the substrings of the conversation (as a suffix
automaton does, by the set of places a partial value occurs), indexed by the model's own
tokens once per request.

:class:`SpanLedger` records which spans a reply's values already took. Each span the user
wrote fills one slot: within one call a span given to one parameter is not preferred for
another (``5000 at 5 %`` is not a rate of 5000), and across the calls of one reply a span
inside the list the request enumerates ("Paris, London and Berlin") is not preferred again
for the same parameter, so each call takes the next item. A used span is only no longer
preferred; it is never masked.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence, Set
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

import numpy as np
import numpy.typing as npt

from tether.grammar.vocab import TokenVocab

__all__ = [
    "SpanIndex",
    "SpanLedger",
    "Use",
    "closest_records",
    "counted_by",
    "is_written_number",
    "labelled_by",
    "labelled_ids",
    "number_spans",
    "readings_for",
    "written_numbers",
]

_MAX_TOKEN = 16  # bytes of a token looked up at each text position
_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?")
_LEADING_ZERO = re.compile(rb"-?0\d")
_WORD = re.compile(rb"[A-Za-z0-9]")
_JOINED = re.compile(rb"[A-Za-z0-9@_]")  # what a value does not begin right after
_CHUNK = re.compile(rb"[^\s'\"`()\[\]{}<>,;]+")  # a whitespace- or quote-delimited piece of text


_STANDALONE = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.]\d)")


def written_numbers(text: str) -> list[float]:
    """The plain decimals ``text`` writes on their own, in order (not "dataset1", not a version's parts)."""
    return [float(m) for m in _STANDALONE.findall(text)]


def is_written_number(text: str | bytes) -> bool:
    """Whether ``text`` is a plain decimal as a request writes one (``-3``, ``2.5``)."""
    return _NUMBER.fullmatch(text.encode() if isinstance(text, str) else text) is not None


_FILE_NAME = re.compile(rb"[\w-]\.[A-Za-z][A-Za-z0-9]{0,7}$|/")  # an extension, or a directory part
_GROUPED = re.compile(rb"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_NUM = rb"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?"
_SCALED = re.compile(rb"(" + _NUM + rb")\s*(thousand|million|billion|trillion)\b", re.IGNORECASE)
_PERCENT = re.compile(rb"(" + _NUM + rb")\s*(?:%|percent\b)", re.IGNORECASE)
_SCALE = {b"thousand": 3, b"million": 6, b"billion": 9, b"trillion": 12}
_SMALL = (
    b"zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    b"sixteen seventeen eighteen nineteen twenty"
).split(b" ")
_WORDS = {w: i for i, w in enumerate(_SMALL)} | {b"thirty": 30, b"forty": 40, b"fifty": 50}
_WORDS |= {b"hundred": 100, b"thousand": 1000}
_NUMBER_WORD = re.compile(rb"\b(" + b"|".join(_WORDS) + rb"|dozen)\b", re.IGNORECASE)


def _plain(value: Decimal) -> bytes:
    """``value`` as a model writes it in JSON: ``213000000``, ``0.05``, ``2.5``."""
    text = format(value.normalize(), "f")
    return text.encode()


def _decimal(raw: bytes) -> Decimal | None:
    try:
        return Decimal(raw.replace(b",", b"").decode())
    except InvalidOperation:
        return None


def number_spans(text: bytes) -> list[tuple[int, int, bytes]]:
    """The numbers ``text`` states, each as (start, end, the number as JSON writes it).

    Digits as written (``5000``), and the values behind other ways of writing a number: grouped
    digits (``200,000`` → ``200000``), a scale word (``213 million`` → ``213000000``), a percentage
    (``5%`` → ``0.05``, besides ``5``) and small number words (``two`` → ``2``, ``a dozen`` → ``12``).
    """
    grouped = [(m.start(), m.end(), m.group().replace(b",", b"")) for m in _GROUPED.finditer(text)]
    inside = {p for start, end, _ in grouped for p in range(start, end)}
    out = [(m.start(), m.end(), _json(m.group())) for m in _NUMBER.finditer(text) if m.start() not in inside]
    return out + grouped + list(_derived(text))


def _json(raw: bytes) -> bytes:
    """Digits as JSON writes them: a leading zero is not JSON (``05`` is ``5``, ``007`` is ``7``)."""
    if _LEADING_ZERO.match(raw) and (value := _decimal(raw)) is not None:
        return _plain(value)
    return raw


def _derived(text: bytes) -> Iterator[tuple[int, int, bytes]]:
    for m in _SCALED.finditer(text):
        value = _decimal(m.group(1))
        if value is not None:
            yield m.start(), m.end(), _plain(value.scaleb(_SCALE[m.group(2).lower()]))
    for m in _PERCENT.finditer(text):
        value = _decimal(m.group(1))
        if value is not None:
            yield m.start(), m.end(), _plain(value.scaleb(-2))
    for m in _NUMBER_WORD.finditer(text):
        word = m.group(1).lower()
        yield m.start(), m.end(), str(12 if word == b"dozen" else _WORDS[word]).encode()


def readings_for(
    text: bytes, spans: Sequence[tuple[int, int, bytes]], *, integer: bool, description: str
) -> list[tuple[int, int, bytes]]:
    """The readings of the conversation's numbers ``spans`` that suit one parameter.

    A number written with a scale word means the scaled value: "213 million" is 213000000, not 213,
    unless the parameter says it counts in that unit ("in millions"). A percentage is a fraction
    for a fractional parameter ("5%" is 0.05) unless the parameter says it is in percent, and the
    digits for an integer one (5). Other readings all suit.
    """
    said = description.lower()
    decimal = not integer and ("decimal" in said or "percent" not in said)
    out: list[tuple[int, int, bytes]] = []
    scaled = [(m.start(), m.end(), m.group(2).lower()) for m in _SCALED.finditer(text)]
    percent = [(m.start(), m.end()) for m in _PERCENT.finditer(text)]
    for a, b, n in spans:
        keep = True
        for s, e, word in scaled:
            if s <= a and b <= e:
                counts_in_unit = word.decode() in said
                keep = counts_in_unit if (a, b) != (s, e) else not counts_in_unit
        for s, e in percent:
            if s <= a and b <= e:
                keep = decimal if (a, b) == (s, e) else not decimal
        if keep:
            out.append((a, b, n))
    return out


def labelled_ids(
    text: bytes, spans: Sequence[tuple[int, int, bytes]], words: frozenset[str]
) -> list[tuple[int, int, bytes]]:
    """The numbers of ``spans`` that ``text`` labels as identifiers: right after ``id``, ``#``,
    ``number`` or one of ``words`` (the parameter's other name words: "order 17" for ``order_id``),
    with only spaces, quotes, ``:`` or ``=`` between ("Created event with id 2", ``"id": 7``)."""
    return labelled_by(text, spans, [b"ids?", b"#", b"number", b"no\\."], words)


def labelled_by(
    text: bytes, spans: Sequence[tuple[int, int, bytes]], labels: Sequence[bytes], words: Iterable[str]
) -> list[tuple[int, int, bytes]]:
    """The numbers of ``spans`` right after one of ``labels`` (patterns) or ``words`` (a plural
    too), with only spaces, quotes, ``:`` or ``=`` between: "TOTAL 9875" for a ``total``."""
    labels = [*labels, *(re.escape(w.encode()) + b"s?" for w in sorted(words))]
    if not labels:
        return []
    label = re.compile(rb"(?:(?<![A-Za-z])(?:" + b"|".join(labels) + rb"))[\s\"':=]*$", re.IGNORECASE)
    return [(a, b, n) for a, b, n in spans if label.search(text[max(0, a - 24) : a])]


def counted_by(
    text: bytes, spans: Sequence[tuple[int, int, bytes]], words: Iterable[str]
) -> list[tuple[int, int, bytes]]:
    """The numbers of ``spans`` that count one of ``words`` (singular nouns; a plural too), right before
    it with only spaces or a hyphen between: "two adults" for ``{"adult"}``, "a 3-bedroom" for
    ``{"bedroom"}`` (:func:`tether.schema_kinds.counted_nouns`)."""
    nouns = [re.escape(w.encode()) + b"s?" for w in sorted(words)]
    if not nouns:
        return []
    noun = re.compile(rb"^[\s-]*(?:" + b"|".join(nouns) + rb")(?![A-Za-z])", re.IGNORECASE)
    return [(a, b, n) for a, b, n in spans if noun.match(text[b : b + 32])]


_RECORD_WORD = re.compile(rb"[A-Za-z]{3,}")


def closest_records(
    text: bytes, spans: Sequence[tuple[int, int, bytes]], request: str
) -> list[tuple[int, int, bytes]]:
    """The ids of ``spans`` whose record shares the most words with ``request``: of the orders a
    search returned, the one whose line or ``{…}`` says "pending" for "cancel my pending order".
    All of them where none shares a word."""
    asked = {w.lower() for w in _RECORD_WORD.findall(request.encode("utf-8"))}

    def shared(a: int, b: int) -> int:
        left = max(text.rfind(b"{", 0, a), text.rfind(b"\n", 0, a)) + 1
        ends = [i for i in (text.find(b"}", b), text.find(b"\n", b)) if i != -1]
        record = text[left : min(ends) if ends else len(text)]
        return len(asked & {w.lower() for w in _RECORD_WORD.findall(record)})

    scores = [shared(a, b) for a, b, _ in spans]
    best = max(scores, default=0)
    return [span for span, k in zip(spans, scores, strict=True) if k == best] if best else list(spans)


class SpanIndex:
    """The substrings of ``text``, by the positions where a partial value ends; ``names``: spans of
    ``text`` that are names as a file's is though no file name's shape shows it (a folder named so)."""

    def __init__(self, text: bytes, vocab: TokenVocab, names: Sequence[tuple[int, int]] = ()) -> None:
        self.text = text
        self.names = tuple(names)
        self.vocab = vocab
        self.number_spans = number_spans(text)
        self.numbers = {n for _, _, n in self.number_spans}
        self._at: list[list[int]] | None = None
        self._start: npt.NDArray[np.int32] | None = None
        self._starts: Counter[int] | None = None
        self._words: frozenset[int] | None = None
        self._chunks: frozenset[int] | None = None
        self._quoted: list[tuple[int, tuple[int, ...]]] | None = None
        self._files: list[tuple[int, int]] | None = None

    def _tokens_at(self) -> list[list[int]]:
        if self._at is None:
            text, vocab = self.text, self.vocab
            self._at = [
                [
                    t
                    for k in range(1, min(_MAX_TOKEN, len(text) - p) + 1)
                    for t in vocab.ids_for(text[p : p + k])
                ]
                for p in range(len(text))
            ]
        return self._at

    def _word_starts(self) -> frozenset[int]:
        """Positions where a word begins: not right after a letter, a digit, ``@`` or ``_``. A value
        begins at one (of 2,382 string values BFCL expects that its questions write, 9 do not, and
        those in Chinese or after a dot): ``bob@example.com``, not ``example.com``. Once per request."""
        if self._words is None:
            text = self.text
            self._words = frozenset(p for p in range(len(text)) if p == 0 or not _JOINED.match(text, p - 1))
        return self._words

    def start(self) -> npt.NDArray[np.int32]:
        """Tokens that begin a substring at a word's start (the first token of a value)."""
        if self._start is None:
            at = self._tokens_at()
            ids = {t for p in self._word_starts() for t in at[p]}
            self._start = np.asarray(sorted(ids), dtype=np.int32)
        return self._start

    def starting_at(self, positions: Set[int]) -> npt.NDArray[np.int32]:
        """Tokens that begin a substring at one of ``positions``."""
        at = self._tokens_at()
        return np.asarray(sorted({t for p in positions if p < len(at) for t in at[p]}), dtype=np.int32)

    def file_names(self, blocked: Set[int] = frozenset()) -> list[tuple[int, int]]:
        """The span of each file name or path the text writes (``notes.txt``, ``src/app/main.py``)
        that begins outside ``blocked`` (found once per request)."""
        if self._files is None:
            self._files = []
            for m in _CHUNK.finditer(self.text):
                chunk = m.group().rstrip(b".:!?")
                if _FILE_NAME.search(chunk) and not _NUMBER.fullmatch(chunk):
                    self._files.append((m.start(), m.start() + len(chunk)))
            self._files = sorted({*self._files, *self.names})
        return [(a, b) for a, b in self._files if a not in blocked]

    def file_name_starts(self, blocked: set[int]) -> npt.NDArray[np.int32]:
        """The token that begins each file name or path the text writes at a position outside
        ``blocked``; empty when it writes none."""
        at = self._tokens_at()
        # Its longest first token, as a tokenizer writes the name: a shorter one ("not" of
        # "notes.txt") lets the model run on into a name of its own ("not_found").
        ids = {
            max(at[p], key=lambda t: len(self.vocab.pieces[t]), default=-1)
            for p, _ in self.file_names(blocked)
        }
        ids.discard(-1)
        return np.asarray(sorted(ids), dtype=np.int32)

    def opening(self, allowed: Callable[[int], bool]) -> npt.NDArray[np.int32]:
        """Tokens that open a JSON string and begin the value at a word start where ``allowed``:
        the quote alone (``"``, `` "``) and the quote joined to the value's first bytes (``"17``).
        A tokenizer's merged ``"}`` or ``""`` opens the string too, so the preference for a copied
        value starts at the quote, not after it."""
        if self._quoted is None:
            words, text = self._word_starts(), self.text
            quoted: list[tuple[int, tuple[int, ...]]] = []
            for t in self.vocab.ids_with_prefix(b'"') + self.vocab.ids_with_prefix(b' "'):
                rest = self.vocab.pieces[t].lstrip(b" ")[1:]
                if b'"' in rest or b"\\" in rest or rest[:1].isspace():
                    continue  # a value begins with neither a quote, an escape nor a space
                found: list[int] = []
                at = text.find(rest) if rest else -1
                while at != -1 and len(found) < 64:
                    if at in words:
                        found.append(at)
                    at = text.find(rest, at + 1)
                if not rest or found:
                    quoted.append((t, (-1,) if not rest else tuple(found)))
            self._quoted = quoted
        ids = [t for t, where in self._quoted if where == (-1,) or any(allowed(p) for p in where)]
        return np.asarray(sorted(ids), dtype=np.int32)

    def chunk_starts(self) -> frozenset[int]:
        """Where each whitespace- or quote-delimited piece of the text begins (a file name does)."""
        if self._chunks is None:
            self._chunks = frozenset(m.start() for m in _CHUNK.finditer(self.text))
        return self._chunks

    def start_except(self, blocked: set[int]) -> npt.NDArray[np.int32]:
        """Tokens that begin a substring at some position outside ``blocked``.

        Counts, per token, the positions it begins a substring at (once per request), so only the
        blocked positions are looked at per call: a value's first step stays O(blocked), not O(text).
        """
        if not blocked:
            return self.start()
        at = self._tokens_at()
        if self._starts is None:
            self._starts = Counter(t for p in self._word_starts() for t in at[p])
        starts = self._word_starts()
        lost = Counter(t for p in blocked if p < len(at) and p in starts for t in at[p])
        gone = [t for t, n in lost.items() if n >= self._starts[t]]
        return np.setdiff1d(self.start(), np.asarray(gone, dtype=np.int32), assume_unique=True)

    def occurrences(self, value: bytes) -> list[int]:
        """End positions of every occurrence of ``value`` (capped: a common value occurs often)."""
        out: list[int] = []
        at = self.text.find(value)
        while at != -1 and len(out) < 256:
            out.append(at + len(value))
            at = self.text.find(value, at + 1)
        return out

    def continuations(self, ends: Sequence[int]) -> npt.NDArray[np.int32]:
        at = self._tokens_at()
        ids = {t for e in ends if e < len(at) for t in at[e]}
        return np.asarray(sorted(ids), dtype=np.int32)

    def at_boundary(self, ends: Sequence[int]) -> bool:
        """Does some occurrence end where a word ends (so the value is a whole span)?"""
        text = self.text
        return any(e >= len(text) or not _WORD.match(text[e : e + 1]) for e in ends)


@dataclass(frozen=True)
class Use:
    """One value of a reply: the span ``[start, end)`` it took, in call ``call`` for parameter ``key``."""

    call: int
    key: str
    start: int
    end: int


class SpanLedger:
    """Which spans of the conversation a reply's values have taken (see the module doc)."""

    def __init__(self, listed: tuple[int, int] | None = None) -> None:
        self.listed = listed  # the enumerated list's byte range in the source, if the request has one
        self.uses: list[Use] = []

    def free(self, start: int, end: int, call: int, key: str) -> bool:
        """May the span ``[start, end)`` still be preferred for ``key`` in call ``call``?"""
        for use in self.uses:
            if use.start >= end or start >= use.end:
                continue
            if use.call == call:
                return False
            if use.key == key and self._in_list(start):
                return False
        return True

    def _in_list(self, position: int) -> bool:
        return self.listed is not None and self.listed[0] <= position < self.listed[1]

    def blocked(self, call: int, key: str, among: Set[str] | None = None) -> set[int]:
        """The positions no longer preferred for ``key`` in call ``call`` (see :meth:`free`); with
        ``among``, only the spans those parameters took count within the call."""
        out: set[int] = set()
        for use in self.uses:
            if use.call == call and (among is None or use.key in among):
                out.update(range(use.start, use.end))
            elif use.key == key:
                out.update(p for p in range(use.start, use.end) if self._in_list(p))
        return out

    def take(self, spans: Sequence[tuple[int, int]], call: int, key: str) -> None:
        """A value was written: it took the first of its occurrences ``spans`` that was still free."""
        for start, end in spans:
            if self.free(start, end, call, key):
                self.uses.append(Use(call, key, start, end))
                return

    def free_ends(self, ends: Sequence[int], length: int, call: int, key: str) -> list[int]:
        """The occurrences (by end position) of a partial value of ``length`` bytes still free."""
        return [e for e in ends if self.free(e - length, e, call, key)]
