"""Which sampled tokens a content delta carries, so that ``logprobs`` describe the content only.

Between the engine's tokens and the content a client sees, the core's stop matcher holds text
back and drops a stop string, and the format's detector holds back what may open a call, keeps
tool calls and their markup out of the content, and, for a format that wraps its text answer in
JSON (``{"response": "…"}``), decodes that string. :class:`ContentTokens` is told of every token
and, for each content delta, claims the waiting tokens whose text the delta covers: the delta
is found in the text generated since the last claim (as is, else JSON-escaped, else without its
surrounding whitespace); tokens wholly before it (a call, markup) are dropped, tokens that
overlap it are claimed, tokens after it wait for the next delta. A delta that cannot be found
claims every waiting token. Tokens still waiting at the end (a call, a stop string, the
envelope's closing) are never reported.
"""

from __future__ import annotations

import json

from tether.engine.base import Token

__all__ = ["ContentTokens"]


def _locate(raw: str, content: str) -> tuple[int, int] | None:
    """Where ``content`` was generated in ``raw`` (the last occurrence: held text comes last)."""
    for form in (content, json.dumps(content, ensure_ascii=False)[1:-1], content.strip()):
        at = raw.rfind(form) if form else -1
        if at >= 0:
            return at, at + len(form)
    return None


class ContentTokens:
    """Tokens fed in order; ``claim(delta)`` returns those the content ``delta`` carries."""

    def __init__(self) -> None:
        self._parts: list[str] = []  # text generated since the last claim's end
        self._length = 0
        self._waiting: list[tuple[int, int, Token]] = []  # (start, end) in that text

    def feed(self, token: Token) -> None:
        start = self._length
        self._parts.append(token.text)
        self._length += len(token.text)
        if token.logprob is not None:
            self._waiting.append((start, self._length, token))

    def claim(self, content: str) -> tuple[Token, ...]:
        raw = "".join(self._parts)
        start, stop = _locate(raw, content) or (0, len(raw))
        claimed: list[Token] = []
        waiting: list[tuple[int, int, Token]] = []
        for begin, end, token in self._waiting:
            if begin >= stop:
                waiting.append((begin - stop, end - stop, token))
            elif end > start or begin == end >= start:  # an empty token opens the next character
                claimed.append(token)
        self._parts = [raw[stop:]]
        self._length = len(raw) - stop
        self._waiting = waiting
        return tuple(claimed)
