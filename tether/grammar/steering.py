"""Per-request preferences that layer 0 applies inside the sampler, beyond what the grammar allows.

* **The call-or-answer decision** (formats whose whole reply is one JSON object): at the
  point where the reply commits to a tool call or to a text answer, the model's own
  log-odds of calling (log-sum-exp over the tokens that commit to each branch) plus
  ``call_prior`` decides, and only that branch stays allowed. The prior comes from how
  well the offered tools match the conversation (:mod:`tether.selection`).
* **The name prior**: where an offered tool's name starts, each name's first tokens get
  ``name_prior[name]`` added, so the relevance of the tools informs which one is picked
  (never a name outside them: the grammar still allows only offered names).
* **The length of a call list** (whole-reply formats): the list ends at the first exact
  repeat of an earlier call (small models loop on a call until ``max_tokens``), and after
  ``max_calls`` calls (one per item the request enumerates). Before that many calls are
  written, ending the list costs ``short_list_bias`` (a preference, not a mask: the model
  may still stop early).
* **Runaway values** (``strict``, inside the schema's part of a call; :class:`ValueRuns`): an array
  whose latest items repeat one cycle of at most ``ARRAY_MAX_PERIOD`` items over at least
  ``ARRAY_MIN_ITEMS`` items (and ``ARRAY_MIN_CYCLES`` cycles) may only close, and a string whose
  latest ``STRING_MIN_BYTES`` bytes repeat one unit of at most ``STRING_MAX_PERIOD`` bytes may only
  close. A guard against a loop that only ``max_tokens`` would end, not a preference: it masks.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from tether.grammar.vocab import TokenVocab

__all__ = [
    "ARRAY_MAX_PERIOD",
    "ARRAY_MIN_CYCLES",
    "ARRAY_MIN_ITEMS",
    "LOG_ODDS_BOUND",
    "STRING_MAX_PERIOD",
    "STRING_MIN_BYTES",
    "CallList",
    "Decision",
    "JsonStrings",
    "Steering",
    "ValueRuns",
    "apply_decision",
    "comma_tokens",
    "log_odds",
]


# The model's log-odds of calling count at most this much either way (the bundled model's largest on
# the development split is 8.5): a prior beyond the bound settles the decision before any token.
LOG_ODDS_BOUND = 10.0


@dataclass(frozen=True)
class Steering:
    call_prior: float = 0.0
    decide: bool = False
    name_prior: Mapping[str, float] = field(default_factory=dict)
    max_calls: int | None = None
    end_repeats: bool = False
    short_list_bias: float = 0.0
    # Runaway values (see ValueRuns): on wherever a schema constrains the arguments (``strict``).
    bound_values: bool = True

    @property
    def settled_answer(self) -> bool:
        """The decision is a text answer whatever the model's log-odds (the prior is below the bound)."""
        return self.decide and self.call_prior + LOG_ODDS_BOUND < 0


class JsonStrings:
    """Whether JSON text read byte by byte is inside a string, and right after a backslash there."""

    __slots__ = ("escaped", "inside")

    def __init__(self) -> None:
        self.inside = False
        self.escaped = False

    def step(self, b: int) -> bool:
        """Read ``b``; True when it belongs to a string (its quotes included)."""
        if self.inside:
            if self.escaped:
                self.escaped = False
            elif b == 0x5C:
                self.escaped = True
            elif b == 0x22:
                self.inside = False
            return True
        if b == 0x22:
            self.inside, self.escaped = True, False
            return True
        return False


class CallList:
    """Follows a whole reply's call list byte by byte: which calls are complete, and whether the list
    should end now (the last call repeats an earlier one, or ``max_calls`` are written)."""

    def __init__(self, max_calls: int | None, level: int = 2) -> None:
        self.max_calls = max_calls
        self.level = level  # depth of the list: {"tool_calls": [ … ]}
        self.calls: list[bytes] = []
        self.repeated = False
        self._depth = 0
        self._strings = JsonStrings()
        self._current = bytearray()

    def feed(self, data: bytes) -> None:
        for b in data:
            self._byte(b)

    def _byte(self, b: int) -> None:
        if self._depth > self.level:
            self._current.append(b)
        if self._strings.step(b):
            return
        if b in (0x7B, 0x5B):
            self._depth += 1
            if self._depth == self.level + 1:
                self._current = bytearray([b])
        elif b in (0x7D, 0x5D):
            self._depth -= 1
            if self._depth == self.level and b == 0x7D:
                call = bytes(self._current)
                self.repeated = call in self.calls
                self.calls.append(call)

    @property
    def inside_call(self) -> bool:
        return self._depth > self.level

    @property
    def open_levels(self) -> int:
        """Brackets still open inside the current call: what a token must close to finish it."""
        return self._depth - self.level

    @property
    def must_end(self) -> bool:
        """Right after a call, at list level: end the list here."""
        if self._depth != self.level or self._strings.inside or not self.calls:
            return False
        return self.repeated or (self.max_calls is not None and len(self.calls) >= self.max_calls)

    @property
    def between_calls(self) -> bool:
        """At list level right after a call: the list ends or goes on with the next token."""
        return self._depth == self.level and not self._strings.inside and bool(self.calls)

    @property
    def short(self) -> bool:
        """Fewer calls written than ``max_calls`` asks for."""
        return self.max_calls is not None and len(self.calls) < self.max_calls

    def _finish(self, piece: bytes) -> tuple[CallList, bytes] | None:
        """Feed ``piece`` to a copy; where it finishes a call, that copy and the rest of the piece."""
        if not self.inside_call or b"}" not in piece:
            return None
        probe = CallList(self.max_calls, self.level)
        probe.calls = list(self.calls)
        probe._depth = self._depth
        probe._strings.inside, probe._strings.escaped = self._strings.inside, self._strings.escaped
        probe._current = bytearray(self._current)
        for k, b in enumerate(piece):
            probe._byte(b)
            if probe.between_calls and len(probe.calls) > len(self.calls):
                return probe, piece[k + 1 :]
        return None

    def ending(self, piece: bytes) -> Literal["overrun", "early"] | None:
        """What ``piece`` does to the list if it finishes a call inside it.

        ``"overrun"``: the call ends the list and the piece goes on with anything but closers (a
        token such as ``}},`` closes a call and opens the next one in one step, so the list's end
        has to be checked inside tokens, not only between them). ``"early"``: it closes the list
        while the list is still :attr:`short`. None otherwise.
        """
        found = self._finish(piece)
        if found is None:
            return None
        probe, rest = found
        if probe.must_end and rest.strip(b" \t\r\n]}"):
            return "overrun"
        if probe.short and rest.lstrip().startswith(b"]"):
            return "early"
        return None


@dataclass(frozen=True)
class Decision:
    """How the call-or-answer point went: the model's own log-odds of calling, the prior, the outcome."""

    log_odds: float
    prior: float
    called: bool

    @property
    def overridden(self) -> bool:
        """The prior changed what the model alone would have done."""
        return (self.log_odds >= 0) != self.called


def _logsumexp(values: npt.NDArray[np.single]) -> float:
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return float("-inf")
    top = float(finite.max())
    return top + float(np.log(np.exp(finite - top).sum()))


def log_odds(
    logits: npt.NDArray[np.single], call: npt.NDArray[np.int32], answer: npt.NDArray[np.int32]
) -> float:
    """log P(call branch) - log P(answer branch) under ``logits`` (already masked by the grammar)."""
    a, b = _logsumexp(logits[call]), _logsumexp(logits[answer])
    if a == b == float("-inf"):
        return 0.0
    return a - b


def apply_decision(
    logits: npt.NDArray[np.single],
    call: npt.NDArray[np.int32],
    answer: npt.NDArray[np.int32],
    prior: float,
) -> tuple[npt.NDArray[np.single], Decision]:
    """Keep only the chosen branch's tokens (the rest of the row is already masked)."""
    lo = log_odds(logits, call, answer)
    called = min(max(lo, -LOG_ODDS_BOUND), LOG_ODDS_BOUND) + prior >= 0
    keep = call if called else answer
    out = np.full_like(logits, -np.inf)
    out[keep] = logits[keep]
    return out, Decision(lo, prior, called)


# Runaway values. An array may only close once its latest items are one cycle of at most
# ARRAY_MAX_PERIOD items repeated over at least max(ARRAY_MIN_ITEMS, ARRAY_MIN_CYCLES * period) items:
# 16 identical items, 8 times a pair, 4 times a cycle of 8 (distinct items never repeat a cycle).
ARRAY_MIN_ITEMS = 16
ARRAY_MIN_CYCLES = 4
ARRAY_MAX_PERIOD = 8
# A string may only close once its latest max(STRING_MIN_BYTES, STRING_MIN_CYCLES * period) bytes are
# one unit of at most STRING_MAX_PERIOD bytes repeated: 128 bytes of a short unit, 4 times a long one
# (a sentence the model repeats; the reply's repetition stop sees 400 characters, so this closes the
# string first and the value still parses).
STRING_MIN_BYTES = 128
STRING_MIN_CYCLES = 4
STRING_MAX_PERIOD = 48
_STRING_NEED = tuple(max(STRING_MIN_BYTES, STRING_MIN_CYCLES * p) for p in range(STRING_MAX_PERIOD + 1))

_ARRAY_NEED = tuple(max(ARRAY_MIN_ITEMS, ARRAY_MIN_CYCLES * p) for p in range(1, ARRAY_MAX_PERIOD + 1))


class _Array:
    """An open array: where its current item starts, its latest items, and per period ``p`` how many
    of the latest items in a row equal the item ``p`` before them (``runs[p - 1]``)."""

    __slots__ = ("items", "runs", "start")

    def __init__(self, start: int) -> None:
        self.start = start
        self.items: list[bytes] = []
        self.runs = [0] * ARRAY_MAX_PERIOD

    def copy(self) -> _Array:
        out = _Array(self.start)
        out.items, out.runs = list(self.items), list(self.runs)
        return out

    def add(self, item: bytes) -> bool:
        """Record a completed item; whether the array is now over its repeat limit."""
        items, runs = self.items, self.runs
        n = len(items)
        over = False
        for p in range(1, ARRAY_MAX_PERIOD + 1):
            runs[p - 1] = runs[p - 1] + 1 if p <= n and items[n - p] == item else 0
            if runs[p - 1] + p >= _ARRAY_NEED[p - 1]:
                over = True
        items.append(item)
        if len(items) > ARRAY_MAX_PERIOD:
            del items[0]
        return over

    @property
    def near(self) -> bool:
        """One more repeating item would put the array over its limit."""
        return any(
            r + p + 1 >= need for p, (r, need) in enumerate(zip(self.runs, _ARRAY_NEED, strict=True), 1)
        )


class ValueRuns:
    """Follows one JSON value byte by byte (the arguments a schema constrains) for runaway repetition.

    :attr:`string_over`: inside a string (not after a backslash) whose latest bytes loop; the string may
    only close. :attr:`near`: some open array is one repeated item short of its limit; then
    :meth:`overruns` says which tokens would write a ``,`` that continues an array past it. Per byte
    the cost is a bytes append and a branch; per completed item, one comparison per period; per step
    inside a string longer than ``STRING_MIN_BYTES``, one slice compared per period that can fit.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.buf = bytearray()
        self.stack: list[_Array | None] = []  # None: an object
        self.strings = JsonStrings()
        self._str_start = 0
        self._overran = False

    def feed(self, data: bytes) -> None:
        for b in data:
            self.byte(b)

    def byte(self, b: int) -> None:
        buf = self.buf
        at = len(buf)
        buf.append(b)
        opening = b == 0x22 and not self.strings.inside
        if self.strings.step(b):
            if opening:
                self._str_start = at + 1
            return
        if b == 0x5B:  # [
            self.stack.append(_Array(at + 1))
        elif b == 0x7B:  # {
            self.stack.append(None)
        elif b == 0x2C:  # ,
            top = self.stack[-1] if self.stack else None
            if top is not None:
                if top.add(bytes(buf[top.start : at]).strip()):
                    self._overran = True
                top.start = at + 1
        elif b in (0x5D, 0x7D) and self.stack:  # ] }
            top = self.stack.pop()
            if top is not None:
                item = bytes(buf[top.start : at]).strip()
                if item:
                    top.add(item)

    @property
    def in_string(self) -> bool:
        return self.strings.inside

    @property
    def escaped(self) -> bool:
        return self.strings.escaped

    @property
    def string_over(self) -> bool:
        """Inside a string whose latest bytes are one short unit repeated (see ``STRING_MAX_PERIOD``)."""
        size = len(self.buf) - self._str_start
        if not self.in_string or self.escaped or size < STRING_MIN_BYTES:
            return False
        tail = bytes(self.buf[-min(size, _STRING_NEED[-1]) :])
        last = tail[-1]
        for p in range(1, STRING_MAX_PERIOD + 1):
            need = _STRING_NEED[p]
            if need > len(tail):
                break
            if tail[-1 - p] == last and tail[-need + p :] == tail[-need:-p]:
                return True
        return False

    @property
    def near(self) -> bool:
        """Some open array is one repeated item short of its limit."""
        return any(f is not None and f.near for f in self.stack)

    def overruns(self, piece: bytes) -> bool:
        """Whether ``piece`` writes a ``,`` that continues an array past its repeat limit (the item the
        comma ends included). Leaves the state as it was."""
        saved = (
            len(self.buf),
            [f.copy() if f is not None else None for f in self.stack],
            self.strings.inside,
            self.strings.escaped,
            self._str_start,
        )
        self._overran = False
        try:
            for b in piece:
                self.byte(b)
                if self._overran:
                    return True
            return False
        finally:
            n, self.stack, self.strings.inside, self.strings.escaped, self._str_start = saved
            del self.buf[n:]
            self._overran = False


_Tokens = tuple[npt.NDArray[np.int32], npt.NDArray[np.int32], npt.NDArray[np.int32]]
_BY_VOCAB: dict[int, tuple[weakref.ref[TokenVocab], _Tokens]] = {}


def comma_tokens(vocab: TokenVocab) -> _Tokens:
    """The tokens holding a ``,``; those among them with a ``"`` before a ``,`` (the only ones that can
    reach an array's level from inside a string); the tokens holding a ``]``. Computed once per
    vocabulary, when first needed (a walk over every piece)."""
    key = id(vocab)
    hit = _BY_VOCAB.get(key)
    if hit is not None and hit[0]() is vocab:
        return hit[1]
    pieces = vocab.pieces
    usable = vocab.usable_ids.tolist()
    commas = [i for i in usable if b"," in pieces[i]]
    quoted = [i for i in commas if -1 < pieces[i].find(b'"') < pieces[i].rfind(b",")]
    brackets = [i for i in usable if b"]" in pieces[i]]
    found = (
        np.asarray(commas, dtype=np.int32),
        np.asarray(quoted, dtype=np.int32),
        np.asarray(brackets, dtype=np.int32),
    )
    _BY_VOCAB[key] = (weakref.ref(vocab, _forget(key)), found)
    return found


def _forget(key: int) -> Callable[[weakref.ref[TokenVocab]], None]:
    def drop(_: weakref.ref[TokenVocab]) -> None:
        _BY_VOCAB.pop(key, None)

    return drop
