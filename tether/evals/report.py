"""Aggregating records: per-category accuracy and cost, paired comparisons, terminal tables.

A *group* is a labelled list of records, usually one preset's JSONL file. Records
are paired across two groups by (category, item, run), so a comparison only uses
items both sides finished.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean, median

from rich.console import Console
from rich.table import Table

from tether.evals.records import ItemRecord
from tether.evals.stats import PairedDelta, paired_delta, wilson

__all__ = [
    "ALL",
    "CategoryStats",
    "compare_groups",
    "markdown_summary",
    "print_comparison",
    "print_summary",
    "summarize",
]

ALL = "all"


@dataclass(frozen=True)
class CategoryStats:
    """Accuracy with its Wilson interval and the mean cost per item for one category (or ``all``)."""

    category: str
    n: int
    correct: int
    low: float
    high: float
    model_calls: float
    retries: float
    prompt_tokens: float
    completion_tokens: float
    cached_tokens: float
    latency_s: float
    latency_p50: float
    tool_errors: float
    compactions: float
    error_types: tuple[tuple[str, int], ...]

    @property
    def accuracy(self) -> float:
        return self.correct / self.n if self.n else 0.0

    def cost_cells(self) -> dict[str, str]:
        """The mean cost per item, formatted, by column name (terminal, Markdown and HTML tables)."""
        return {
            "items": str(self.n),
            "model calls": f"{self.model_calls:.2f}",
            "retries": f"{self.retries:.2f}",
            "prompt tok": f"{self.prompt_tokens:.0f}",
            "cached tok": f"{self.cached_tokens:.0f}",
            "completion tok": f"{self.completion_tokens:.0f}",
            "latency s (mean)": f"{self.latency_s:.2f}",
            "latency s (p50)": f"{self.latency_p50:.2f}",
            "tool errors": f"{self.tool_errors:.2f}",
            "compactions": f"{self.compactions:.2f}",
        }


def _stats(category: str, records: Sequence[ItemRecord]) -> CategoryStats:
    n = len(records)
    k = sum(r.correct for r in records)
    low, high = wilson(k, n)

    def mean(values: Iterable[float]) -> float:
        vals = list(values)
        return fmean(vals) if vals else 0.0

    errors = Counter(r.error_type or "unknown" for r in records if not r.correct)
    return CategoryStats(
        category=category,
        n=n,
        correct=k,
        low=low,
        high=high,
        model_calls=mean(r.model_calls for r in records),
        retries=mean(r.retries for r in records),
        prompt_tokens=mean(r.prompt_tokens for r in records),
        completion_tokens=mean(r.completion_tokens for r in records),
        cached_tokens=mean(r.cached_tokens for r in records),
        latency_s=mean(r.latency_s for r in records),
        latency_p50=median([r.latency_s for r in records]) if records else 0.0,
        tool_errors=mean(r.tool_errors for r in records),
        compactions=mean(r.compactions for r in records),
        error_types=tuple(errors.most_common(5)),
    )


def categories_of(groups: Mapping[str, Sequence[ItemRecord]]) -> list[str]:
    """Categories in first-seen order across all groups."""
    seen: dict[str, None] = {}
    for records in groups.values():
        for r in records:
            seen.setdefault(r.category, None)
    return list(seen)


def summarize(records: Sequence[ItemRecord]) -> dict[str, CategoryStats]:
    """Per-category stats plus ``all`` (every record of the group)."""
    by_cat: dict[str, list[ItemRecord]] = defaultdict(list)
    for r in records:
        by_cat[r.category].append(r)
    out = {cat: _stats(cat, recs) for cat, recs in by_cat.items()}
    out[ALL] = _stats(ALL, records)
    return out


def compare_groups(a: Sequence[ItemRecord], b: Sequence[ItemRecord]) -> dict[str, PairedDelta]:
    """B versus A per category and overall, on the (category, item, run) keys both have."""
    index_b = {(r.category, r.item_id, r.run): r for r in b}
    pairs: dict[str, list[tuple[bool, bool]]] = defaultdict(list)
    for r in a:
        other = index_b.get((r.category, r.item_id, r.run))
        if other is not None:
            pairs[r.category].append((r.correct, other.correct))
            pairs[ALL].append((r.correct, other.correct))
    return {cat: paired_delta([x for x, _ in ps], [y for _, y in ps]) for cat, ps in pairs.items()}


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def print_summary(groups: Mapping[str, Sequence[ItemRecord]], console: Console | None = None) -> None:
    """One table: accuracy (Wilson 95 %) per category and group, then the cost per item."""
    console = console or Console()
    cats = [*categories_of(groups), ALL]
    summaries = {label: summarize(recs) for label, recs in groups.items()}
    table = Table(title="Accuracy % [Wilson 95 %]", show_lines=False)
    table.add_column("category")
    for label in groups:
        table.add_column(label, justify="right")
    for cat in cats:
        cells = []
        for label in groups:
            s = summaries[label].get(cat)
            cells.append(f"{_pct(s.accuracy)} [{_pct(s.low)}-{_pct(s.high)}] n={s.n}" if s and s.n else "-")
        table.add_row(cat, *cells, style="bold" if cat == ALL else None)
    console.print(table)
    cost = Table(title="Cost per item (mean)")
    shown = ("model calls", "retries", "prompt tok", "cached tok", "completion tok", "latency s (mean)")
    cost.add_column("group", justify="left")
    for col in shown:
        cost.add_column(col, justify="right")
    for label in groups:
        cost_of = summaries[label][ALL].cost_cells()
        cost.add_row(label, *(cost_of[c] for c in shown))
    console.print(cost)


def print_comparison(
    label_a: str,
    a: Sequence[ItemRecord],
    label_b: str,
    b: Sequence[ItemRecord],
    console: Console | None = None,
) -> dict[str, PairedDelta]:
    """B minus A per category: delta with Newcombe's Wilson-based 95 % interval and exact McNemar."""
    console = console or Console()
    deltas = compare_groups(a, b)
    table = Table(title=f"{label_b} vs {label_a} (paired items)")
    for col in (
        "category",
        "n",
        label_a,
        label_b,
        "delta pp [95 %]",
        f"only {label_a}",
        f"only {label_b}",
        "McNemar p",
    ):
        table.add_column(col, justify="left" if col == "category" else "right")
    for cat in [c for c in deltas if c != ALL] + ([ALL] if ALL in deltas else []):
        d = deltas[cat]
        table.add_row(
            cat,
            str(d.n),
            _pct(d.acc_a),
            _pct(d.acc_b),
            f"{100 * d.delta:+.1f} [{100 * d.low:+.1f}, {100 * d.high:+.1f}]",
            str(d.only_a),
            str(d.only_b),
            f"{d.p_value:.3g}",
            style="bold" if cat == ALL else None,
        )
    console.print(table)
    return deltas


def markdown_summary(groups: Mapping[str, Sequence[ItemRecord]], baseline: str | None = "bare") -> str:
    """Accuracy (Wilson 95 %), paired deltas against ``baseline`` and cost per item, as Markdown tables."""
    cats = [*categories_of(groups), ALL]
    summaries = {label: summarize(recs) for label, recs in groups.items()}
    lines = ["| category | " + " | ".join(groups) + " |", "|---|" + "---:|" * len(groups)]
    for cat in cats:
        cells = []
        for label in groups:
            s = summaries[label].get(cat)
            cells.append(f"{_pct(s.accuracy)} [{_pct(s.low)}–{_pct(s.high)}] (n={s.n})" if s and s.n else "–")
        name = f"**{cat}**" if cat == ALL else cat
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if baseline is not None and baseline in groups:
        lines += [
            "",
            f"| vs {baseline} | category | n | delta pp [95 %] | only {baseline} | only preset | McNemar p |",
        ]
        lines.append("|---|---|---:|---:|---:|---:|---:|")
        for label, recs in groups.items():
            if label == baseline:
                continue
            deltas = compare_groups(groups[baseline], recs)
            for cat in [c for c in cats if c in deltas]:
                d = deltas[cat]
                lines.append(
                    f"| {label} | {cat} | {d.n} | {100 * d.delta:+.1f} [{100 * d.low:+.1f}, {100 * d.high:+.1f}] "
                    f"| {d.only_a} | {d.only_b} | {d.p_value:.3g} |"
                )
    cols = (
        [c for c in summaries[next(iter(groups))][ALL].cost_cells() if c != "latency s (p50)"]
        if groups
        else []
    )
    lines += ["", "| preset | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
    for label in groups:
        cost_of = summaries[label][ALL].cost_cells()
        lines.append(f"| {label} | " + " | ".join(cost_of[c] for c in cols) + " |")
    return "\n".join(lines) + "\n"
