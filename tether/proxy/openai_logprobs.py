"""OpenAI's two log-probability shapes, built from the tokens a content delta carries.

Chat Completions (``logprobs: true``, ``top_logprobs: N``)::

    {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}],
     "refusal": null}

Completions (the legacy ``logprobs: N``)::

    {"tokens": [...], "token_logprobs": [...], "top_logprobs": [{token: logprob}], "text_offset": [...]}

The values come from the engine (:mod:`tether.engine.logprobs`); which tokens are content, from
the core (:mod:`tether.turns.content_tokens`). A token that splits a UTF-8 character has its
exact ``bytes``; its ``token`` text shows the missing part as U+FFFD.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tether.engine.base import Token, TokenChoice

__all__ = ["LegacyLogprobs", "chat_logprobs"]


def _text(piece: bytes) -> str:
    return piece.decode("utf-8", errors="replace")


def _choice(choice: TokenChoice) -> dict[str, Any]:
    return {"token": _text(choice.piece), "logprob": choice.logprob, "bytes": list(choice.piece)}


def chat_logprobs(tokens: Sequence[Token]) -> dict[str, Any]:
    """A chat choice's (or one streamed delta's) ``logprobs`` object."""
    content = [
        {**_choice(t.logprob.chosen), "top_logprobs": [_choice(c) for c in t.logprob.top]}
        for t in tokens
        if t.logprob is not None
    ]
    return {"content": content, "refusal": None}


class LegacyLogprobs:
    """The completions ``logprobs`` object, chunk by chunk: ``text_offset`` runs on across a stream."""

    def __init__(self, offset: int = 0) -> None:
        self.offset = offset

    def chunk(self, tokens: Sequence[Token]) -> dict[str, Any]:
        out: dict[str, list[Any]] = {
            "tokens": [],
            "token_logprobs": [],
            "top_logprobs": [],
            "text_offset": [],
        }
        for token in tokens:
            lp = token.logprob
            if lp is None:
                continue
            top: dict[str, float] = {}
            for choice in (*lp.top, lp.chosen):  # OpenAI: the sampled token is always in the map
                top.setdefault(_text(choice.piece), choice.logprob)
            out["tokens"].append(_text(lp.chosen.piece))
            out["token_logprobs"].append(lp.chosen.logprob)
            out["top_logprobs"].append(top)
            out["text_offset"].append(self.offset)
            self.offset += len(token.text)
        return out
