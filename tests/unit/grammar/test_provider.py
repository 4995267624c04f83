"""The constraint provider keeps one plan per schema, and two schemas that differ only in their
properties' order are two schemas: each value is written in its own order."""

from __future__ import annotations

import json
from dataclasses import dataclass

from tests.unit.grammar.test_constraint import EOS, drive, make_vocab
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
