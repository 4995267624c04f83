"""The one token loop every engine runs: EOS, the budget, cancellation, UTF-8 and the final ``Done``.

An engine only has to produce the ids it sampled (``tokens``), one at a time, with its own
sampler and logits processors; :func:`token_loop` turns them into ``Token`` events (text
completed by an incremental UTF-8 decoder, so a character split across tokens leaves
whole) and ends with exactly one ``Done``. Checks happen in the same order everywhere: an
EOS id ends the reply (it is not a token of it), then the token is counted and sent, then
the budget, then the cancel flag — so a cancelled generation stops within one token.
"""

from __future__ import annotations

import codecs
import threading
from collections.abc import Callable, Iterable, Iterator

from tether.engine.base import Done, FinishReason, GenerationEvent, Token

__all__ = ["token_loop"]


def token_loop(
    tokens: Iterable[int],
    *,
    piece: Callable[[int], bytes],
    eos: frozenset[int],
    max_tokens: int,
    cancel: threading.Event | None,
    prompt_tokens: int,
    evaluated: int | Callable[[], int],
) -> Iterator[GenerationEvent]:
    """Events for the sampled ``tokens``; ``piece(id)`` is the token's raw bytes. ``evaluated`` may
    be a callable, read at the end (a batched engine knows it once the request has been placed)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    produced = 0
    finish: FinishReason = "length"
    for token in tokens:
        if token in eos:
            finish = "stop"
            break
        produced += 1
        yield Token(int(token), decoder.decode(piece(token)))
        if produced >= max_tokens:
            break
        if cancel is not None and cancel.is_set():
            finish = "cancelled"
            break
    else:
        if cancel is not None and cancel.is_set():  # the engine ended the tokens because of it
            finish = "cancelled"
    tail = decoder.decode(b"", final=True)
    if tail:
        yield Token(-1, tail)
    yield Done(finish, prompt_tokens, evaluated() if callable(evaluated) else evaluated, produced)
