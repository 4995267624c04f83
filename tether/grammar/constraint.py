"""The layer-0 logits processor: idle during prose, armed on a tool-call marker.

A plain callable ``(ids, logits) -> logits`` for the engine seam. It reads the
tokens sampled since its last call, advances its automaton, and masks the
logits with the cached allowed set of the current state. Idle states cost one
bytes append and a marker search. When nothing fits (a dead end) it ends the
generation (only EOS stays allowed) and records the event: an armed name slot
never fails open.

Inside the schema's part of a ``strict`` call it also follows the value for runaway repetition
(:class:`~tether.grammar.steering.ValueRuns`): a looping array or string may only close. That rule
lives here, on the logits, not in the automaton's state: a repeat counter in the state would make
every step of a long value a new state and defeat the mask cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import structlog

from tether.grammar.automata import Automaton, State
from tether.grammar.closing import Closer
from tether.grammar.masks import Mask, MaskCache
from tether.grammar.plan import ConstraintPlan
from tether.grammar.regex import RegexPart
from tether.grammar.steering import CallList, Decision, Steering, ValueRuns, apply_decision, comma_tokens
from tether.grammar.vocab import TokenVocab

__all__ = ["ToolConstraint", "in_tail"]

log = structlog.get_logger(__name__)


def in_tail(state: State) -> bool:
    """True once the automaton has entered its trailing ``AnyTail`` (the guarded region is over)."""
    while isinstance(state, tuple):
        if len(state) == 1 and isinstance(state[0], tuple):
            state = state[0]  # the one branch of a choice still alive
        elif len(state) == 2 and isinstance(state[0], int):
            state = state[1]
        else:
            break
    return bool(state == "tail")


@dataclass
class ConstraintStats:
    armed: int = 0
    masked_steps: int = 0
    dead_ends: int = 0
    rejected_tokens: int = 0
    closed_values: int = 0  # steps where a looping array or string could only close


class ToolConstraint:
    """One request's constraint. Not thread-safe; one per generation."""

    def __init__(
        self,
        plan: ConstraintPlan,
        vocab: TokenVocab,
        masks: MaskCache,
        prompt_len: int,
        *,
        primed: bytes = b"",
        steering: Steering | None = None,
        budget: int | None = None,
    ) -> None:
        self.plan = plan
        self.vocab = vocab
        self.masks = masks
        self.prompt_len = prompt_len
        self.seen = prompt_len
        self.automaton: Automaton = plan.automaton
        self.state: State | None = self.automaton.start() if plan.from_start else None
        self.tail = b""
        self.at_start = True
        self.stats = ConstraintStats()
        self.steering = steering or Steering()
        self.decision: Decision | None = None
        self._name_bias: dict[State, tuple[npt.NDArray[np.int32], npt.NDArray[np.single]] | None] = {}
        counting = self.steering.end_repeats or self.steering.max_calls is not None
        self.calls = CallList(self.steering.max_calls) if plan.list_close is not None and counting else None
        self._closers: npt.NDArray[np.int32] | None = None
        self.values = ValueRuns() if plan.strict_args and self.steering.bound_values else None
        self._in_schema = False
        self._max_marker = max((len(m) for m in plan.markers), default=0)
        # A reply held from its first token closes within its token budget (see Closer).
        self.closer = (
            Closer(self.automaton, vocab, budget) if budget is not None and plan.from_start else None
        )
        if plan.from_start:
            self.stats.armed += 1
        if primed:
            # Text already placed in the assistant turn (a prefill) counts as generated.
            self._consume_bytes(primed)

    def _consume_bytes(self, data: bytes) -> None:
        if self.state is not None:
            self._advance(data)
        else:
            self._watch(data)

    def _catch_up(self, ids: npt.NDArray[np.intc]) -> None:
        n = len(ids)
        if n > self.seen:
            for tid in ids[self.seen : n].tolist():
                self._consume(int(tid))
            self.seen = n

    @property
    def armed(self) -> bool:
        """Inside a tool call: the mask is active."""
        return self.state is not None

    def copying(self, ids: npt.NDArray[np.intc]) -> bool:
        """After ``ids``: inside a tool call where the grammar leaves most of the vocabulary open (an
        argument's text), so the model most likely copies the conversation: the batched engine drafts
        only there, never where the grammar dictates structure."""
        self._catch_up(ids)
        return self.state is not None and self.masks.mask(self.state).blocked is not None

    def forced_next(self, ids: npt.NDArray[np.intc]) -> int | None:
        """The only token the step after ``ids`` allows, or None (jump-forward: an engine may append it
        without sampling). Where only end-of-reply tokens are left (a closed call list), the first of
        them: whichever a sampler took, the reply ends there with the same text. Stands for that
        step's call: whatever the call would record, this does."""
        self._catch_up(ids)
        if self.state is None:
            return None
        mask = self.masks.mask(self.state)
        if mask.allowed is None or not (mask.allowed.size == 1 or self._ends(mask.allowed)):
            return None
        if self.steering.decide and self.decision is None and self.masks.split(self.state) is not None:
            return None
        if self.calls is None:  # no call-list rule that could take the one token away: it is forced
            self.stats.masked_steps += 1
            return int(mask.allowed[0])
        # The call-list rules only narrow the mask; one that empties it is left to the sampler.
        row = self._shape(np.zeros(self.vocab.size, dtype=np.single))
        kept = np.flatnonzero(np.isfinite(row))
        return int(kept[0]) if kept.size == 1 or self._ends(kept) else None

    def _ends(self, tokens: npt.NDArray[np.integer]) -> bool:
        """True when ``tokens`` are only end-of-reply ids (and at least one)."""
        eos = self.vocab.eos_ids
        return 0 < tokens.size <= len(eos) and all(int(t) in eos for t in tokens)

    # The engine seam.
    def __call__(self, ids: npt.NDArray[np.intc], logits: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        self._catch_up(ids)
        if self.state is None:
            return logits
        return self._shape(logits)

    def _shape(self, logits: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        """This step's mask and steering on ``logits`` (the automaton is armed)."""
        assert self.state is not None
        mask = self.masks.mask(self.state)
        self.stats.masked_steps += 1
        if mask.empty:
            self.stats.dead_ends += 1
            log.warning("constraint_dead_end", state=repr(self.state)[:120])
            mask = Mask(allowed=np.asarray(sorted(self.vocab.eos_ids), dtype=np.int32), blocked=None)
        logits = mask.apply(logits)
        if self.closer is not None:
            way = self.closer.allowed(self.state, self.seen - self.prompt_len)
            if way is not None and np.isfinite(logits[way]).any():
                out = np.full_like(logits, -np.inf)
                out[way] = logits[way]
                logits = out
        steering = self.steering
        if steering.decide and self.decision is None:
            split = self.masks.split(self.state)
            if split is not None:
                logits, self.decision = apply_decision(logits, *split, steering.call_prior)
        if steering.name_prior:
            bias = self._name_bias_at(self.state)
            if bias is not None:
                logits[bias[0]] += bias[1]
        if self.calls is not None:
            if self.calls.must_end:
                logits = self._end_list(logits)
            elif self.calls.inside_call:
                self._no_overrun(logits)
            elif self.calls.between_calls and self.calls.short and steering.short_list_bias:
                closers = self._list_closers()
                logits[closers] -= steering.short_list_bias
        if self._in_schema:
            logits = self._bound_values(logits)
        return logits

    def _bound_values(self, logits: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        """A looping string may only close; a token that would continue a looping array with a ``,`` is
        masked. Where the grammar cannot close there (``minItems`` not reached, a string ``pattern``),
        the grammar wins and nothing changes."""
        values = self.values
        assert values is not None
        if values.string_over:
            quotes = self.vocab.ids_starting_with(b'"')
            keep = quotes[np.isfinite(logits[quotes])]
            if keep.size == 0:
                return logits
            self.stats.closed_values += 1
            out = np.full_like(logits, -np.inf)
            out[keep] = logits[keep]
            return out
        if not values.near:
            return logits
        commas, quoted, brackets = comma_tokens(self.vocab)
        if not values.in_string and not np.isfinite(logits[brackets]).any():
            return logits  # no array can close here: minItems still wants items
        probe = quoted if values.in_string else commas
        live = probe[np.isfinite(logits[probe])]
        pieces = self.vocab.pieces
        over = [t for t in live.tolist() if values.overruns(pieces[t])]
        if not over:
            return logits
        if np.isfinite(logits).sum() <= len(over):
            return logits
        self.stats.closed_values += 1
        logits[over] = -np.inf
        return logits

    def _no_overrun(self, logits: npt.NDArray[np.single]) -> None:
        """Mask tokens that would finish the list's last call and run on into another one; while the
        list is short, tokens that would finish the call and close the list cost ``short_list_bias``."""
        assert self.calls is not None
        braces, closings = self.vocab.closing_brackets()
        # Per token, so cheap first: only a token with as many closers as open levels can finish the call.
        deep = braces[closings >= self.calls.open_levels]
        live = deep[np.isfinite(logits[deep])]
        pieces = self.vocab.pieces
        bias = self.steering.short_list_bias if self.calls.short else 0.0
        over: list[int] = []
        early: list[int] = []
        for t in live.tolist():
            ending = self.calls.ending(pieces[t])  # one probe per token serves both rules
            if ending == "overrun":
                over.append(t)
            elif ending == "early" and bias:
                early.append(t)
        if over:
            logits[over] = -np.inf
        if early:
            logits[early] -= bias

    def _list_closers(self) -> npt.NDArray[np.int32]:
        assert self.plan.list_close is not None
        if self._closers is None:
            self._closers = self.vocab.ids_starting_with(self.plan.list_close[:1])
        return self._closers

    def _end_list(self, logits: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        """Only tokens that close the call list stay allowed (the grammar already allows them here)."""
        closers = self._list_closers()
        keep = closers[np.isfinite(logits[closers])]
        if keep.size == 0:
            return logits
        out = np.full_like(logits, -np.inf)
        out[keep] = logits[keep]
        return out

    def _name_bias_at(self, state: State) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.single]] | None:
        """In a name slot: each allowed token gets the best prior of the names it can go on to. Names that
        share a beginning (``math_gcd``, ``math_lcm``) get the same bias up to where they part, so the
        prior decides at the fork, not only at the first token."""
        if state in self._name_bias:
            return self._name_bias[state]
        found = None
        slot = self.automaton.name_slot(state)
        if slot is not None:
            so_far = slot[1]
            prior = {
                n.encode(): v for n, v in self.steering.name_prior.items() if n.encode().startswith(so_far)
            }
            ids, values = [], []
            for tid in self.masks.allowed(state).tolist():
                piece = so_far + self.vocab.pieces[tid]
                fits = [v for n, v in prior.items() if n.startswith(piece) or piece.startswith(n)]
                if fits:
                    ids.append(tid)
                    values.append(max(fits))
            if ids:
                found = (np.asarray(ids, dtype=np.int32), np.asarray(values, dtype=np.single))
        self._name_bias[state] = found
        return found

    def _consume(self, tid: int) -> None:
        self._consume_bytes(self.vocab.pieces[tid] if 0 <= tid < self.vocab.size else b"")

    def _advance(self, piece: bytes) -> None:
        if self.calls is not None:
            self.calls.feed(piece)
        state = self.state
        values = self.values
        for k, b in enumerate(piece):
            nxt = self.automaton.step(state, b)
            if nxt is None:
                self.stats.rejected_tokens += 1
                log.warning("constraint_rejected_token", piece=piece.decode("utf-8", "replace"))
                self._disarm(piece[k:])
                return
            state = nxt
            if values is not None:
                self._follow_value(values, state, b)
            if in_tail(state):
                self._disarm(piece[k + 1 :])
                return
        self.state = state

    def _follow_value(self, values: ValueRuns, state: State, byte: int) -> None:
        """Feed ``byte`` to the value tracker when the schema's part consumed it; a new value starts
        fresh."""
        inside = isinstance(self.automaton.leaf(state)[0], RegexPart)
        if inside:
            if not self._in_schema:
                values.reset()
            values.byte(byte)
        self._in_schema = inside

    def _disarm(self, rest: bytes) -> None:
        self.state = None
        self.tail = b""
        self._in_schema = False
        if rest:
            self._watch(rest)

    def _watch(self, piece: bytes) -> None:
        if self.plan.arm_at_start and self.at_start:
            # Markerless formats: a call may open the message ("[" / "{"), after optional whitespace.
            head = (self.tail + piece).lstrip()
            if not head:
                self.tail += piece
                return
            self.at_start = False
            self.tail = b""
            if self.automaton.step(self.automaton.start(), head[0]) is not None:
                self._arm(head)
                return
        if not self.plan.markers:
            return
        self.tail += piece
        for marker in self.plan.markers:
            at = self.tail.find(marker)
            if at != -1:
                self._arm(self.tail[at + len(marker) :])
                return
        if len(self.tail) > self._max_marker:
            self.tail = self.tail[-self._max_marker :]

    def _arm(self, rest: bytes) -> None:
        self.at_start = False
        self.stats.armed += 1
        self.tail = b""
        self.state = self.automaton.start()
        if rest:
            self._advance(rest)


def tokens_text(vocab: TokenVocab, ids: Sequence[int]) -> str:
    return b"".join(vocab.pieces[i] for i in ids).decode("utf-8", "replace")
