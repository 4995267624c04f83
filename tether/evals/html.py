"""The self-contained HTML report: inline CSS and SVG, no script, nothing fetched from anywhere.

Sections: per-category accuracy bars with Wilson 95 % whiskers for every group;
the paired deltas of each group against the baseline (Newcombe interval, exact
McNemar p) as a table and a forest plot; the cost per item (model calls,
retries, tokens, latency, tool errors, compactions); the most common failure
types; every item (:mod:`tether.evals.html_items`).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from tether.evals.html_items import ITEMS_CSS, items_section
from tether.evals.records import ItemRecord
from tether.evals.report import ALL, CategoryStats, categories_of, compare_groups, summarize
from tether.evals.stats import PairedDelta

__all__ = ["html_report"]

PALETTE = ("#6b7280", "#2563eb", "#16a34a", "#d97706", "#9333ea", "#dc2626", "#0891b2", "#be185d")
CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1100px;
color:#111827;padding:0 1rem}
h1{font-size:1.5rem;margin-bottom:.2rem}h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #e5e7eb}
.meta{color:#6b7280}table{border-collapse:collapse;margin:.6rem 0;font-variant-numeric:tabular-nums}
th,td{padding:.25rem .6rem;border-bottom:1px solid #f3f4f6;text-align:right}th{background:#f9fafb}
td:first-child,th:first-child{text-align:left}tr.all td{font-weight:600;border-top:2px solid #d1d5db}
.pos{color:#15803d}.neg{color:#b91c1c}.legend span{display:inline-block;margin-right:1rem}
.legend i{display:inline-block;width:.8rem;height:.8rem;margin-right:.3rem;vertical-align:-1px}
svg text{font:12px system-ui,sans-serif;fill:#374151}.note{color:#6b7280;font-size:.9rem}
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _legend(labels: Sequence[str]) -> str:
    items = "".join(
        f'<span><i style="background:{PALETTE[i % len(PALETTE)]}"></i>{_e(label)}</span>'
        for i, label in enumerate(labels)
    )
    return f'<p class="legend">{items}</p>'


def _bars(cats: Sequence[str], summaries: Mapping[str, Mapping[str, CategoryStats]]) -> str:
    """Grouped horizontal bars: one row block per category, one bar per group, Wilson whiskers."""
    labels = list(summaries)
    left, width, bar_h, gap = 170, 560, 14, 12
    block = bar_h * len(labels) + gap
    height = block * len(cats) + 40
    parts = [
        f'<svg width="{left + width + 90}" height="{height}" role="img" aria-label="accuracy by category">'
    ]
    for tick in range(0, 101, 20):
        x = left + width * tick / 100
        parts.append(f'<line x1="{x}" y1="10" x2="{x}" y2="{height - 24}" stroke="#e5e7eb"/>')
        parts.append(f'<text x="{x}" y="{height - 8}" text-anchor="middle">{tick}%</text>')
    for ci, cat in enumerate(cats):
        y0 = 10 + ci * block
        parts.append(f'<text x="{left - 8}" y="{y0 + block / 2}" text-anchor="end">{_e(cat)}</text>')
        for gi, label in enumerate(labels):
            s = summaries[label].get(cat)
            if s is None or not s.n:
                continue
            y = y0 + gi * bar_h
            color = PALETTE[gi % len(PALETTE)]
            w = width * s.accuracy
            lo, hi = left + width * s.low, left + width * s.high
            mid = y + bar_h / 2 - 1
            parts.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar_h - 2}" fill="{color}">')
            parts.append(f"<title>{_e(label)}: {_pct(s.accuracy)}% of {s.n}</title></rect>")
            parts.append(f'<line x1="{lo:.1f}" y1="{mid}" x2="{hi:.1f}" y2="{mid}" stroke="#111827"/>')
            parts.append(
                f'<text x="{left + width + 6}" y="{y + bar_h - 3}">{_pct(s.accuracy)}% n={s.n}</text>'
            )
    parts.append("</svg>")
    return "".join(parts)


def _forest(rows: Sequence[tuple[str, PairedDelta]]) -> str:
    """Deltas with their 95 % intervals on a -100..+100 pp axis."""
    left, width, row_h = 260, 520, 20
    height = row_h * len(rows) + 40
    zero = left + width / 2
    parts = [f'<svg width="{left + width + 20}" height="{height}" role="img" aria-label="paired deltas">']
    for tick in range(-100, 101, 25):
        x = zero + width / 2 * tick / 100
        parts.append(f'<line x1="{x}" y1="8" x2="{x}" y2="{height - 24}" stroke="#f3f4f6"/>')
        parts.append(f'<text x="{x}" y="{height - 8}" text-anchor="middle">{tick:+d}</text>')
    parts.append(f'<line x1="{zero}" y1="8" x2="{zero}" y2="{height - 24}" stroke="#9ca3af"/>')
    for i, (name, d) in enumerate(rows):
        y = 16 + i * row_h
        lo, hi = zero + width / 2 * d.low, zero + width / 2 * d.high
        x = zero + width / 2 * d.delta
        color = "#15803d" if d.low > 0 else "#b91c1c" if d.high < 0 else "#374151"
        parts.append(f'<text x="{left - 8}" y="{y + 4}" text-anchor="end">{_e(name)}</text>')
        parts.append(
            f'<line x1="{lo:.1f}" y1="{y}" x2="{hi:.1f}" y2="{y}" stroke="{color}" stroke-width="2"/>'
        )
        parts.append(f'<circle cx="{x:.1f}" cy="{y}" r="4" fill="{color}"/>')
    parts.append("</svg>")
    return "".join(parts)


def _delta_table(baseline: str, rows: Sequence[tuple[str, str, PairedDelta]]) -> str:
    head = (
        "<tr><th>preset</th><th>category</th><th>n</th><th>"
        + _e(baseline)
        + " %</th><th>preset %</th><th>delta pp</th><th>95 % interval</th><th>only "
        + _e(baseline)
        + "</th><th>only preset</th><th>McNemar p</th></tr>"
    )
    body = []
    for label, cat, d in rows:
        cls = "pos" if d.low > 0 else "neg" if d.high < 0 else ""
        body.append(
            f'<tr class="{"all" if cat == ALL else ""}"><td>{_e(label)}</td><td>{_e(cat)}</td><td>{d.n}</td>'
            f"<td>{_pct(d.acc_a)}</td><td>{_pct(d.acc_b)}</td>"
            f'<td class="{cls}">{100 * d.delta:+.1f}</td><td>[{100 * d.low:+.1f}, {100 * d.high:+.1f}]</td>'
            f"<td>{d.only_a}</td><td>{d.only_b}</td><td>{d.p_value:.3g}</td></tr>"
        )
    return f"<table>{head}{''.join(body)}</table>"


def _accuracy_table(cats: Sequence[str], summaries: Mapping[str, Mapping[str, CategoryStats]]) -> str:
    head = "<tr><th>category</th>" + "".join(f"<th>{_e(label)}</th>" for label in summaries) + "</tr>"
    rows = []
    for cat in [*cats, ALL]:
        cells = []
        for label in summaries:
            s = summaries[label].get(cat)
            cells.append(
                f"<td>{_pct(s.accuracy)} <span class='note'>[{_pct(s.low)}–{_pct(s.high)}] n={s.n}</span></td>"
                if s and s.n
                else "<td>–</td>"
            )
        rows.append(f'<tr class="{"all" if cat == ALL else ""}"><td>{_e(cat)}</td>{"".join(cells)}</tr>')
    return f"<table>{head}{''.join(rows)}</table>"


def _cost_table(summaries: Mapping[str, Mapping[str, CategoryStats]]) -> str:
    rows = [(label, stats[ALL].cost_cells()) for label, stats in summaries.items()]
    cols = list(rows[0][1]) if rows else []
    head = "<tr><th>group</th>" + "".join(f"<th>{c}</th>" for c in cols) + "</tr>"
    body = [
        f"<tr><td>{_e(label)}</td>" + "".join(f"<td>{v}</td>" for v in cells.values()) + "</tr>"
        for label, cells in rows
    ]
    return f"<table>{head}{''.join(body)}</table>"


def _errors(summaries: Mapping[str, Mapping[str, CategoryStats]]) -> str:
    items = []
    for label, stats in summaries.items():
        kinds = ", ".join(f"{_e(k)} × {n}" for k, n in stats[ALL].error_types) or "none"
        items.append(f"<li><b>{_e(label)}</b>: {kinds}</li>")
    return f"<ul>{''.join(items)}</ul>"


def html_report(
    groups: Mapping[str, Sequence[ItemRecord]],
    *,
    baseline: str | None = None,
    title: str = "tether eval",
    notes: Sequence[str] = (),
) -> str:
    """The whole report as one HTML document; ``baseline`` (default: the first group) anchors deltas."""
    if not groups:
        raise ValueError("no results to report")
    base: str = baseline if baseline is not None and baseline in groups else next(iter(groups))
    cats = categories_of(groups)
    summaries = {label: summarize(recs) for label, recs in groups.items()}
    models = sorted({r.model for recs in groups.values() for r in recs if r.model})
    servers = sorted({r.server for recs in groups.values() for r in recs if r.server})
    delta_rows: list[tuple[str, str, PairedDelta]] = []
    for label, recs in groups.items():
        if label == base:
            continue
        deltas = compare_groups(groups[base], recs)
        delta_rows += [(label, c, deltas[c]) for c in [*cats, ALL] if c in deltas]
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    meta = f"model: {_e(', '.join(models) or 'unknown')} · server: {_e(', '.join(servers) or 'unknown')} · {stamp}"
    out = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<meta name='viewport' content='width=device-width,initial-scale=1'><title>{_e(title)}</title>",
        f"<style>{CSS}{ITEMS_CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1><p class='meta'>{meta}</p>",
        *(f"<p class='note'>{_e(n)}</p>" for n in notes),
        "<h2>Accuracy by category</h2>",
        _legend(list(groups)),
        _bars([*cats, ALL], summaries),
        _accuracy_table(cats, summaries),
    ]
    if delta_rows:
        out += [
            f"<h2>Paired deltas against {_e(base)}</h2>",
            "<p class='note'>Items paired by (category, item, run). Interval: Newcombe's method for paired "
            "proportions built on Wilson 95 % score intervals. p: exact two-sided McNemar (binomial test on "
            "the discordant pairs).</p>",
            _forest([(f"{label} · {cat}", d) for label, cat, d in delta_rows]),
            _delta_table(base, delta_rows),
        ]
    out += [
        "<h2>Cost per item</h2>",
        "<p class='note'>Means per item. Model calls include the server's internal re-generations (re-pick, "
        "argument repair) and client-side guardrail retries; retries count only those extra generations.</p>",
        _cost_table(summaries),
        "<h2>Failure types</h2>",
        _errors(summaries),
        "<h2>Items</h2>",
        "<p class='note'>Every item under every preset: the prompt (cut), what the model answered, what a "
        "right answer does (BFCL's accepted values, or the scenario's reference) and why it was judged wrong.</p>",
        items_section(groups),
        "</body></html>",
    ]
    return "\n".join(out)
