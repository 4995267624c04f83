"""Layer-0 cost on the bundled model, side by side in one run.

Decode tok/s for the same reply length: unconstrained, names mode, strict mode, strict with grounded
arguments (the ``strict`` preset's layer 0), a structured reply (``response_format``: the whole reply
held to the schema from its first token), and llama.cpp's own GBNF grammar from the same JSON schema
(``LlamaGrammar.from_json_schema``). Then what compiling a structured reply's schema costs the first
time and the second (cached per schema), mask build time for 10 / 100 / 1,000 offered tools and the
memory held by cached masks.
Usage: .venv/bin/python -m benchmarks.bench_constraint [--tokens 120] [--rounds 8]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import string
import time
from typing import Any

import llama_cpp
import numpy as np

from tether.chat import Message
from tether.engine.base import SamplingParams, Token
from tether.engine.llama_cpp import LlamaCppEngine
from tether.engine.locate import bundled_model_path
from tether.engine.prompt import build_prompt
from tether.engine.template import ChatTemplate
from tether.grammar.formats import get_format
from tether.grammar.formats.base import ToolSpec
from tether.grammar.provider import ConstraintProvider
from tether.grammar.spec import GroundingSpec, JsonSpec, ReplySpec
from tether.turns.layer0 import grounding_source

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "pattern": {"type": "string"},
        "max_results": {"type": "integer"},
        "case_sensitive": {"type": "boolean"},
        "mode": {"type": "string", "enum": ["fast", "full"]},
    },
    "required": ["path", "pattern", "max_results", "case_sensitive", "mode"],
}
TOOLS = [ToolSpec("search_files", "Search files for a pattern", SCHEMA)]


class Timed:
    """Wraps a logits processor and accumulates the time spent inside it (its direct cost)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.seconds = 0.0
        self.calls = 0

    def __call__(self, ids: Any, logits: Any) -> Any:
        start = time.perf_counter()
        out = self.inner(ids, logits)
        self.seconds += time.perf_counter() - start
        self.calls += 1
        return out


def timed(engine: LlamaCppEngine, ids: list[int], tokens: int, processor: Any = None) -> float:
    """Decode tok/s over the tokens after the first (prefill excluded)."""
    first = None
    n = 0
    params = SamplingParams(max_tokens=tokens, temperature=0)
    for ev in engine.generate(ids, params, logits_processor=processor):  # Timed wraps a constraint
        if isinstance(ev, Token) and ev.id >= 0:
            n += 1
            if first is None:
                first = time.perf_counter()
    end = time.perf_counter()
    assert first is not None
    return (n - 1) / (end - first) if n > 1 else 0.0


def gbnf_rate(engine: LlamaCppEngine, ids: list[int], tokens: int) -> float:
    grammar = llama_cpp.LlamaGrammar.from_json_schema(json.dumps(SCHEMA), verbose=False)
    llm = engine._llm
    first = None
    n = 0
    for tok in llm.generate(ids, temp=0.0, grammar=grammar):
        n += 1
        if first is None:
            first = time.perf_counter()
        if n >= tokens or tok in engine.info.eos_token_ids:
            break
    end = time.perf_counter()
    assert first is not None
    return (n - 1) / (end - first)


def mask_build(engine: LlamaCppEngine, count: int) -> tuple[float, int, int]:
    rng = random.Random(count)
    words = [
        "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 8))) for _ in range(400)
    ]
    names = sorted({f"{rng.choice(words)}_{rng.choice(words)}" for _ in range(count * 2)})[:count]
    tools = [ToolSpec(n) for n in names]
    provider = ConstraintProvider(engine)
    _ = provider.vocab
    fmt = get_format("hermes")
    start = time.perf_counter()
    plan, masks = provider.plan(ReplySpec(fmt, tuple(tools), "names"))
    # Build every mask a name slot can visit for one name (as the first request offering the set does).
    state = plan.automaton.start()
    for b in b'{"name": "' + names[0].encode() + b'"':
        masks.mask(state)
        state = plan.automaton.step(state, b)
    return time.perf_counter() - start, masks.computed, masks.nbytes()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=120)
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    engine = LlamaCppEngine(bundled_model_path(), n_ctx=4096)
    template = ChatTemplate(engine.info.chat_template)
    fmt = get_format("generic")
    msgs = (
        Message(
            "user", "Search the src folder for TODO markers, case sensitive, at most 50 results, full mode."
        ),
    )
    ids = engine.tokenize(build_prompt(template, fmt, msgs, TOOLS))

    def processor(mode: str) -> Any:
        if mode == "reply":  # the budget is far: it never closes the value early here
            return engine.compile(JsonSpec(SCHEMA, budget=args.tokens * 4), prompt_len=len(ids))
        constrain = "strict" if mode == "grounded" else mode
        # The strict preset's layer 0 grounds values: the grounding index is built per request, so it is timed too.
        grounding = GroundingSpec(grounding_source(msgs), b'"arguments":') if mode == "grounded" else None
        spec = ReplySpec(fmt, tuple(TOOLS), constrain, required=True, grounding=grounding)  # type: ignore[arg-type]
        return engine.compile(spec, prompt_len=len(ids))

    order = ["off", "names", "strict", "grounded", "reply", "gbnf"]
    rates: dict[str, list[float]] = {mode: [] for mode in order}
    cost: dict[str, list[float]] = {mode: [] for mode in order[1:-1]}
    for mode in cost:  # warm the mask caches (first request pays them)
        timed(engine, ids, args.tokens, processor(mode))
    for r in range(args.rounds):
        # Rotate the order every round so a load spike does not always hit the same mode.
        at = r % len(order)
        for mode in order[at:] + order[:at]:
            if mode == "off":
                rates["off"].append(timed(engine, ids, args.tokens))
            elif mode == "gbnf":
                rates["gbnf"].append(gbnf_rate(engine, ids, args.tokens))
            else:
                start = time.perf_counter()
                c = Timed(processor(mode))
                built = time.perf_counter() - start
                rates[mode].append(timed(engine, ids, args.tokens, c))
                cost[mode].append((c.seconds + built) / max(c.calls, 1))
    base = statistics.median(rates["off"])
    per_token = 1.0 / base
    print(f"{'mode':<10}{'tok/s':>10}{'ratio':>10}{'processor ms/token':>20}{'cost ratio':>12}")
    for mode, values in rates.items():
        med = statistics.median(values)
        extra = ""
        if mode in cost:
            ms = statistics.median(cost[mode])
            # Decode speed if the processor's own time were the only difference: the load-independent ratio.
            extra = f"{ms * 1000:>20.3f}{per_token / (per_token + ms):>12.3f}"
        print(f"{mode:<10}{med:>10.1f}{med / base:>10.3f}{extra}")
    fresh = {**SCHEMA, "properties": {**SCHEMA["properties"], "note": {"type": "string"}}}
    for attempt in ("first", "second"):
        start = time.perf_counter()
        c = engine.compile(JsonSpec(fresh), prompt_len=len(ids))
        c(np.asarray(ids, dtype=np.intc), np.zeros(engine.info.n_vocab, dtype=np.single))  # first mask
        print(
            f"structured reply, a new schema, {attempt} request: {(time.perf_counter() - start) * 1000:.1f} ms"
        )
    for count in (10, 100, 1000):
        seconds, states, nbytes = mask_build(engine, count)
        print(
            f"mask build: {count:>5} tools  {seconds * 1000:8.1f} ms  {states} states  {nbytes / 1024:.0f} KiB"
        )


if __name__ == "__main__":
    main()
