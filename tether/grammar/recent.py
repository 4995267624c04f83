"""The loop's latest round: where the next call's values come from after a tool result.

An agent that takes its steps one item at a time ("for each report: read it, then record its total")
needs, for the next call, the values of the item it just handled: the total from the report it just
read, not the one an earlier round already recorded (a small model copies its own earlier call), and
the option its last call named (``quarter: "q2"`` after reading ``reports/q2.txt``). Both stay
preferences the model can leave (:class:`tether.grammar.grounding.GroundingProcessor` applies them).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from tether.grammar.vocab import TokenVocab

__all__ = ["LatestRound"]


@dataclass(frozen=True)
class LatestRound:
    """The last assistant turn's calls and results, seen from the grounding source.

    ``args``: the string values of that turn's calls' arguments; ``results_from``: the byte offset in
    the source where its results begin (they end the source); ``request``: the request's byte range
    in the source (None where it is not there)."""

    args: str
    results_from: int
    request: tuple[int, int] | None

    @classmethod
    def of(cls, source: str, request: str, args: str, results: str) -> LatestRound | None:
        """The round whose results (``results``) end ``source``; None outside a loop."""
        if not results or not (source.endswith(results) or results.endswith(source)):
            return None
        at = source.rfind(request) if request else -1
        span = (len(source[:at].encode()), len(source[: at + len(request)].encode())) if at >= 0 else None
        return cls(args, max(len(source.encode()) - len(results.encode()), 0), span)

    def fresh(self, spans: Sequence[tuple[int, int, bytes]]) -> list[tuple[int, int, bytes]]:
        """Of a parameter's candidate numbers, those of the request and of the latest results where
        the latest results hold one: a number an earlier result gave belongs to an earlier round."""
        if not any(a >= self.results_from for a, _, _ in spans):
            return list(spans)
        r = self.request
        return [s for s in spans if s[0] >= self.results_from or (r is not None and r[0] <= s[0] < r[1])]

    def option_tokens(
        self, vocab: TokenVocab, options: Sequence[str], so_far: bytes, quote: bool
    ) -> set[int]:
        """The tokens that go on from ``so_far`` toward an option the latest calls named
        (:meth:`named`) and toward no other (with the string's opening quote where ``quote``)."""
        named = {o.encode("utf-8") for o in self.named(options)}
        heads = (b'"', b' "') if quote else (b"",)

        def going_on(option: bytes) -> set[int]:
            if not option.startswith(so_far):
                return set()
            rest = option[len(so_far) :]
            return {t for h in heads for k in range(1, len(rest) + 1) for t in vocab.ids_for(h + rest[:k])}

        wanted = {t for o in named for t in going_on(o)}
        others = {t for o in options if (b := o.encode("utf-8")) not in named for t in going_on(b)}
        return wanted - others

    def named(self, options: Sequence[str]) -> list[str]:
        """The options the latest calls' arguments name as a whole word (``q2`` in ``reports/q2.txt``),
        where they name some but not all of them."""
        found = [
            o
            for o in options
            if o and re.search(rf"(?<![A-Za-z0-9]){re.escape(o)}(?![A-Za-z0-9])", self.args)
        ]
        return found if 0 < len(found) < len(options) else []
