"""MLX vs llama.cpp on the same model: greedy tokens, layer-0 names, strict tool calls.

The converted float32 weights are exactly llama.cpp's dequantized Q4_1/Q8_0 values, so the two
engines differ only in arithmetic: llama.cpp quantizes activations to 8 bits inside its Q4_1/Q8_0
dot products, MLX multiplies in float32. That moves logits by up to ~0.8 (correlation > 0.998), so
greedy decoding agrees token for token until llama.cpp's top-two margin at some step falls inside
that noise. For the prompts below that never happens in the first ``N_GREEDY`` tokens; elsewhere
divergence is only allowed at such a near-tie (``NOISE`` bounds the logit gap).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from tests.mlx._util import greedy, margin
from tether.chat import Message
from tether.engine.base import Engine, SamplingParams, Token
from tether.engine.llama_cpp import LlamaCppEngine
from tether.engine.prompt import build_prompt
from tether.engine.template import ChatTemplate
from tether.evals.name_fix import CASES, FEW_SHOT, PREFILL, TOOLS, run_name_fix
from tether.grammar.formats import get_format
from tether.grammar.plan import Mode
from tether.grammar.provider import ConstraintProvider
from tether.grammar.spec import ReplySpec

if TYPE_CHECKING:
    from tether.engine.mlx import MlxEngine

N_GREEDY = 24
NOISE = 1.5  # bound on |logit difference| between the engines (measured max ~0.8)
FIRM = ("Write a haiku about rain.", "List three prime numbers.", "Explain recursion to a child.")
OPEN = ("What is the capital of France?", "Give me a tip for writing tests.")


def _prompt(engine: Engine, question: str) -> list[int]:
    return engine.tokenize(
        ChatTemplate(engine.info.chat_template).render([{"role": "user", "content": question}])
    )


def _trace(engine: Engine, ids: Sequence[int], n: int) -> tuple[list[int], list[npt.NDArray[np.float32]]]:
    logits: list[npt.NDArray[np.float32]] = []

    def record(_ids: npt.NDArray[np.intc], row: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        logits.append(row.copy())
        return row

    params = SamplingParams(max_tokens=n, temperature=0.0)
    tokens = [ev.id for ev in engine.generate(ids, params, logits_processor=record) if isinstance(ev, Token)]
    return [t for t in tokens if t >= 0], logits


def test_greedy_tokens_match_llama_cpp(mlx_engine: MlxEngine, llama_engine: LlamaCppEngine) -> None:
    for question in FIRM + OPEN:
        ids = _prompt(llama_engine, question)
        assert _prompt(mlx_engine, question) == ids
        ref, ref_logits = _trace(llama_engine, ids, N_GREEDY)
        got, got_logits = _trace(mlx_engine, ids, N_GREEDY)
        agree = next(
            (k for k, (a, b) in enumerate(zip(ref, got, strict=False)) if a != b), min(len(ref), len(got))
        )
        for k in range(min(agree + 1, len(ref_logits), len(got_logits))):  # same context up to the divergence
            a, b = ref_logits[k], got_logits[k]
            assert np.abs((a - a.mean()) - (b - b.mean())).max() < NOISE, (question, k)
            assert np.corrcoef(a, b)[0, 1] > 0.995, (question, k)
        if question in FIRM:
            assert got == ref, (question, agree)  # N_GREEDY tokens (or up to EOS) identical
        elif agree < min(len(ref), len(got)):
            assert margin(ref_logits[agree]) < NOISE, (question, agree)  # only a near-tie may flip


def _resolved_names(engine: Engine, mode: Mode) -> tuple[list[str], list[float]]:
    """Per case: the name layer 0 lets the model write, and the margin of its first masked choice."""
    template = ChatTemplate(engine.info.chat_template)
    fmt, provider = get_format("generic"), ConstraintProvider(engine)
    names: list[str] = []
    margins: list[float] = []
    for case in CASES:
        prompt = build_prompt(template, fmt, (Message("system", FEW_SHOT), Message("user", case)), TOOLS)
        ids = engine.tokenize(prompt + PREFILL)
        constraint = provider.constraint(
            ReplySpec(fmt, tuple(TOOLS), mode, required=True), prompt_len=len(ids), primed=PREFILL.encode()
        )
        seen: list[float] = []

        def recorded(
            ids: npt.NDArray[np.intc],
            row: npt.NDArray[np.float32],
            c: object = constraint,
            m: list[float] = seen,
        ) -> npt.NDArray[np.float32]:
            out: npt.NDArray[np.float32] = c(ids, row)  # type: ignore[operator]
            if not m:
                m.append(margin(out))
            return out

        text = ""
        gen = engine.generate(ids, SamplingParams(max_tokens=12, temperature=0.0), logits_processor=recorded)
        for ev in gen:
            text += ev.text if isinstance(ev, Token) else ""
            if '"' in text:  # the name slot closed: the naming decision is made
                break
        gen.close()
        names.append(text.split('"')[0])
        margins.append(seen[0] if seen else float("inf"))
    return names, margins


def test_layer0_resolves_the_same_names_per_case(mlx_engine: MlxEngine, llama_engine: LlamaCppEngine) -> None:
    assert len(CASES) >= 50
    offered = {t.name for t in TOOLS}
    (ref, ref_margins), (got, _) = (
        _resolved_names(llama_engine, "names"),
        _resolved_names(mlx_engine, "names"),
    )
    assert set(ref) <= offered and set(got) <= offered  # 0 non-offered names on both engines
    # The same name on every case, except where the reference's first choice is a near-tie (as for greedy).
    differ = [k for k, (a, b) in enumerate(zip(ref, got, strict=True)) if a != b]
    assert all(ref_margins[k] < NOISE for k in differ), [(k, ref[k], got[k], ref_margins[k]) for k in differ]
    assert len(differ) <= 2, differ


def test_strict_mode_counts_match(mlx_engine: MlxEngine, llama_engine: LlamaCppEngine) -> None:
    """Strict mode's name slot is the same automaton as names mode (checked per case above); here the
    argument grammar runs end to end on a slice of the set, through ``run_name_fix`` itself."""
    cases = CASES[::10]
    ref = run_name_fix(llama_engine, ("strict",), cases=cases, max_tokens=40)["strict"]
    got = run_name_fix(mlx_engine, ("strict",), cases=cases, max_tokens=40)["strict"]
    for res in (ref, got):
        assert res.cases == len(cases) and res.calls >= len(cases)
        assert res.not_offered == 0 and res.invalid_args == 0, res
    assert (got.calls, got.no_call) == (ref.calls, ref.no_call)


def test_idle_constraint_changes_no_token(mlx_engine: MlxEngine) -> None:
    """SmolLM2 never writes <tool_call>: a Hermes constraint stays idle on MLX too."""
    provider = ConstraintProvider(mlx_engine)
    ids = _prompt(mlx_engine, "Write a haiku about rain.")
    plain = greedy(mlx_engine, ids, 12)
    constraint = provider.constraint(
        ReplySpec(get_format("hermes"), tuple(TOOLS), "strict"), prompt_len=len(ids)
    )
    params = SamplingParams(max_tokens=12, temperature=0.0)
    guarded = [
        ev.id for ev in mlx_engine.generate(ids, params, logits_processor=constraint) if isinstance(ev, Token)
    ]
    assert guarded == plain and constraint.stats.masked_steps == 0
