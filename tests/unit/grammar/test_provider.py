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


def test_every_map_of_a_mask_cache_is_bounded() -> None:
    """Allowed sets, masks and call-or-answer splits each keep at most ``max_states`` states."""
    provider = ConstraintProvider(_Pieces())
    plan = json_plan(_schema("name", "country"), provider.regexes)
    masks = MaskCache(plan.automaton, provider.vocab, max_states=3)
    state = plan.automaton.start()
    for byte in json.dumps({"name": "abcdef", "country": "gh"}).encode():
        masks.mask(state)
        masks.split(state)
        assert masks.states() <= 3
        state = plan.automaton.step(state, byte)
    assert masks.states() == 3
