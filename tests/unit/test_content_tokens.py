"""Which tokens a content delta carries (``tether.turns.content_tokens``): content tokens only."""

from __future__ import annotations

from tether.engine.base import Token, TokenChoice, TokenLogprob
from tether.turns.content_tokens import ContentTokens


def fed(*texts: str) -> tuple[ContentTokens, list[Token]]:
    content = ContentTokens()
    out = []
    for i, text in enumerate(texts):
        token = Token(i, text, TokenLogprob(TokenChoice(i, text.encode(), -0.5), ()))
        content.feed(token)
        out.append(token)
    return content, out


def texts(tokens: tuple[Token, ...]) -> list[str]:
    return [t.text for t in tokens]


def test_prose_around_a_call_claims_the_prose_tokens_only() -> None:
    content, _ = fed("Hi ", "there<to")
    assert texts(content.claim("Hi there")) == ["Hi ", "there<to"]  # "<to" is held: maybe a marker
    for text in ("ol_call>", '{"name": "f"}', "</tool_call>", " bye"):
        content.feed(Token(9, text, TokenLogprob(TokenChoice(9, text.encode(), -1.0), ())))
    assert texts(content.claim(" bye")) == [" bye"]  # the call's tokens are dropped


def test_held_text_waits_for_the_delta_that_carries_it() -> None:
    content, _ = fed("ab", "c", "d")
    assert texts(content.claim("ab")) == ["ab"]
    assert texts(content.claim("cd")) == ["c", "d"]
    assert content.claim("zz") == ()  # nothing left waiting


def test_an_envelope_answer_claims_its_string_not_the_json_around_it() -> None:
    content, _ = fed('{"', "response", '": "', "a\\", "nb", '"}')
    assert texts(content.claim("a\nb")) == ["a\\", "nb"]  # found in its JSON-escaped form


def test_a_token_that_splits_a_character_goes_with_the_character() -> None:
    content, _ = fed("x", "", "é")
    assert texts(content.claim("x")) == ["x"]
    assert texts(content.claim("é")) == ["", "é"]


def test_a_delta_that_cannot_be_found_claims_what_waits() -> None:
    content, _ = fed("one", "two")
    assert texts(content.claim("rewritten")) == ["one", "two"]
    content.feed(Token(-1, "\ufffd"))  # a decoder tail carries no logprob: never reported
    assert content.claim("\ufffd") == ()
