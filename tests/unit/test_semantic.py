"""Relevance in meaning: which texts the English embedding model reads, and what the decision falls back to."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from tether.chat import Message
from tether.grammar.formats.base import ToolSpec
from tether.selection.decision import SEMANTIC_DECISION, DecisionModel, steering_for
from tether.selection.semantic import SemanticRelevance, readable

TICKETS = ToolSpec(
    "get_tickets", "Get a customer's support tickets", {"type": "object", "properties": {"customer": {}}}
)


class Aligned:
    """Every text points the same way: the embedding says every tool fits perfectly."""

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return np.ones((len(texts), 4), dtype=np.float32) / 2


def test_readable_means_mostly_latin_letters() -> None:
    assert readable("Get the weather in Paris") and readable("1234 !!") and readable("")
    assert readable("Café au lait, s'il vous plaît")
    assert not readable("请帮我检索一下'红星科技'公司目前所有未解决的工单")


def test_a_request_the_model_cannot_read_is_judged_by_the_lexical_fit() -> None:
    semantic = SemanticRelevance(Aligned())
    english = [Message("user", "Show me the support tickets of Red Star")]
    chinese = [Message("user", "请帮我检索一下'红星科技'公司目前所有未解决的工单")]
    with_meaning = steering_for(
        english, [TICKETS], SEMANTIC_DECISION, decide=True, names=True, semantic=semantic
    )
    lexical = steering_for(chinese, [TICKETS], DecisionModel(), decide=True, names=True)
    fallback = steering_for(chinese, [TICKETS], SEMANTIC_DECISION, decide=True, names=True, semantic=semantic)
    assert fallback.call_prior == lexical.call_prior  # not the semantic fit with a similarity it cannot know
    assert with_meaning.call_prior > fallback.call_prior


class Counting(Aligned):
    """Counts the texts it embeds."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.texts += texts
        return super().embed(texts)


def test_a_request_asked_about_again_and_a_repeated_tool_set_are_embedded_once() -> None:
    embedder = Counting()
    semantic = SemanticRelevance(embedder, max_requests=2)
    for _ in range(3):  # the decision's prior, then the answer checks, all on one request
        assert semantic.scores("weather in Riga?", [TICKETS]) == [1.0]
    assert embedder.texts.count("weather in Riga?") == 1 and len(embedder.texts) == 2
    for request in ("a", "b", "weather in Riga?"):  # bounded: the oldest request is embedded again
        semantic.scores(request, [TICKETS])
    assert embedder.texts.count("weather in Riga?") == 2
