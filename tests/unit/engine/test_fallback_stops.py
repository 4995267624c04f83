"""The fallback template's markers as stop strings: when a model needs them, and how an engine cuts
its generation at them (``template.fallback_stops``, ``stops.stop_at``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pytest

from tether.engine.base import Done, FinishReason, GenerationEvent, Token
from tether.engine.scripted import EOS_ID, ScriptedEngine
from tether.engine.stops import stop_at
from tether.engine.template import (
    DEFAULT_CHATML,
    FALLBACK_TURN_END,
    FALLBACK_TURN_OPEN,
    ChatTemplate,
    fallback_stops,
)

STOPS = (FALLBACK_TURN_END, FALLBACK_TURN_OPEN)


def test_the_fallback_renders_its_own_markers() -> None:
    text = ChatTemplate(None).render([{"role": "user", "content": "hi"}])
    assert text == f"{FALLBACK_TURN_OPEN}user\nhi{FALLBACK_TURN_END}\n{FALLBACK_TURN_OPEN}assistant\n"
    assert ChatTemplate("").source == DEFAULT_CHATML


def test_a_model_without_a_template_whose_marker_is_text_gets_the_markers_as_stops() -> None:
    engine = ScriptedEngine(chat_template=None)  # byte tokens: "<|im_end|>" is ten of them
    info = engine.info
    assert fallback_stops(info.chat_template, engine.tokenize, info.eos_token_ids) == STOPS


def test_a_model_with_its_own_template_gets_none() -> None:
    engine = ScriptedEngine()  # ships a ChatML template of its own
    info = engine.info
    assert info.chat_template is not None
    assert fallback_stops(info.chat_template, engine.tokenize, info.eos_token_ids) == ()


def _vocab(special: dict[str, int], bos: int | None = None) -> Callable[[str], list[int]]:
    def tokenize(text: str) -> list[int]:
        head = [bos] if bos is not None else []
        if text in special:
            return [*head, special[text]]
        return [*head, *text.encode()]

    return tokenize


@pytest.mark.parametrize("bos", [None, 300])
def test_a_marker_that_is_one_end_token_needs_no_stop(bos: int | None) -> None:
    tokenize = _vocab({FALLBACK_TURN_END: EOS_ID}, bos)
    assert fallback_stops(None, tokenize, frozenset({EOS_ID})) == ()


def test_a_marker_that_is_one_token_but_does_not_end_the_generation_is_stopped_at() -> None:
    """A control token the model does not end on would be written out and run on past."""
    tokenize = _vocab({FALLBACK_TURN_END: 301})
    assert fallback_stops(None, tokenize, frozenset({EOS_ID})) == STOPS


class _Source:
    """A generation's events; records whether it was closed (the engine stops decoding then)."""

    def __init__(self, texts: Sequence[str], finish: FinishReason = "length") -> None:
        self.texts = texts
        self.finish = finish
        self.closed = False

    def __iter__(self) -> Iterator[GenerationEvent]:
        try:
            for k, text in enumerate(self.texts):
                yield Token(k, text)
            yield Done(self.finish, 5, 5, len(self.texts))
        finally:
            self.closed = True


def cut(texts: Sequence[str]) -> tuple[list[Token], Done, _Source]:
    source = _Source(texts)
    events = list(stop_at(iter(source), STOPS, prompt_tokens=5, evaluated=lambda: 3))
    tokens = [e for e in events[:-1] if isinstance(e, Token)]
    done = events[-1]
    assert isinstance(done, Done) and len(tokens) == len(events) - 1
    return tokens, done, source


def test_the_reply_ends_before_the_marker() -> None:
    texts = ["The answer", " is:\n<", "|im", "_end", "|>", "\n\n<|im_start|>user\nmore"]
    tokens, done, source = cut(texts)
    assert "".join(t.text for t in tokens) == "The answer is:\n"
    assert [t.id for t in tokens] == [0, 1]  # the token the marker starts in keeps its text before it
    assert done == Done("stop", 5, 3, 5)  # five tokens generated, the marker's included
    assert source.closed


def test_the_next_turns_opener_is_a_stop_too() -> None:
    tokens, done, _ = cut(["Paris.", "\n<|im_start|>", "user"])
    assert "".join(t.text for t in tokens) == "Paris.\n"
    assert done.finish_reason == "stop"


def test_without_a_marker_the_events_pass_unchanged() -> None:
    texts = ["a <", "|im", " not a marker", " <|im"]
    tokens, done, _ = cut(texts)
    assert [t.text for t in tokens] == texts
    assert done == Done("length", 5, 5, 4)


def test_held_tokens_leave_whole_once_they_are_clear() -> None:
    """A token is released only when none of its text may still open a stop: ``x<`` waits until
    ``y`` shows that ``<|iy`` is no marker."""
    events = stop_at(iter(_Source(["x<", "|i", "y", "z"])), STOPS, prompt_tokens=0, evaluated=0)
    first = next(events)
    assert isinstance(first, Token) and first.text == "x<"
    rest = [e.text for e in events if isinstance(e, Token)]
    assert rest == ["|i", "y", "z"]
