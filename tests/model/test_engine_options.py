"""The llama.cpp engine on the bundled SmolLM2 with non-default load options: a q8_0 K cache, flash
attention on, the file read instead of mapped. Generation still works and the engine reports what it
loaded with (EngineInfo, llama.cpp's own parameters, the KV budget)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tether.engine.base import Done, SamplingParams, Token
from tether.engine.llama_cpp import LlamaCppEngine
from tether.engine.llama_options import LlamaOptions
from tether.engine.locate import bundled_model_path
from tether.engine.template import ChatTemplate
from tether.workflows.budget import FixedMemory, context_budget

OPTIONS = LlamaOptions(flash_attn=True, cache_type_k="q8_0", mmap=False)


def _threads() -> int | None:
    return int(os.environ.get("TETHER_TEST_THREADS", "0")) or None


@pytest.fixture(scope="module")
def tuned() -> Iterator[LlamaCppEngine]:
    engine = LlamaCppEngine(bundled_model_path(), n_ctx=1024, n_threads=_threads(), options=OPTIONS)
    yield engine
    engine.close()


def test_greedy_generation_still_produces_text(tuned: LlamaCppEngine) -> None:
    info = tuned.info
    template = ChatTemplate(info.chat_template, bos_token=info.bos_token, eos_token=info.eos_token)
    ids = tuned.tokenize(template.render([{"role": "user", "content": "Name three colors."}]))
    tokens: list[int] = []
    done: Done | None = None
    for event in tuned.generate(ids, SamplingParams(max_tokens=24, temperature=0.0)):
        if isinstance(event, Token):
            tokens.append(event.id)
        else:
            done = event
    assert done is not None and done.completion_tokens == len(tokens) > 3
    text = tuned.detokenize(tokens)
    assert sum(ch.isalpha() for ch in text) >= 5, text


def test_info_and_llama_cpp_report_the_chosen_options(tuned: LlamaCppEngine) -> None:
    import llama_cpp

    assert tuned.info.llama_options == OPTIONS
    llm = tuned._llm
    assert llm.context_params.type_k == llama_cpp.GGML_TYPE_Q8_0
    assert llm.context_params.type_v == llama_cpp.GGML_TYPE_F16
    assert llm.context_params.flash_attn_type == llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
    assert llm.model_params.load_mode == llama_cpp.LLAMA_LOAD_MODE_NONE  # no mmap, no mlock
    assert llm.model_params.n_gpu_layers == 0


def test_the_budget_prices_the_q8_0_k_cache(tuned: LlamaCppEngine) -> None:
    budget = context_budget(tuned.info, memory=FixedMemory(host=8 * 2**30))
    # 30 layers * 3 KV heads * (64 * 34/32 bytes of q8_0 K + 64 * 2 bytes of f16 V)
    assert (budget.cache_type_k, budget.cache_type_v) == ("q8_0", "f16")
    assert budget.kv_bytes_per_token == 30 * 3 * (68 + 128) and budget.budget_tokens == 1024


def test_gpu_layers_on_a_cpu_build_are_reported_as_not_in_effect() -> None:
    import llama_cpp

    engine = LlamaCppEngine(
        bundled_model_path(), n_ctx=256, n_threads=_threads(), options=LlamaOptions(gpu_layers=-1)
    )
    try:
        offloads = llama_cpp.llama_supports_gpu_offload()
        assert engine.info.llama_options == LlamaOptions(gpu_layers=-1 if offloads else 0)
    finally:
        engine.close()


def test_one_batched_sequence_gets_llama_cpps_own_attention_choice() -> None:
    """Not forced, the batched context lets llama.cpp pick attention as llama-server does, one slot as
    well as eight: on CPU it picks flash attention (~1.12x a one-stream decode here), so the default
    one-slot server's logits are exactly those of a context with flash attention forced on;
    ``--no-flash-attn`` gives the serial engine's attention back."""
    import llama_cpp
    import numpy as np

    from tether.engine.batch.context import BatchContext
    from tether.engine.llama_options import llama_kwargs

    llm = llama_cpp.Llama(str(bundled_model_path()), n_ctx=256, verbose=False, **llama_kwargs(LlamaOptions()))
    prompt = llm.tokenize(b"The capital of France is", add_bos=True)

    def last_logits(flash_attn: bool | None) -> np.ndarray:
        ctx = BatchContext(llm, n_ctx=256, n_seq=1, n_batch=64, flash_attn=flash_attn)
        try:
            rows = [ctx.add(t, i, 0, logits=i == len(prompt) - 1) for i, t in enumerate(prompt)]
            ctx.decode()
            return ctx.logits(rows[-1])
        finally:
            ctx.close()

    chosen, forced, off = last_logits(None), last_logits(True), last_logits(False)
    llm.eval(prompt)  # the Llama's own context, as the serial engine has it: flash attention off
    row = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
    serial = np.ctypeslib.as_array(row, shape=(llm.n_vocab(),)).copy()
    assert np.array_equal(chosen, forced)
    assert not np.array_equal(chosen, off)
    assert np.allclose(off, serial, atol=1e-3)
    assert int(np.argmax(chosen)) == int(np.argmax(off))  # the same answer, other kernels
    llm.close()
