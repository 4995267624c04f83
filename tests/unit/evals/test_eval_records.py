"""The resumable JSONL store."""

from __future__ import annotations

from pathlib import Path

from tether.evals.records import ItemRecord, ResultStore, load_records


def _rec(item: str, preset: str = "bare", correct: bool = True) -> ItemRecord:
    return ItemRecord(suite="bfcl", category="simple_python", item_id=item, preset=preset, correct=correct)


def test_store_appends_and_resumes(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "run.jsonl"
    store = ResultStore(path)
    store.add(_rec("a"))
    store.add(_rec("b", correct=False))
    again = ResultStore(path)
    assert again.done(("simple_python", "a", "bare", 0)) is not None
    assert again.done(("simple_python", "c", "bare", 0)) is None
    assert sorted(r.item_id for r in again.records) == ["a", "b"]
    assert len(path.read_text().splitlines()) == 2


def test_torn_last_line_is_dropped_and_rewritten(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    ResultStore(path).add(_rec("a"))
    with path.open("a") as fh:
        fh.write('{"suite": "bfcl", "item_id": "b"')  # the process died mid-write
    store = ResultStore(path)
    assert [r.item_id for r in store.records] == ["a"]
    store.add(_rec("b"))
    assert [r.item_id for r in load_records(path)] == ["a", "b"]


def test_later_record_wins_and_unknown_fields_are_ignored(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    first = _rec("a", correct=False).to_json()
    second = _rec("a", correct=True).to_json().replace('"correct": true', '"correct": true, "extra": 1')
    path.write_text(first + "\n" + "not json\n" + second + "\n")
    (only,) = load_records(path)
    assert only.correct is True
