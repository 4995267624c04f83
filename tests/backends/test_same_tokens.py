"""The embedded engine decodes the tokens llama-server decodes: one slot, greedy, on the bundled model.

Both let llama.cpp choose the attention kernel (flash attention on CPU), so a one-slot tether and a
llama-server built from the same pinned source write the same reply token for token. With flash
attention off in the one-slot context (as before), two of these four replies parted from
llama-server's within 20 words.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.engines import bundled_batched
from tether.engine.base import SamplingParams, Token
from tether.engine.batch import BatchedLlama

QUESTIONS = (
    "Write a long story about a dragon.",
    "Explain recursion to a child.",
    "List three prime numbers and say why.",
    "What is the capital of France?",
)
TOKENS = 96


@pytest.fixture(scope="module")
def one_slot() -> Iterator[BatchedLlama]:
    with bundled_batched(1, 2048) as engine:
        yield engine


@pytest.mark.parametrize("question", QUESTIONS)
def test_one_slot_writes_llama_servers_greedy_reply(
    one_slot: BatchedLlama, llama_server: str, question: str
) -> None:
    prompt = f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
    body = {
        "prompt": prompt,
        "n_predict": TOKENS,
        "temperature": 0,
        "cache_prompt": False,
        "return_tokens": True,
    }
    reply = httpx.post(f"{llama_server}/completion", json=body, timeout=120).json()
    theirs = reply["tokens"]
    if reply["stop_type"] == "eos":
        theirs = theirs[:-1]  # llama-server lists the end-of-generation token; tether's engine does not
    slot = one_slot.slots()[0]
    params = SamplingParams(max_tokens=TOKENS, temperature=0.0)
    ours = [e.id for e in slot.generate(slot.tokenize(prompt), params) if isinstance(e, Token)]
    assert len(theirs) > 5 and ours == theirs
