"""The token loop every engine shares (``tether.engine.loop.token_loop``): how it ends and what its
``Done`` reports when the engine, not the loop, stops the tokens."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

from tether.engine.base import Done, GenerationEvent, Token
from tether.engine.loop import token_loop

EOS = 0


def run(
    tokens: Iterator[int],
    *,
    cancel: threading.Event | None = None,
    evaluated: int | Callable[[], int] = 5,
    max_tokens: int = 10,
) -> tuple[list[Token], Done]:
    events: list[GenerationEvent] = list(
        token_loop(
            tokens,
            piece=lambda t: bytes([ord("a") + t]),
            eos=frozenset({EOS}),
            max_tokens=max_tokens,
            cancel=cancel,
            prompt_tokens=7,
            evaluated=evaluated,
        )
    )
    done = events[-1]
    assert isinstance(done, Done)
    assert all(isinstance(e, Token) for e in events[:-1])
    return [e for e in events if isinstance(e, Token)], done


def test_evaluated_as_a_callable_is_read_at_the_end() -> None:
    placed: list[int] = []

    def engine() -> Iterator[int]:
        yield 1
        placed.append(3)  # a batched engine learns what it evaluated once the request is placed
        yield 2

    tokens, done = run(engine(), evaluated=lambda: sum(placed))
    assert [t.text for t in tokens] == ["b", "c"]
    assert done == Done("length", 7, 3, 2)
    assert run(iter([1]), evaluated=4)[1].prompt_tokens_evaluated == 4


def test_tokens_ending_while_cancel_is_set_report_cancelled() -> None:
    cancel = threading.Event()

    def engine() -> Iterator[int]:
        yield 1
        yield 2
        cancel.set()  # the engine saw the flag between tokens and stopped producing

    tokens, done = run(engine(), cancel=cancel)
    assert [t.id for t in tokens] == [1, 2]
    assert done == Done("cancelled", 7, 5, 2)


def test_tokens_ending_without_cancel_report_length() -> None:
    assert run(iter([1, 2]), cancel=threading.Event())[1] == Done("length", 7, 5, 2)
    assert run(iter([1, 2]))[1].finish_reason == "length"


def test_cancel_seen_after_a_token_stops_the_loop_as_cancelled() -> None:
    cancel = threading.Event()

    def engine() -> Iterator[int]:
        yield 1
        cancel.set()
        yield 2
        yield 3  # never asked for: the loop stops within one token

    tokens, done = run(engine(), cancel=cancel)
    assert [t.id for t in tokens] == [1, 2]
    assert done.finish_reason == "cancelled"


def test_eos_and_the_budget_win_over_a_set_cancel() -> None:
    cancel = threading.Event()
    cancel.set()
    assert run(iter([EOS]), cancel=cancel)[1] == Done("stop", 7, 5, 0)
    assert run(iter([1, 2, 3]), cancel=cancel, max_tokens=1)[1] == Done("length", 7, 5, 1)
