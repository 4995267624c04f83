"""The prefix cache on the bundled SmolLM2: a restored prefix gives the tokens a cold prefill gives
— after a restart (disk), after another conversation took the context (RAM), in another slot of
the batched engine — and state saved for other context parameters or torn on disk is never used."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import numpy.typing as npt
import pytest

from tests.support.engines import generated
from tests.support.processes import tether_serve
from tether.engine.base import Done, Engine, SamplingParams
from tether.engine.batch import BatchedLlama
from tether.engine.llama_cpp import LlamaCppEngine
from tether.engine.llama_options import LlamaOptions
from tether.engine.locate import bundled_model_path
from tether.engine.prefix import BLOCK, PrefixCache, llama_tag
from tether.engine.template import ChatTemplate

GREEDY = SamplingParams(max_tokens=24, temperature=0.0)
SYSTEM = " ".join(
    f"Rule {i}: the {i}th parcel goes to shelf {i % 7} unless it is marked fragile." for i in range(90)
)
NOISE = 1.5  # |logit difference| a batch's rounding may cause (tests/model/test_batching_model.py)
THREADS = int(os.environ.get("TETHER_TEST_THREADS", "0")) or None


def cache(root: Path | None, layout: str = "serial", n_ctx: int = 2048) -> PrefixCache:
    tag = llama_tag(bundled_model_path(), LlamaOptions(), layout=layout, n_ctx=n_ctx)
    return PrefixCache(tag, ram_bytes=1 << 30, disk_dir=root, disk_bytes=1 << 30)


def serial(c: PrefixCache | None, n_ctx: int = 2048) -> LlamaCppEngine:
    return LlamaCppEngine(bundled_model_path(), n_ctx=n_ctx, n_threads=THREADS, prefix_cache=c)


def prompt(engine: Engine, question: str, system: str = SYSTEM) -> list[int]:
    info = engine.info
    tpl = ChatTemplate(info.chat_template, bos_token=info.bos_token, eos_token=info.eos_token)
    return engine.tokenize(
        tpl.render([{"role": "system", "content": system}, {"role": "user", "content": question}])
    )


def run(engine: Engine, ids: list[int]) -> tuple[list[int], Done]:
    return generated(engine, ids, GREEDY)


@pytest.fixture(scope="module")
def cold() -> Iterator[LlamaCppEngine]:
    engine = serial(None)
    yield engine
    engine.close()


def reference(engine: LlamaCppEngine, ids: list[int]) -> list[int]:
    """Greedy tokens from a cold prefill: the context first holds something unrelated."""
    run(engine, engine.tokenize("Unrelated."))
    tokens, done = run(engine, ids)
    assert done.prompt_tokens_evaluated == len(ids)
    return tokens


def test_a_prefix_restored_from_disk_after_a_restart_gives_the_cold_tokens(
    tmp_path: Path, cold: LlamaCppEngine
) -> None:
    first = serial(cache(tmp_path / "kv"))
    ids = prompt(first, "Where does parcel 12 go?")
    assert len(ids) > 4 * BLOCK
    run(first, ids)
    first.close()  # the server stops: its queued disk writes finish
    again = serial(cache(tmp_path / "kv"))  # a new process's engine: nothing in its context
    follow_up = prompt(again, "Where does parcel 30 go?")
    tokens, done = run(again, follow_up)
    stats = again.prefix_cache_stats()
    again.close()
    assert stats is not None and stats["disk"]["hits"] == 1, stats
    cached = done.prompt_tokens - done.prompt_tokens_evaluated
    assert cached >= (len(ids) // BLOCK) * BLOCK - BLOCK, (cached, len(ids))
    assert tokens == reference(cold, follow_up)


def test_another_conversation_in_the_context_costs_a_ram_restore_not_a_prefill(cold: LlamaCppEngine) -> None:
    engine = serial(cache(None))
    a = prompt(engine, "Where does parcel 3 go?")
    run(engine, a)
    other = prompt(engine, "Summarize the rules.", system="You sort parcels. " * 120)
    run(engine, other)  # takes the context (and is cached too)
    a2 = prompt(engine, "Where does parcel 4 go?")
    tokens, done = run(engine, a2)
    stats = engine.prefix_cache_stats()
    engine.close()
    assert stats is not None and stats["ram"]["hits"] == 1 and "disk" not in stats
    assert done.prompt_tokens_evaluated < BLOCK + 16
    assert tokens == reference(cold, a2)


def test_state_saved_for_another_context_size_or_torn_on_disk_is_never_restored(
    tmp_path: Path, cold: LlamaCppEngine
) -> None:
    root = tmp_path / "kv"
    first = serial(cache(root))
    ids = prompt(first, "Where does parcel 7 go?")
    run(first, ids)
    first.close()
    (path,) = root.glob("*.kv")
    other = serial(cache(root, n_ctx=4096), n_ctx=4096)  # another tag: the file is someone else's
    _, done = run(other, ids)
    other.close()
    assert done.prompt_tokens_evaluated == len(ids)
    with path.open("r+b") as f:  # a writer killed mid-write, as a file
        f.truncate(path.stat().st_size // 2)
    torn = serial(cache(root))
    assert not path.exists()  # found torn when the directory is read, and removed
    tokens, done = run(torn, ids)
    torn.close()
    assert done.prompt_tokens_evaluated == len(ids)
    assert tokens == reference(cold, ids)


def traced(engine: Engine, ids: list[int]) -> tuple[list[int], Done, list[npt.NDArray[np.single]]]:
    """Greedy tokens, the ``Done`` and every step's logits row."""
    rows: list[npt.NDArray[np.single]] = []

    def keep(_: npt.NDArray[np.intc], row: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        rows.append(row.copy())
        return row

    out, done = generated(engine, ids, GREEDY, logits_processor=keep)
    return out, done, rows


def test_a_batched_slot_restores_another_slots_evicted_prefix() -> None:
    """Greedy tokens as a cold prefill's, up to a near-tie: a restored prefix evaluates its tail as
    one batch where the cold prefill evaluated it with the rest, and llama.cpp's kernels round a
    batch differently (the batched parity tests bound that noise the same way)."""
    model = BatchedLlama(
        bundled_model_path(), n_seq=2, n_ctx=2048, n_threads=THREADS, prefix_cache=cache(None, "batched")
    )
    plain = BatchedLlama(bundled_model_path(), n_seq=2, n_ctx=2048, n_threads=THREADS)
    try:
        first, second = model.slots()
        a = prompt(first, "Where does parcel 21 go?")
        run(first, a)
        run(first, prompt(first, "Summarize the rules.", system="You sort parcels. " * 120))  # evicts a
        a2 = prompt(second, "Where does parcel 22 go?")
        tokens, done, rows = traced(second, a2)
        stats = second.prefix_cache_stats()
        expected, cold_done, cold_rows = traced(plain.slots()[1], a2)
    finally:
        for slot in [*model.slots(), *plain.slots()]:
            slot.close()
    assert stats is not None and stats["ram"]["hits"] == 1, stats
    assert done.prompt_tokens_evaluated < BLOCK + 16 and cold_done.prompt_tokens_evaluated == len(a2)
    k = next((k for k, (x, y) in enumerate(zip(expected, tokens, strict=False)) if x != y), None)
    for j in range(len(rows) if k is None else k):
        finite = np.isfinite(cold_rows[j])
        assert np.abs(cold_rows[j][finite] - rows[j][finite]).max() < NOISE, j
    if k is not None:
        top = np.sort(cold_rows[k][np.isfinite(cold_rows[k])])[::-1]
        assert top[0] - top[1] < NOISE, (k, top[:2])


def test_serve_restart_keeps_a_long_prompt_over_http(tmp_path: Path) -> None:
    """``tether serve --prefix-cache-dir``: the same long system prompt after a restart is restored
    from disk; usage, /health and /metrics say so."""
    root = tmp_path / "kv"
    args = ("--ctx", "2048", "--prefix-cache-dir", str(root), "--embedding-model", "off")
    body = {
        "model": "smollm2-135m-instruct",
        "max_tokens": 8,
        "temperature": 0,
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Where does parcel 5 go?"},
        ],
    }
    with tether_serve(*args) as (base, _):
        r = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=300)
        assert r.status_code == 200, r.text
        cold_cached = r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cold_cached == 0 and len(list(root.glob("*.kv"))) == 1
    body["messages"][1]["content"] = "And parcel 6?"  # type: ignore[index]
    with tether_serve(*args) as (base, _):
        r = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=300)
        assert r.status_code == 200, r.text
        usage = r.json()["usage"]
        health = httpx.get(f"{base}/health").json()["prefix_cache"]
        metrics = httpx.get(f"{base}/metrics").text
    assert usage["prompt_tokens_details"]["cached_tokens"] >= usage["prompt_tokens"] - BLOCK - 32, usage
    assert health["disk"]["hits"] == 1 and health["restored_tokens"] >= 4 * BLOCK, health
    assert 'tether_prefix_cache_hits_total{tier="disk"} 1.0' in metrics
