"""Aggregation, terminal tables, the self-contained HTML report and the CLI around them."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from tether.evals.cli import eval_app
from tether.evals.html import html_report
from tether.evals.html_items import reason
from tether.evals.records import ItemRecord, ResultStore
from tether.evals.report import ALL, compare_groups, summarize


def _records(preset: str, outcomes: list[bool], category: str = "simple_python") -> list[ItemRecord]:
    return [
        ItemRecord("bfcl", category, f"{category}_{i}", preset, correct=ok, model_calls=1 + (preset == "full"),
                   prompt_tokens=100, completion_tokens=10, latency_s=0.5, model="smollm2", server="tether")
        for i, ok in enumerate(outcomes)
    ]  # fmt: skip


BARE = _records("bare", [True, False, False, False]) + _records("bare", [True, True], "irrelevance")
FULL = _records("full", [True, True, True, False]) + _records("full", [True, False], "irrelevance")


def test_summary_and_pairing() -> None:
    s = summarize(FULL)
    assert s["simple_python"].correct == 3 and s["simple_python"].n == 4
    assert s[ALL].n == 6 and s[ALL].model_calls == 2.0
    assert s[ALL].low < s[ALL].accuracy < s[ALL].high
    deltas = compare_groups(BARE, FULL)
    assert deltas["simple_python"].only_b == 2 and deltas["simple_python"].only_a == 0
    assert deltas["irrelevance"].only_a == 1
    assert deltas[ALL].n == 6
    assert compare_groups(BARE, FULL[:2])[ALL].n == 2  # only shared items are paired


def test_html_is_self_contained() -> None:
    page = html_report({"bare": BARE, "full": FULL}, baseline="bare", title="t <x>")
    assert page.startswith("<!doctype html>") and "</html>" in page
    assert "<svg" in page and "<style>" in page
    assert not re.search(r"<script|<link|src=|https?://", page)
    assert "t &lt;x&gt;" in page
    assert "Paired deltas against bare" in page and "McNemar" in page
    assert "smollm2" in page


def test_cli_compare_report_and_scenarios(tmp_path: Path) -> None:
    paths = []
    for name, records in (("bare", BARE), ("full", FULL)):
        store = ResultStore(tmp_path / f"{name}.jsonl")
        store.extend(records)
        paths.append(str(store.path))
    runner = CliRunner()
    out = runner.invoke(eval_app, ["compare", *paths, "--html", str(tmp_path / "c.html")])
    assert out.exit_code == 0, out.output
    assert "full vs bare" in out.output and (tmp_path / "c.html").exists()
    md = tmp_path / "r.md"
    rep = runner.invoke(
        eval_app, ["report", *paths, "--html", str(tmp_path / "r.html"), "--markdown", str(md)]
    )
    assert rep.exit_code == 0, rep.output
    assert "<svg" in (tmp_path / "r.html").read_text()
    table = md.read_text()
    assert "| simple_python | 25.0 [" in table and "| full | simple_python | 4 | +50.0 [" in table
    listing = runner.invoke(eval_app, ["scenarios"])
    assert (
        listing.exit_code == 0 and "recovery.transient" in listing.output and "long_context" in listing.output
    )
    assert runner.invoke(eval_app, []).exit_code == 2
    unknown = runner.invoke(eval_app, ["--suite", "scenarios:plumbing", "--item", "plumbing.nope"])
    assert unknown.exit_code == 2 and "--item names no item of the selection: plumbing.nope" in unknown.output
    bad = runner.invoke(eval_app, ["--suite", "scenarios", "--preset", "bare,turbo"])
    assert bad.exit_code == 2 and "turbo" in bad.output


def test_the_report_lists_every_item_with_its_prompt_answer_expectation_and_reason() -> None:
    wrong = ItemRecord(
        "bfcl", "parallel", "parallel_2", "strict", correct=False,
        error_type="parallel_function_checker_no_order:cannot_find_match",
        error='["Could not find a matching function.", {"Model Result Index 0": {"sub_error": '
        '["Invalid value for parameter \'city\': \'Paris\'. Expected one of [\'Berlin\']."]}}]',
        output={"content": None, "tool_calls": [{"name": "get_weather", "arguments": '{"city": "Paris"}'}]},
        prompt="Weather in Berlin and Rome?", expected=[{"get_weather": {"city": ["Berlin"]}}],
    )  # fmt: skip
    text = ItemRecord(
        "bfcl", "simple_python", "simple_python_9", "bare", error_type="ast_decoder:decoder_failed",
        error="Invalid syntax. Failed to decode AST.", output={"content": "It is sunny.", "tool_calls": []},
        prompt="Weather <b>now</b>?",
    )  # fmt: skip
    page = html_report({"bare": [*BARE, text], "strict": [wrong]}, baseline="bare")
    rows = re.findall(r'<tr class="r p(\d) (right|wrong)">', page)
    assert len(rows) == len(BARE) + 2
    assert ("1", "wrong") in rows and rows.count(("0", "right")) == sum(r.correct for r in BARE)
    assert "no call matches an expected one: Invalid value for parameter &#x27;city&#x27;" in page
    assert "get_weather({&quot;city&quot;: &quot;Paris&quot;})" in page and "Weather in Berlin and Rome?" in page
    assert "no call in the reply: Invalid syntax." in page and "text: It is sunny." in page
    assert "Weather &lt;b&gt;now&lt;/b&gt;?" in page  # the prompt is text, never markup
    # CSS-only filters: one rule per preset and one per outcome, with every radio before the table.
    assert "#fp-1:checked~table tr.r:not(.p1){display:none}" in page
    assert "#fo-right:checked~table tr.wrong" in page
    items = page[page.index("<div class='items'>") :]
    assert items.index('id="fo-wrong"') < items.index("<table>") and items.index('id="fp-1"') < items.index("<table>")
    assert not re.search(r"<script", page)


def test_reasons_read_in_words() -> None:
    def why(kind: str, error: str = "") -> str:
        return reason(ItemRecord("bfcl", "c", "i", "p", error_type=kind, error=error))

    assert why("irrelevance_error:decoder_success", "function call produced") == (
        "called a tool where none fits: function call produced"
    )
    assert why("value_error:string", '["Invalid value for parameter \'a\'."]').startswith("a value not among")
    assert why("multi_turn:force_terminated") == "past BFCL's step limit"
    assert why("something_new") == "something_new"
    assert reason(ItemRecord("bfcl", "c", "i", "p", correct=True)) == ""
