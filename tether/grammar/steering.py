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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

__all__ = ["CallList", "Decision", "Steering", "apply_decision", "log_odds"]


@dataclass(frozen=True)
class Steering:
    call_prior: float = 0.0
    decide: bool = False
    name_prior: Mapping[str, float] = field(default_factory=dict)
    max_calls: int | None = None
    end_repeats: bool = False
    short_list_bias: float = 0.0


class CallList:
    """Follows a whole reply's call list byte by byte: which calls are complete, and whether the list
    should end now (the last call repeats an earlier one, or ``max_calls`` are written)."""

    def __init__(self, max_calls: int | None, level: int = 2) -> None:
        self.max_calls = max_calls
        self.level = level  # depth of the list: {"tool_calls": [ … ]}
        self.calls: list[bytes] = []
        self.repeated = False
        self._depth = 0
        self._in_string = False
        self._escaped = False
        self._current = bytearray()

    def feed(self, data: bytes) -> None:
        for b in data:
            self._byte(b)

    def _byte(self, b: int) -> None:
        if self._depth > self.level:
            self._current.append(b)
        if self._in_string:
            if self._escaped:
                self._escaped = False
            elif b == 0x5C:
                self._escaped = True
            elif b == 0x22:
                self._in_string = False
            return
        if b == 0x22:
            self._in_string = True
        elif b in (0x7B, 0x5B):
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
        if self._depth != self.level or self._in_string or not self.calls:
            return False
        return self.repeated or (self.max_calls is not None and len(self.calls) >= self.max_calls)

    @property
    def between_calls(self) -> bool:
        """At list level right after a call: the list ends or goes on with the next token."""
        return self._depth == self.level and not self._in_string and bool(self.calls)

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
        probe._depth, probe._in_string, probe._escaped = self._depth, self._in_string, self._escaped
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
    called = lo + prior >= 0
    keep = call if called else answer
    out = np.full_like(logits, -np.inf)
    out[keep] = logits[keep]
    return out, Decision(lo, prior, called)
