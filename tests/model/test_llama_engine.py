"""The llama.cpp engine on the bundled SmolLM2: determinism, streaming parity, prefix reuse, cancellation."""

from __future__ import annotations

import threading

import numpy as np
import numpy.typing as npt

from tests.support.engines import generated
from tether.engine.base import Done, SamplingParams, Token
from tether.engine.llama_cpp import LlamaCppEngine
from tether.engine.template import ChatTemplate

GREEDY = SamplingParams(max_tokens=24, temperature=0.0)


def prompt_ids(engine: LlamaCppEngine, text: str, system: str | None = None) -> list[int]:
    tpl = ChatTemplate(
        engine.info.chat_template, bos_token=engine.info.bos_token, eos_token=engine.info.eos_token
    )
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": text}
    ]
    return engine.tokenize(tpl.render(messages))


def run(
    engine: LlamaCppEngine, ids: list[int], params: SamplingParams = GREEDY, **kw: object
) -> tuple[list[int], Done]:
    return generated(engine, ids, params, **kw)


def test_bundled_model_metadata(smollm: LlamaCppEngine) -> None:
    info = smollm.info
    assert info.model_id == "smollm2-135m-instruct"
    assert info.n_vocab == 49152
    assert info.chat_template and "<|im_start|>" in info.chat_template
    assert 2 in info.eos_token_ids


def test_greedy_is_deterministic(smollm: LlamaCppEngine) -> None:
    ids = prompt_ids(smollm, "Name three colors.")
    a, _ = run(smollm, ids)
    other = prompt_ids(smollm, "Something else entirely, to move the context.")
    run(smollm, other)
    b, _ = run(smollm, ids)
    assert a == b and len(a) > 5


def test_seeded_sampling_is_reproducible(smollm: LlamaCppEngine) -> None:
    ids = prompt_ids(smollm, "Write a word.")
    params = SamplingParams(max_tokens=16, temperature=0.9, seed=1234)
    assert run(smollm, ids, params)[0] == run(smollm, ids, params)[0]


def test_repeated_prefix_evaluates_fewer_tokens(smollm: LlamaCppEngine) -> None:
    system = "You are a terse assistant. " * 20
    first = prompt_ids(smollm, "What is 2+2?", system)
    second = prompt_ids(smollm, "What is 3+3?", system)
    _, cold = run(smollm, first)
    _, warm = run(smollm, second)
    assert (
        cold.prompt_tokens_evaluated == cold.prompt_tokens
        or cold.prompt_tokens_evaluated <= cold.prompt_tokens
    )
    assert warm.prompt_tokens == len(second)
    assert warm.prompt_tokens_evaluated < warm.prompt_tokens // 4
    assert smollm.cached_prefix_len(second) >= len(second) - 1


def test_identity_processor_keeps_output(smollm: LlamaCppEngine) -> None:
    ids = prompt_ids(smollm, "Tell me about cats.")
    calls = {"n": 0}

    def identity(_: npt.NDArray[np.intc], logits: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        calls["n"] += 1
        return logits

    plain, _ = run(smollm, ids)
    seen, _ = run(smollm, ids, logits_processor=identity)
    assert plain == seen
    assert calls["n"] >= len(seen)


def test_processor_can_force_tokens(smollm: LlamaCppEngine) -> None:
    ids = prompt_ids(smollm, "Say anything.")
    target = smollm.tokenize("zebra", special=False)[-1]

    def force(_: npt.NDArray[np.intc], logits: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        logits[:] = -np.inf
        logits[target] = 0.0
        return logits

    toks, _ = run(smollm, ids, SamplingParams(max_tokens=3, temperature=0.0), logits_processor=force)
    assert toks == [target] * 3


def test_cancellation_stops_early(smollm: LlamaCppEngine) -> None:
    ids = prompt_ids(smollm, "Count from one to one hundred.")
    cancel = threading.Event()
    produced = 0
    done: Done | None = None
    for ev in smollm.generate(ids, SamplingParams(max_tokens=200, temperature=0.0), cancel=cancel):
        if isinstance(ev, Token):
            produced += 1
            if produced == 3:
                cancel.set()
        else:
            done = ev
    assert done is not None and done.finish_reason == "cancelled"
    assert done.completion_tokens == 3


LONG = "The history of tool use in small language models is short but instructive. " * 120


def test_a_long_prompt_reports_its_prefill_and_decodes_as_before(smollm: LlamaCppEngine) -> None:
    ids = prompt_ids(smollm, LONG + "Summarize that in one sentence.")
    assert len(ids) > 3 * smollm._llm.n_batch
    seen: list[tuple[int, int]] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            progress = smollm.prefill_progress()
            if progress is not None:
                seen.append((progress.done, progress.total))
            stop.wait(0.002)

    smollm._llm.reset()  # cold: the whole prompt is evaluated
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        toks, done = run(smollm, ids)
    finally:
        stop.set()
        watcher.join()
    assert done.prompt_tokens_evaluated == len(ids)
    assert seen and all(0 <= d < t == len(ids) for d, t in seen), seen
    assert any(d > 0 for d, _ in seen) and smollm.prefill_progress() is None
    # llama-cpp-python's own generate, from cold, on the same context: the same greedy tokens.
    smollm._llm.reset()
    plain = []
    for token in smollm._llm.generate(ids, temp=0.0, top_k=1):
        if token in smollm.info.eos_token_ids or len(plain) == len(toks):
            break
        plain.append(int(token))
    assert plain == toks


def test_a_cancel_during_prefill_ends_it_between_batches(smollm: LlamaCppEngine) -> None:
    ids = prompt_ids(smollm, LONG + "And again.")
    smollm._llm.reset()
    cancel = threading.Event()
    cancel.set()
    toks, done = run(smollm, ids, cancel=cancel)
    assert toks == [] and done.finish_reason == "cancelled" and done.completion_tokens == 0
    assert smollm._llm.n_tokens < len(ids)  # the rest of the prompt was never evaluated
