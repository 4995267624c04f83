"""Fitting the call-or-answer decision's weights on BFCL's development split.

For each item of the development split (never the published or ``live_*`` items) this records
the model's own log-odds of a call at the decision point (greedy, the prior held at 0), the best
tool's lexical coverage and name match, and its embedding similarity when an embedding model is
given; the label is whether BFCL expects a call (every category but ``irrelevance``). A logistic
regression over those features gives :class:`~tether.selection.decision.DecisionModel`'s weights
(the prior is the fit's evidence divided by the log-odds weight), printed with the AUC of the
model's log-odds alone, of the fit in sample, and of the fit under 5-fold cross-validation.

    python -m tether.evals.decision_fit --limit 60 --seed 3
"""

from __future__ import annotations

import argparse
import json
import math
import random
from collections.abc import Generator, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt
import typer

from tether.chat import Message
from tether.engine.base import Decides, Engine, SamplingParams
from tether.engine.prompt import prompt_ids
from tether.engine.template import ChatTemplate
from tether.grammar.formats import detect_format, get_format
from tether.grammar.formats.base import ToolCallFormat, ToolSpec
from tether.grammar.spec import ReplySpec
from tether.grammar.steering import Steering
from tether.selection.decision import DecisionModel, relevance
from tether.selection.relevance import ToolRelevance
from tether.selection.semantic import SemanticRelevance

__all__ = ["Row", "auc", "collect", "fit", "main"]

CATEGORIES = ("simple_python", "multiple", "parallel", "irrelevance")


@dataclass(frozen=True)
class Row:
    """One item: whether a call is expected, the model's log-odds, and every tool's relevance."""

    item: str
    label: bool
    log_odds: float
    tools: tuple[ToolRelevance, ...]


def decision_log_odds(
    engine: Engine,
    template: ChatTemplate,
    fmt: ToolCallFormat,
    messages: Sequence[Message],
    tools: Sequence[ToolSpec],
) -> float | None:
    """The model's log-odds of a call where the reply becomes a call or an answer (None: never reached)."""
    ids = prompt_ids(engine, template, fmt, messages, tools)
    spec = ReplySpec(fmt, tuple(tools), "names", steering=Steering(call_prior=0.0, decide=True))
    constraint = engine.compile(spec, prompt_len=len(ids))
    if not isinstance(constraint, Decides):
        raise ValueError(
            f"{engine.info.backend} applies no call-or-answer decision: fit on an in-process engine"
        )
    decision = None
    events = engine.generate(ids, SamplingParams(max_tokens=24, temperature=0.0), constraint=constraint)
    for _ in events:
        decision = constraint.decision
        if decision is not None:
            break
    if isinstance(events, Generator):
        events.close()
    return decision.log_odds if decision is not None else None


def collect(engine: Engine, *, limit: int, seed: int, semantic: SemanticRelevance | None) -> list[Row]:
    """The development split's rows, ``limit`` items per category."""
    from tether.evals import bfcl

    template = ChatTemplate(
        engine.info.chat_template, bos_token=engine.info.bos_token, eos_token=engine.info.eos_token
    )
    fmt = get_format(detect_format(engine.info.chat_template))
    rows: list[Row] = []
    for category in CATEGORIES:
        for item in bfcl.select(bfcl.load_items(category), limit, seed, "dev"):
            messages = [Message(m["role"], str(m["content"])) for m in item.messages]
            tools = [ToolSpec.from_openai(t) for t in item.tools]
            lo = decision_log_odds(engine, template, fmt, messages, tools)
            if lo is None or not math.isfinite(lo):
                continue
            ranked = relevance(messages, tools, semantic)
            rows.append(Row(item.id, category != "irrelevance", lo, tuple(ranked)))
    return rows


def auc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """The probability that a random positive scores above a random negative (ties count half)."""
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    if not pos or not neg:
        return float("nan")
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def _features(rows: Sequence[Row], model: DecisionModel, semantic: bool) -> npt.NDArray[np.float64]:
    """Per row: log-odds, then the relevance of the tool the current weights find strongest."""
    out = []
    for row in rows:
        best = max(row.tools, key=model.evidence)
        feats = [row.log_odds, best.coverage, best.name] + ([best.semantic] if semantic else [])
        out.append(feats)
    return np.asarray(out, dtype=np.float64)


def _logistic(
    x: npt.NDArray[np.float64], y: npt.NDArray[np.float64], l2: float = 1e-2
) -> npt.NDArray[np.float64]:
    """Weights (last: the intercept) by Newton's method, a light L2 penalty on the slopes."""
    xb = np.hstack([x, np.ones((len(x), 1))])
    w = np.zeros(xb.shape[1])
    penalty = np.full(xb.shape[1], l2)
    penalty[-1] = 0.0
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-(xb @ w)))
        grad = xb.T @ (p - y) + penalty * w
        hess = (xb * (p * (1 - p))[:, None]).T @ xb + np.diag(penalty)
        step = np.linalg.solve(hess, grad)
        w -= step
        if float(np.abs(step).max()) < 1e-8:
            break
    return w


def fit(rows: Sequence[Row], *, semantic: bool, base: DecisionModel | None = None) -> DecisionModel:
    """The decision's weights fitted on ``rows`` (the strongest tool re-chosen under each new fit)."""
    model = replace(base or DecisionModel(), semantic_weight=0.0)
    y = np.asarray([r.label for r in rows], dtype=np.float64)
    for _ in range(4):
        w = _logistic(_features(rows, model, semantic), y)
        model = replace(
            model,
            log_odds_weight=float(w[0]),
            coverage_weight=float(w[1]),
            name_weight=float(w[2]),
            semantic_weight=float(w[3]) if semantic else 0.0,
            offset=float(w[-1]),
        )
    return model


def _score(model: DecisionModel, row: Row) -> float:
    return model.log_odds_weight * row.log_odds + max(model.evidence(r) for r in row.tools) + model.offset


def cross_validated_auc(rows: Sequence[Row], *, semantic: bool, folds: int = 5, seed: int = 0) -> float:
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    scores = [0.0] * len(rows)
    for k in range(folds):
        held = set(order[k::folds])
        model = fit([r for i, r in enumerate(rows) if i not in held], semantic=semantic)
        for i in held:
            scores[i] = _score(model, rows[i])
    return auc(scores, [r.label for r in rows])


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--limit", type=int, default=60, help="development items per category")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--model", help="GGUF model (default: the bundled one)")
    parser.add_argument("--ctx", type=int, default=4096)
    parser.add_argument("--no-embeddings", action="store_true", help="fit the lexical signal alone")
    parser.add_argument("--rows", help="write the collected rows to this JSON-lines file")
    args = parser.parse_args(argv)

    from tether.engine.llama_cpp import LlamaCppEngine
    from tether.engine.locate import bundled_model_path

    engine = LlamaCppEngine(args.model or bundled_model_path(), n_ctx=args.ctx)
    semantic = None if args.no_embeddings else _semantic()
    rows = collect(engine, limit=args.limit, seed=args.seed, semantic=semantic)
    if args.rows:
        with open(args.rows, "w", encoding="utf-8") as out:
            for r in rows:
                out.write(
                    json.dumps(
                        {
                            "item": r.item,
                            "label": r.label,
                            "log_odds": r.log_odds,
                            "tools": [vars(t) for t in r.tools],
                        }
                    )
                    + "\n"
                )
    labels = [r.label for r in rows]
    typer.echo(f"rows: {len(rows)} ({sum(labels)} expect a call)")
    typer.echo(f"AUC, the model's log-odds alone: {auc([r.log_odds for r in rows], labels):.3f}")
    for use in (False, True) if semantic is not None else (False,):
        model = fit(rows, semantic=use)
        name = "lexical + embeddings" if use else "lexical"
        fitted = auc([_score(model, r) for r in rows], labels)
        cv = cross_validated_auc(rows, semantic=use)
        correct = sum((_score(model, r) >= 0) == r.label for r in rows)
        typer.echo(f"{name}: AUC {fitted:.3f} in sample, {cv:.3f} 5-fold; accuracy {correct}/{len(rows)}")
        typer.echo(
            f"  log_odds_weight={model.log_odds_weight:.3f} coverage_weight={model.coverage_weight:.3f} "
            f"name_weight={model.name_weight:.3f} semantic_weight={model.semantic_weight:.3f} offset={model.offset:.3f}"
        )
    engine.close()


def _semantic() -> SemanticRelevance:
    from tether.engine.embedding import LlamaEmbedder
    from tether.engine.locate import bundled_embedding_model_path

    return SemanticRelevance(LlamaEmbedder(bundled_embedding_model_path()))


if __name__ == "__main__":
    main()
