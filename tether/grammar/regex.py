"""Schema-constrained parts: JSON Schema -> regex -> outlines-core ``Index``, stepped byte by byte.

The outlines-core vocabulary gets 256 extra synthetic ids (one per byte) beside
the model's tokens, so an ``Index`` can be walked one byte at a time: that is how
a token crossing *into* a schema part is checked. Masks inside the part come
straight from the ``Index`` (exact token sets computed in Rust).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from outlines_core import Index, Vocabulary
from outlines_core.json_schema import TIME, build_regex_from_schema

from tether.caches import CacheFill
from tether.grammar.automata import Automaton, State
from tether.grammar.vocab import TokenVocab

__all__ = ["RegexCompiler", "RegexPart", "schema_regex"]

# outlines-core's ``format: time`` escapes its fraction's dot twice: a backslash and any byte, which
# is no JSON string (``"12:00:00\q"``). The pattern it meant:
_TIME_FIXED = TIME.replace("(\\\\.[0-9]+)?", "(\\.[0-9]+)?")


def schema_regex(schema: Mapping[str, Any]) -> str:
    """The regex for one JSON Schema (outlines-core's compiler; no hand-written translation)."""
    clean = {k: v for k, v in schema.items() if k != "$schema"}
    if not clean.get("properties") and clean.get("type", "object") == "object":
        clean = {"type": "object", "properties": {}, "additionalProperties": False}
    regex = str(build_regex_from_schema(json.dumps(clean), whitespace_pattern=r"[ ]?"))
    return regex.replace(TIME, _TIME_FIXED)


class RegexPart(Automaton):
    """An outlines-core ``Index`` as a byte automaton."""

    def __init__(self, index: Index, synth_base: int, allowed_filter: frozenset[int]) -> None:
        self.index = index
        self.synth_base = synth_base
        self.allowed_filter = allowed_filter

    def start(self) -> State:
        return self.index.get_initial_state()

    def step(self, state: State, byte: int) -> State | None:
        nxt = self.index.get_next_state(state, self.synth_base + byte)
        return None if nxt is None else int(nxt)

    def is_final(self, state: State) -> bool:
        return bool(self.index.is_final_state(state))

    def first_bytes(self, state: State) -> Iterable[int] | None:
        return None

    def exact_tokens(self, state: State) -> Sequence[int] | None:
        allowed = self.index.get_allowed_tokens(state) or []
        return [t for t in allowed if t < self.synth_base and t not in self.allowed_filter]


class RegexCompiler:
    """Builds and caches ``Index`` objects for one vocabulary."""

    def __init__(self, vocab: TokenVocab, *, max_cached: int = 128) -> None:
        self.vocab = vocab
        self.synth_base = vocab.size
        self._vocabulary: Vocabulary | None = None
        self._cache: OrderedDict[str, Index] = OrderedDict()
        self.max_cached = max_cached
        # Never let an Index hand out EOS or control tokens inside a part; the constraint adds EOS itself.
        self._filter = frozenset(vocab.eos_ids) | frozenset(vocab.excluded)

    def _outlines_vocabulary(self) -> Vocabulary:
        if self._vocabulary is None:
            mapping: dict[bytes, list[int]] = {}
            for i in self.vocab.usable_ids.tolist():
                mapping.setdefault(self.vocab.pieces[i], []).append(i)
            for b in range(256):
                mapping.setdefault(bytes((b,)), []).append(self.synth_base + b)
            eos = min(self.vocab.eos_ids) if self.vocab.eos_ids else self.synth_base + 256
            self._vocabulary = Vocabulary(eos, mapping)
        return self._vocabulary

    def cache_fill(self) -> dict[str, CacheFill]:
        """The token indexes built for value patterns (each spans the whole vocabulary)."""
        return {"regex_indexes": CacheFill(len(self._cache), self.max_cached)}

    def part(self, regex: str) -> RegexPart:
        index = self._cache.get(regex)
        if index is None:
            index = Index(regex, self._outlines_vocabulary())
            self._cache[regex] = index
            while len(self._cache) > self.max_cached:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(regex)
        return RegexPart(index, self.synth_base, self._filter)

    def schema_part(self, schema: Mapping[str, Any]) -> RegexPart:
        return self.part(schema_regex(schema))
