"""Per-model constraint factory: vocabulary, compiled regexes and plans cached across requests.

A plan (and its mask cache) is keyed by format, tool set, mode and tool choice,
so the second request offering the same tools pays no mask computation. Plans are dropped least
recently used first, past ``max_plans`` of them or ``max_mask_bytes`` of masks together: a
state inside a free string allows most of the vocabulary (~200 KB of ids), so a count of states
alone does not bound memory. The model is anything with a vocabulary
(:class:`Vocabulary`): an engine, or a tokenizer in a benchmark.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Protocol

from tether.caches import CacheFill
from tether.grammar.constraint import ToolConstraint
from tether.grammar.masks import MaskCache
from tether.grammar.plan import ConstraintPlan, build_plan, json_plan, name_choice_plan, value_automaton
from tether.grammar.regex import RegexCompiler
from tether.grammar.spec import JsonSpec, ReplySpec
from tether.grammar.vocab import TokenVocab

__all__ = ["MASK_BYTES", "ConstraintProvider", "Vocabulary"]

MASK_BYTES = 256 * 2**20


class _SpecialIds(Protocol):
    @property
    def eos_token_ids(self) -> frozenset[int]: ...

    @property
    def control_token_ids(self) -> frozenset[int]: ...


class Vocabulary(Protocol):
    """What masks are computed from: every entry's bytes, and which ids end a reply or are control."""

    @property
    def info(self) -> _SpecialIds: ...

    def token_pieces(self) -> list[bytes]: ...


class ConstraintProvider:
    """Builds ``ToolConstraint``s for one engine's vocabulary."""

    def __init__(self, model: Vocabulary, *, max_plans: int = 64, max_mask_bytes: int = MASK_BYTES) -> None:
        self.model = model
        self._vocab: TokenVocab | None = None
        self._regexes: RegexCompiler | None = None
        self._plans: OrderedDict[tuple[object, ...], tuple[ConstraintPlan, MaskCache]] = OrderedDict()
        self._lock = threading.Lock()
        self.max_plans = max_plans
        self.max_mask_bytes = max_mask_bytes

    @property
    def regexes(self) -> RegexCompiler:
        _ = self.vocab
        assert self._regexes is not None
        return self._regexes

    @property
    def vocab(self) -> TokenVocab:
        with self._lock:
            if self._vocab is None:
                info = self.model.info
                self._vocab = TokenVocab.from_pieces(
                    self.model.token_pieces(), info.eos_token_ids, info.control_token_ids
                )
                self._regexes = RegexCompiler(self._vocab)
            return self._vocab

    def plan(self, spec: ReplySpec) -> tuple[ConstraintPlan, MaskCache]:
        """The reply's automaton and its masks (steering aside: it is per request)."""
        # Keys keep the properties' order: the automaton writes them in that order.
        tools = tuple((t.name, json.dumps(t.parameters)) for t in spec.tools)
        answer = None if spec.answer is None else ("json", json.dumps(spec.answer.schema))
        key = (spec.fmt.name, tools, spec.mode, spec.required, spec.parallel, answer)
        regexes = self.regexes
        return self._cached(
            key,
            lambda: build_plan(
                spec.fmt,
                spec.tools,
                spec.mode,
                regexes,
                required=spec.required,
                parallel=spec.parallel,
                answer=None if spec.answer is None else value_automaton(spec.answer.schema, regexes),
            ),
        )

    def constraint(self, spec: ReplySpec, *, prompt_len: int, primed: bytes = b"") -> ToolConstraint:
        """Layer 0 for one generation of ``spec`` (``primed``: reply text already in the prompt)."""
        plan, masks = self.plan(spec)
        budget = spec.answer.budget if spec.answer is not None else None
        return ToolConstraint(
            plan, self.vocab, masks, prompt_len, primed=primed, steering=spec.steering, budget=budget
        )

    def _cached(
        self, key: tuple[object, ...], make: Callable[[], ConstraintPlan]
    ) -> tuple[ConstraintPlan, MaskCache]:
        vocab = self.vocab
        with self._lock:
            hit = self._plans.get(key)
        if hit is None:
            plan = make()
            masks = MaskCache(plan.automaton, vocab, max_bytes=self.max_mask_bytes, on_grow=self._trim)
            hit = (plan, masks)
        with self._lock:
            self._plans[key] = hit
            self._plans.move_to_end(key)
            while len(self._plans) > self.max_plans:
                self._plans.popitem(last=False)
        return hit

    def _trim(self) -> None:
        """A plan's masks grew (a request stepped into new states): the least recently used plans go
        until the masks fit ``max_mask_bytes`` (a plan over it alone trims its own states)."""
        with self._lock:
            held = sum(m.nbytes() for _, m in self._plans.values())
            while held > self.max_mask_bytes and len(self._plans) > 1:
                held -= self._plans.popitem(last=False)[1][1].nbytes()

    def cache_fill(self) -> dict[str, CacheFill]:
        """Plans by tool set and schema, and the mask states and bytes they hold together."""
        with self._lock:
            masks = [m for _, m in self._plans.values()]
        states = sum(m.states() for m in masks)
        most = self.max_plans * max((m.max_states for m in masks), default=0)
        fill = {
            "constraint_plans": CacheFill(len(masks), self.max_plans),
            "constraint_mask_states": CacheFill(states, most),
            "constraint_mask_bytes": CacheFill(sum(m.nbytes() for m in masks), self.max_mask_bytes),
        }
        if self._regexes is not None:
            fill.update(self._regexes.cache_fill())
        return fill

    def name_choice(self, names: Sequence[str], *, prompt_len: int) -> ToolConstraint:
        """Layer 2: the reply must be exactly one offered name."""
        plan, masks = self._cached(("names-only", tuple(sorted(names))), lambda: name_choice_plan(names))
        return ToolConstraint(plan, self.vocab, masks, prompt_len)

    def json(self, spec: JsonSpec, *, prompt_len: int) -> ToolConstraint:
        """The reply must be one JSON value of ``spec`` (a structured reply; argument repair). The
        automaton and its masks are kept per schema: a second request with the same one builds nothing."""
        regexes = self.regexes
        key = ("json", json.dumps(spec.schema))
        plan, masks = self._cached(key, lambda: json_plan(spec.schema, regexes))
        return ToolConstraint(plan, self.vocab, masks, prompt_len, budget=spec.budget)
