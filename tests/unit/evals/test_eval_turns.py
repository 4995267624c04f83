"""The turn-by-turn reading of a multi-turn result file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tether.evals.turns import call_parts, main, report, tally


def _record(
    answer: list[list[str]], steps: list[list[list[str]]], correct: bool = False
) -> dict[str, object]:
    return {"expected": {"calls per turn": answer}, "output": {"steps": steps}, "correct": correct}


def test_a_call_is_read_the_same_whatever_its_quotes_and_keyword_order() -> None:
    assert call_parts("mv(source='a', destination=\"b\")") == call_parts('mv(destination="b",source="a")')
    assert call_parts("sort('x.txt')") == ("sort", ("'x.txt'",), ())
    assert call_parts("sort('x.txt')") != call_parts("sort(file_name='x.txt')")
    assert call_parts("not a call (") == ("not a call (", (), ())


def test_turns_are_counted_exact_by_name_and_by_the_answers_size() -> None:
    right = _record(
        [["cd(folder='a')", "ls()"], ["pwd()"]],
        [[["ls()"], ["cd(folder='a')"]], [["pwd()"]]],  # two steps, the other order: still exact
        correct=True,
    )
    wrong = _record(
        [["cd(folder='a')"], ["mkdir(dir_name='x')"], ["pwd()"]],
        [[["cd(folder='b')"]], []],  # a wrong value; a turn with no call; a turn never reached
    )
    t = tally([right, wrong, {"expected": "not multi-turn"}])
    assert (t.entries, t.entries_right, t.entries_exact, t.entries_single) == (2, 1, 1, 1)
    assert (t.turns, t.exact, t.names) == (5, 2, 3)
    assert t.by_size == {1: [4, 1], 2: [1, 1]}
    assert t.turn_counts == [2, 3]
    assert "turns whose calls are the answer's: 2 / 5 (40.0 %)" in report(t)


def test_the_bound_is_the_mean_of_p_to_the_turns_and_inverts() -> None:
    t = tally([_record([["a()"]] * 2, []), _record([["a()"]] * 4, [])])
    assert t.bound(0.5) == pytest.approx((0.25 + 0.0625) / 2)
    p = t.rate_for(0.10)
    assert t.bound(p) == pytest.approx(0.10, abs=1e-6)
    assert 0.3 < p < 0.5


def test_the_command_reads_a_file_and_refuses_one_without_multi_turn_records(tmp_path: Path) -> None:
    app = typer.Typer()
    app.command()(main)
    good = tmp_path / "mt.jsonl"
    good.write_text(json.dumps(_record([["pwd()"]], [[["pwd()"]]], correct=True)) + "\n")
    out = CliRunner().invoke(app, [str(good)])
    assert out.exit_code == 0, out.output
    assert "right by BFCL's checker 1 / 1 (100.0 %)" in out.output
    bad = tmp_path / "single.jsonl"
    bad.write_text(json.dumps({"expected": [{"f": {}}], "output": None}) + "\n")
    out = CliRunner().invoke(app, [str(bad)])
    assert out.exit_code == 2
    assert "holds no multi-turn record" in out.output
