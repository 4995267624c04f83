"""The suites ``tether eval --suite`` knows, as lists of items that evaluate themselves.

* ``bfcl:<categories>`` — BFCL's categories (:mod:`tether.evals.bfcl`), e.g.
  ``bfcl:simple,multiple,parallel,irrelevance``, ``bfcl:live`` or ``bfcl:multi_turn_base``
  (multi-turn entries run on BFCL's backends, :mod:`tether.evals.bfcl_multi`);
* ``scenarios[:<tiers>]`` — the bundled multi-step scenarios
  (:mod:`tether.evals.scenario_spec`), all tiers or e.g. ``scenarios:recovery``.

``--limit N`` with ``--seed S`` keeps a fixed seeded subset of N items per
category (BFCL) or per tier (scenarios), in the suite's own order; categories are
interleaved round-robin, so a run stopped early has covered each one evenly.
``--split dev|test`` keeps BFCL's tuning items apart from the published ones.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from tether.errors import ConfigError
from tether.evals import bfcl, bfcl_multi
from tether.evals.client import ChatClient, Reply
from tether.evals.episode import EpisodeResult, run_episode
from tether.evals.records import ItemRecord
from tether.evals.scenario_spec import TIERS, Scenario, ToolSpecModel, load_suite

__all__ = [
    "BfclEvalItem",
    "BfclMultiTurnEvalItem",
    "EvalItem",
    "RunOptions",
    "ScenarioEvalItem",
    "load_items",
    "suite_name",
]


@dataclass(frozen=True)
class RunOptions:
    """Sampling settings shared by every request of a run (the same for every preset)."""

    temperature: float = 0.0
    max_tokens: int | None = None


class EvalItem(Protocol):
    """One thing to evaluate; ``evaluate`` fills everything but the run bookkeeping fields."""

    @property
    def suite(self) -> str: ...

    @property
    def category(self) -> str: ...

    @property
    def item_id(self) -> str: ...

    async def evaluate(
        self, client: ChatClient, preset: str, seed: int, options: RunOptions
    ) -> ItemRecord: ...


class _Entry(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def category(self) -> str: ...


class _OfBfcl:
    """An eval item's category and id, from the BFCL entry it holds."""

    item: _Entry

    @property
    def category(self) -> str:
        return self.item.category

    @property
    def item_id(self) -> str:
        return self.item.id


@dataclass(frozen=True)
class BfclEvalItem(_OfBfcl):
    item: bfcl.BfclItem
    suite: str = "bfcl"

    async def evaluate(self, client: ChatClient, preset: str, seed: int, options: RunOptions) -> ItemRecord:
        reply = await client.chat(
            list(self.item.messages),
            list(self.item.tools),
            preset,
            temperature=options.temperature,
            seed=seed,
            max_tokens=options.max_tokens,
        )
        message = reply.message
        if reply.error:  # BFCL keeps the error text as the model's result and judges that
            message = {"role": "assistant", "content": f"Error during inference: {reply.error}"}
        score = bfcl.score_message(self.item, message)
        return replace(
            _record(self, preset, reply),
            correct=score.correct,
            error=reply.error or score.error,
            error_type="inference_error" if reply.error else score.error_type,
            turns=1,
            tool_calls=len(reply.tool_calls),
            latency_s=round(reply.latency_s, 3),
            interventions=_kinds(reply.interventions),
            notes=[f"{n.get('kind')}: {n.get('detail')}" for n in reply.interventions],
            output={"content": reply.text or None, "tool_calls": _calls(reply.tool_calls)},
            prompt=excerpt(_last_user(self.item.messages)),
            expected=_bfcl_expected(self.item),
        )


@dataclass(frozen=True)
class BfclMultiTurnEvalItem(_OfBfcl):
    item: bfcl_multi.MultiTurnItem
    suite: str = "bfcl"

    async def evaluate(self, client: ChatClient, preset: str, seed: int, options: RunOptions) -> ItemRecord:
        backends = bfcl_multi.Backends(self.item)
        try:
            result = await bfcl_multi.run_multi_turn(
                client,
                self.item,
                preset,
                backends,
                temperature=options.temperature,
                seed=seed,
                max_tokens=options.max_tokens,
            )
            score = (
                bfcl.BfclScore(False, result.error, "inference_error")
                if result.error
                else bfcl_multi.score_multi_turn(
                    self.item, result.steps, backends.name, finished=not result.force_terminated
                )
            )
        finally:
            backends.close()
        return replace(
            _record(self, preset, result),
            correct=score.correct,
            error=score.error,
            error_type=score.error_type,
            turns=result.turns,
            tool_calls=result.tool_calls,
            tool_errors=result.tool_errors,
            latency_s=round(result.latency_s, 3),
            interventions=dict(result.interventions),
            output={"steps": result.steps},
            prompt=excerpt(_last_user(self.item.turns[0]) if self.item.turns else ""),
            expected={"calls per turn": [list(turn) for turn in self.item.answer]},
        )


@dataclass(frozen=True)
class ScenarioEvalItem:
    scenario: Scenario
    tier: str
    library: dict[str, ToolSpecModel]
    suite: str = "scenarios"

    @property
    def category(self) -> str:
        return self.tier

    @property
    def item_id(self) -> str:
        return self.scenario.id

    async def evaluate(self, client: ChatClient, preset: str, seed: int, options: RunOptions) -> ItemRecord:
        result = await run_episode(
            client,
            self.scenario,
            self.library,
            preset,
            temperature=options.temperature,
            seed=seed,
            max_tokens=options.max_tokens,
        )
        return replace(
            _record(self, preset, result),
            correct=result.passed,
            error="; ".join(result.failures)[:1000],
            error_type="request_failed" if result.error else ("failed_checks" if result.failures else ""),
            turns=result.turns,
            tool_calls=len(result.calls),
            tool_errors=result.tool_errors,
            compactions=result.compactions,
            interventions=dict(result.interventions),
            output=result.summary(),
            prompt=excerpt(self.scenario.prompt),
            expected={
                "reference calls": [
                    {"name": c.tool, "arguments": c.args} for c in self.scenario.reference.calls
                ],
                "answer": self.scenario.reference.answer,
            },
        )


PROMPT_CHARS = 300  # the prompt excerpt a record keeps


def excerpt(text: str, limit: int = PROMPT_CHARS) -> str:
    """``text`` on one line, cut to ``limit`` characters (an ellipsis marks the cut)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def _last_user(messages: Sequence[Mapping[str, Any]]) -> str:
    content = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), "")
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


def _bfcl_expected(item: bfcl.BfclItem) -> Any:
    """BFCL's accepted answers, or what the category asks for when it ships none."""
    if item.category == "live_relevance":
        return "any call"
    if "irrelevance" in item.category:
        return "no call"
    return list(item.answer) if item.answer is not None else None


def _record(
    item: EvalItem, preset: str, cost: Reply | EpisodeResult | bfcl_multi.MultiTurnResult
) -> ItemRecord:
    """The record of ``item`` under ``preset`` with what it cost; ``evaluate`` adds the outcome."""
    return ItemRecord(
        item.suite,
        item.category,
        item.item_id,
        preset,
        model_calls=cost.model_calls,
        retries=cost.retries,
        prompt_tokens=cost.prompt_tokens,
        completion_tokens=cost.completion_tokens,
        cached_tokens=cost.cached_tokens,
    )


def _kinds(notes: Sequence[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for note in notes:
        kind = str(note.get("kind"))
        out[kind] = out.get(kind, 0) + 1
    return out


def _calls(calls: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "name": (c.get("function") or {}).get("name"),
            "arguments": (c.get("function") or {}).get("arguments"),
        }
        for c in calls
    ]


def suite_name(spec: str) -> str:
    """A file-name-safe label for a suite spec: ``bfcl:simple,multiple`` → ``bfcl-simple-multiple``."""
    return "".join(ch if ch.isalnum() or ch in "_-" else "-" for ch in spec).strip("-")


def _subset(items: list[Any], limit: int | None, seed: int) -> list[Any]:
    if limit is None or limit >= len(items):
        return items
    picked = sorted(random.Random(seed).sample(range(len(items)), limit))
    return [items[i] for i in picked]


def _interleave(groups: Sequence[Sequence[EvalItem]]) -> list[EvalItem]:
    """Round-robin over categories, so a run stopped early has covered every category evenly."""
    out: list[EvalItem] = []
    for i in range(max((len(g) for g in groups), default=0)):
        out.extend(g[i] for g in groups if i < len(g))
    return out


def load_items(spec: str, *, limit: int | None = None, seed: int = 0, split: str = "all") -> list[EvalItem]:
    """The items of a ``--suite`` spec (``bfcl:...`` or ``scenarios[:tiers]``); ``split`` picks BFCL's
    published ``test`` items, the ``dev`` items tuning may use, or ``all``."""
    kind, _, rest = spec.partition(":")
    if kind == "bfcl":
        per_category: list[list[EvalItem]] = []
        for category in bfcl.parse_categories(rest):
            if category in bfcl.MULTI_TURN_CATEGORIES:
                entries = bfcl_multi.load_multi_turn_items(category)
                per_category.append(
                    [BfclMultiTurnEvalItem(i) for i in bfcl.select(entries, limit, seed, split)]
                )
            else:
                single = bfcl.select(bfcl.load_items(category), limit, seed, split)
                per_category.append([BfclEvalItem(i) for i in single])
        return _interleave(per_category)
    if kind == "scenarios":
        tiers = [t.strip() for t in rest.split(",") if t.strip()] or list(TIERS)
        unknown = [t for t in tiers if t not in TIERS]
        if unknown:
            raise ConfigError(f"unknown scenario tier(s) {unknown}; tiers: {', '.join(TIERS)}")
        per_tier: list[list[EvalItem]] = []
        for f in load_suite():
            if f.tier in tiers:
                library = dict(f.tools)
                per_tier.append(
                    _subset([ScenarioEvalItem(sc, f.tier, library) for sc in f.scenarios], limit, seed)
                )
        return _interleave(per_tier)
    raise ConfigError(f"unknown suite {spec!r}; use bfcl:<categories> or scenarios[:<tiers>]")
