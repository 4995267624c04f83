"""One JSON line per evaluated item: the record, the resumable store and loading for reports.

A run appends one :class:`ItemRecord` per (item, run) to its JSONL file as soon as
the item finishes (flushed and fsynced), so an interrupted run loses at most the
items in flight. Re-running with the same output path skips every key already in
the file; a torn last line (the process died mid-write) is ignored and rewritten.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

__all__ = ["ItemRecord", "ResultStore", "load_records"]


@dataclass
class ItemRecord:
    """The outcome of one item under one preset (one run).

    ``model_calls`` counts every generation the item cost: HTTP requests plus the
    server's internal re-generations (layer-2 re-pick, argument repair); ``retries``
    counts the generations spent by guardrails beyond the model's own turns
    (server re-generations, or client-side guardrail retries).
    """

    suite: str
    category: str
    item_id: str
    preset: str
    run: int = 0
    seed: int = 0
    correct: bool = False
    error: str = ""
    error_type: str = ""
    model_calls: int = 0
    retries: int = 0
    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    compactions: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    latency_s: float = 0.0
    interventions: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # "kind: detail" of a one-reply item's interventions
    output: Any = None
    model: str = ""
    server: str = ""
    prompt: str = ""  # the request's words, cut to a few hundred characters
    expected: Any = None  # what a right answer does: the expected calls, "no call", a reference

    @property
    def key(self) -> tuple[str, str, str, int]:
        """What makes a record unique in one file: (category, item, preset, run)."""
        return (self.category, self.item_id, self.preset, self.run)

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, sort_keys=True, default=str)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ItemRecord:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def _parse(text: bytes) -> ItemRecord | None:
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    try:
        return ItemRecord.from_dict(data)
    except TypeError:
        return None


def _complete_lines(data: bytes) -> tuple[list[ItemRecord], int]:
    """The records on complete lines, and the length of the complete part (a torn tail is excluded)."""
    end = data.rfind(b"\n") + 1
    out = [rec for line in data[:end].splitlines() if line.strip() and (rec := _parse(line)) is not None]
    return out, end


def load_records(path: str | Path) -> list[ItemRecord]:
    """Every complete record in ``path`` (a later record with the same key replaces an earlier one)."""
    records, _ = _complete_lines(Path(path).read_bytes())
    return list({rec.key: rec for rec in records}.values())


class ResultStore:
    """The append-only JSONL file of one run; knows which keys are done."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._done: dict[tuple[str, str, str, int], ItemRecord] = {}
        if self.path.exists():
            data = self.path.read_bytes()
            records, end = _complete_lines(data)
            self._done = {rec.key: rec for rec in records}
            if end < len(data):  # a torn last line (the process died mid-write): drop it
                with self.path.open("r+b") as fh:
                    fh.truncate(end)

    def done(self, key: tuple[str, str, str, int]) -> ItemRecord | None:
        return self._done.get(key)

    @property
    def records(self) -> list[ItemRecord]:
        return list(self._done.values())

    def add(self, record: ItemRecord) -> None:
        """Append and flush one record; it counts as done from now on."""
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(record.to_json() + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        self._done[record.key] = record

    def extend(self, records: Iterable[ItemRecord]) -> None:
        for rec in records:
            self.add(rec)
