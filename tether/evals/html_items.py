"""The report's per-item table: every item under every preset, what it was asked and answered.

One row per record: the prompt's words, what the model answered, what a right answer does and why
it was judged wrong, in words before BFCL's own message. Filtered by preset and by outcome with
radio buttons and CSS alone (the report runs no script).
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from typing import Any

from tether.evals.records import ItemRecord

__all__ = ["ITEMS_CSS", "items_section", "reason"]

CELL_CHARS = 400  # an answer or an expected value past this is cut in the table
ITEMS_CSS = """
.items table{width:100%;table-layout:fixed}.items td{text-align:left;vertical-align:top;word-break:break-word}
.items td.t{font:12px ui-monospace,monospace;white-space:pre-wrap}.items tr.wrong td.o{color:#b91c1c}.items tr.right td.o{color:#15803d}
.items label{margin-right:.8rem}.items input{margin-right:.2rem}
#fo-right:checked~table tr.wrong,#fo-wrong:checked~table tr.right{display:none}
"""

# BFCL's error types (the part after the checker's name) and tether's own, in words.
_WORDS = {
    "wrong_count": "wrong number of calls",
    "cannot_find_match": "no call matches an expected one",
    "decoder_failed": "no call in the reply",
    "decoder_success": "called a tool where none fits",
    "wrong_func_name": "called the wrong tool",
    "missing_required": "a required argument is missing",
    "missing_optional": "an argument the answer needs is missing",
    "unexpected_param": "an argument the tool does not take",
    "instance_state_mismatch": "the backends' state is not the expected one",
    "execution_response_mismatch": "the calls' results are not the expected ones",
    "empty_turn_model_response": "no call in a turn that needs one",
    "force_terminated": "past BFCL's step limit",
    "inference_error": "the request failed",
    "harness_error": "the eval harness failed on this item",
    "request_failed": "a request failed",
    "failed_checks": "the scenario's checks failed",
}
_KINDS = {"value_error": "a value not among the accepted ones", "type_error": "a value of the wrong type"}


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _cut(text: str, limit: int = CELL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _messages(error: str) -> list[str]:
    """The words in BFCL's error (a JSON list of messages and nested ``sub_error`` lists), in order."""
    try:
        value: Any = json.loads(error)
    except ValueError:
        return [error] if error else []
    out: list[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, list):
            for x in v:
                walk(x)
        elif isinstance(v, Mapping):
            for x in v.values():
                walk(x)

    walk(value)
    return out


def reason(record: ItemRecord) -> str:
    """Why ``record`` was judged wrong: the error type in words, then the checker's most specific message."""
    if record.correct:
        return ""
    kind = record.error_type
    head, _, tail = kind.partition(":")
    words = _WORDS.get(tail) or _WORDS.get(head) or _KINDS.get(head) or kind
    said = _messages(record.error)
    detail = said[-1] if said else ""
    return f"{words}: {detail}" if detail and detail != words else words


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _answered(output: Any) -> str:
    """A BFCL reply as ``name(args)`` lines or its text; anything else as JSON."""
    if isinstance(output, Mapping) and set(output) == {"content", "tool_calls"}:
        calls = [f"{c.get('name')}({c.get('arguments')})" for c in output.get("tool_calls") or []]
        return "\n".join(calls) if calls else f"text: {output.get('content') or ''}"
    return _text(output)


def items_section(groups: Mapping[str, Sequence[ItemRecord]]) -> str:
    """The filter buttons and the table, one row per record of every group."""
    labels = list(groups)
    radios = ['<input type="radio" name="fp" id="fp-all" checked><label for="fp-all">every preset</label>']
    rules = []
    for i, label in enumerate(labels):
        radios.append(f'<input type="radio" name="fp" id="fp-{i}"><label for="fp-{i}">{_e(label)}</label>')
        rules.append(f"#fp-{i}:checked~table tr.r:not(.p{i}){{display:none}}")
    outcome = [
        '<input type="radio" name="fo" id="fo-all" checked><label for="fo-all">every outcome</label>',
        '<input type="radio" name="fo" id="fo-wrong"><label for="fo-wrong">wrong</label>',
        '<input type="radio" name="fo" id="fo-right"><label for="fo-right">right</label>',
    ]
    head = (
        "<tr><th style='width:8%'>preset</th><th style='width:12%'>item</th><th style='width:4%'></th>"
        "<th style='width:24%'>prompt</th><th style='width:20%'>answered</th>"
        "<th style='width:16%'>expected</th><th style='width:16%'>why wrong</th></tr>"
    )
    rows = []
    ordered = sorted(
        ((r, i, label) for i, label in enumerate(labels) for r in groups[label]),
        key=lambda t: (t[0].category, t[0].item_id, t[0].run, t[1]),
    )
    for r, i, label in ordered:
        outcome_cls = "right" if r.correct else "wrong"
        item = f"{r.category} · {r.item_id}" + (f" · run {r.run}" if r.run else "")
        rows.append(
            f'<tr class="r p{i} {outcome_cls}"><td>{_e(label)}</td><td>{_e(item)}</td>'
            f'<td class="o">{"✓" if r.correct else "✗"}</td><td>{_e(r.prompt)}</td>'
            f'<td class="t">{_e(_cut(_answered(r.output)))}</td><td class="t">{_e(_cut(_text(r.expected)))}</td>'
            f"<td>{_e(_cut(reason(r)))}</td></tr>"
        )
    # Every radio is a sibling before the table: the `:checked ~ table` rules reach it only so.
    return (
        f"<style>{''.join(rules)}</style><div class='items'>"
        f"{''.join(radios)}<br>{''.join(outcome)}<table>{head}{''.join(rows)}</table></div>"
    )
