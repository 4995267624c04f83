"""Layer 0 on the bundled model: prose parity and the name-fix set."""

from __future__ import annotations

import pytest

from tether.engine.base import SamplingParams, Token
from tether.engine.llama_cpp import LlamaCppEngine
from tether.engine.template import ChatTemplate
from tether.evals.name_fix import CASES, TOOLS, run_name_fix
from tether.grammar.formats import get_format
from tether.grammar.provider import ConstraintProvider


def test_prose_is_token_identical_with_constraint_attached(smollm: LlamaCppEngine) -> None:
    """SmolLM2 never writes <tool_call>, so a Hermes constraint stays idle and must not change a token."""
    template = ChatTemplate(smollm.info.chat_template)
    provider = ConstraintProvider(smollm)
    params = SamplingParams(max_tokens=40, temperature=0.0)
    for question in ("What is a tool?", "Write a haiku about rain.", "List three prime numbers."):
        ids = smollm.tokenize(template.render([{"role": "user", "content": question}]))
        plain = [ev.id for ev in smollm.generate(ids, params) if isinstance(ev, Token)]
        for mode in ("names", "strict"):
            c = provider.constraint(get_format("hermes"), TOOLS, mode, prompt_len=len(ids))  # type: ignore[arg-type]
            guarded = [
                ev.id for ev in smollm.generate(ids, params, logits_processor=c) if isinstance(ev, Token)
            ]
            assert guarded == plain, (question, mode)
            assert c.stats.masked_steps == 0


@pytest.mark.timeout(1800)  # 150 generations: ~2 min on an idle machine, much more on a shared one
def test_name_fix_set(smollm: LlamaCppEngine) -> None:
    assert len(CASES) >= 50
    results = run_name_fix(smollm)
    off, names, strict = results["off"], results["names"], results["strict"]
    # The problem is real: unconstrained, the model copies the few-shot harness names.
    assert off.not_offered / max(off.calls, 1) > 0.2, off
    # Layer 0 makes them unsampleable.
    assert names.calls >= 45 and names.not_offered == 0, names
    assert strict.calls >= 45 and strict.not_offered == 0, strict
    # Strict mode: every call validates against its tool's schema.
    assert strict.invalid_args == 0, strict
