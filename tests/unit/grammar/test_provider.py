"""The constraint provider keeps one plan per schema, and two schemas that differ only in their
properties' order are two schemas: each value is written in its own order."""

from __future__ import annotations

import json
from dataclasses import dataclass

from tests.unit.grammar.test_constraint import EOS, drive, make_vocab
from tether.grammar.masks import MaskCache
from tether.grammar.plan import json_plan
from tether.grammar.provider import ConstraintProvider
from tether.grammar.spec import JsonSpec


@dataclass(frozen=True)
class _Info:
    eos_token_ids: frozenset[int] = frozenset({EOS})
    control_token_ids: frozenset[int] = frozenset()


class _Pieces:
    """A byte-level vocabulary (the provider reads only the pieces and the special ids)."""

    info = _Info()

    def token_pieces(self) -> list[bytes]:
        return list(make_vocab().pieces)


def _schema(*order: str) -> dict[str, object]:
    return {
        "type": "object",
        "properties": {name: {"type": "string"} for name in order},
        "required": sorted(order),  # the same list both ways: only the order of the properties differs
        "additionalProperties": False,
    }


def test_property_order_is_part_of_the_plans_key() -> None:
    provider = ConstraintProvider(_Pieces())
    vocab = provider.vocab
    for order in (("name", "country"), ("country", "name")):
        want = json.dumps({k: "x" for k in order})
        text, _ = drive(vocab, provider.json(JsonSpec(_schema(*order)), prompt_len=3), want)
        assert text == want, order


def test_plans_stay_within_the_reported_capacity() -> None:
    provider = ConstraintProvider(_Pieces(), max_plans=4)
    vocab = provider.vocab
    for i in range(10):
        want = json.dumps({f"field{i}": "abc", "name": "x"})
        drive(vocab, provider.json(JsonSpec(_schema(f"field{i}", "name")), prompt_len=3), want)
        fill = provider.cache_fill()
        assert fill["constraint_plans"].capacity == 4
        assert all(f.entries <= f.capacity for f in fill.values()), fill
        assert {"constraint_plans", "constraint_mask_states", "regex_indexes"} <= fill.keys()
    assert provider.cache_fill()["constraint_plans"].entries == 4


def _held(masks: MaskCache) -> int:
    """Bytes of every array the mask cache holds, counted afresh."""
    total = sum(a.nbytes for a in masks._cache.values())
    total += sum(a.nbytes for m in masks._masks.values() for a in (m.allowed, m.blocked) if a is not None)
    return total + sum(s[0].nbytes + s[1].nbytes for s in masks._splits.values() if s is not None)


def test_every_map_of_a_mask_cache_is_bounded() -> None:
    """Allowed sets, masks and call-or-answer splits each keep at most ``max_states`` states, and the
    bytes they hold are counted through the evictions."""
    provider = ConstraintProvider(_Pieces())
    plan = json_plan(_schema("name", "country"), provider.regexes)
    masks = MaskCache(plan.automaton, provider.vocab, max_states=3)
    state = plan.automaton.start()
    for byte in json.dumps({"name": "abcdef", "country": "gh"}).encode():
        masks.mask(state)
        masks.split(state)
        assert masks.states() <= 3
        assert masks.nbytes() == _held(masks) > 0
        state = plan.automaton.step(state, byte)
    assert masks.states() == 3


def _fill(provider: ConstraintProvider, i: int) -> None:
    want = json.dumps({f"field{i}": "abc", "name": "x"})
    drive(provider.vocab, provider.json(JsonSpec(_schema(f"field{i}", "name")), prompt_len=3), want)


def test_plans_are_dropped_least_recently_used_first_to_stay_within_the_mask_bytes() -> None:
    probe = ConstraintProvider(_Pieces())
    _fill(probe, 0)
    one = probe.cache_fill()["constraint_mask_bytes"].entries  # what one plan's masks take
    provider = ConstraintProvider(_Pieces(), max_mask_bytes=int(2.5 * one))
    for i in range(3):
        _fill(provider, i)
    _fill(provider, 0)  # taken again: now the most recently used
    _fill(provider, 3)  # over the budget: the least recently used go
    fill = provider.cache_fill()
    assert fill["constraint_mask_bytes"].capacity == int(2.5 * one)
    assert 0 < fill["constraint_mask_bytes"].entries <= fill["constraint_mask_bytes"].capacity
    keys = [k[1] for k in provider._plans]
    assert keys == [json.dumps(_schema(f"field{i}", "name")) for i in (0, 3)], keys
