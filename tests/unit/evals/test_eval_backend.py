"""The fake backend: harness errors shown to the model, declarative actions, confined files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tether.evals.backend import Backend
from tether.evals.checks import MISSING, matches
from tether.evals.scenario_spec import load_file

WORLD = """
tier: sequencing
tools:
  login:
    parameters: {type: object, properties: {user: {type: string}}, required: [user]}
    action: {op: reply, result: "hi {args.user}"}
  add_item:
    parameters:
      type: object
      properties: {name: {type: string}, qty: {type: integer, minimum: 1}, day: {type: string}}
      required: [name, qty]
    action:
      op: insert
      table: items
      values: {name: $name, qty: $qty, day: $day, note: "added {args.name}"}
      requires: [login]
      fail_times: 1
      checks: [{arg: day, regex: "\\\\d{4}-\\\\d{2}-\\\\d{2}", message: "Error: bad day {args.day}"}]
  rename:
    parameters: {type: object, properties: {id: {type: integer}, name: {type: string}}, required: [id, name]}
    action: {op: update, table: items, match: {id: id}, set: {name: $name}, missing: "Error: no item {args.id}"}
  drop:
    parameters: {type: object, properties: {id: {type: integer}}, required: [id]}
    action: {op: delete, table: items, match: {id: id}}
  find:
    parameters: {type: object, properties: {name: {type: string}}}
    action: {op: select, table: items, filters: {name: name}, fields: [id, name]}
  bump:
    parameters: {type: object, properties: {by: {type: number}}, required: [by]}
    action: {op: reply, counter: hits, add: $by, result: "now {value}"}
  calc:
    parameters: {type: object, properties: {expression: {type: string}}, required: [expression]}
    action: {op: calculate}
  read:
    parameters: {type: object, properties: {path: {type: string}}, required: [path]}
    action: {op: read_file}
  write:
    parameters: {type: object, properties: {path: {type: string}, content: {type: string}}, required: [path, content]}
    action: {op: write_file}
scenarios:
  - id: w.one
    prompt: p
    tools: [login, add_item, rename, drop, find, bump, calc, read, write]
    state:
      tables: {items: [{id: 1, name: Lamp, qty: 1}]}
      counters: {hits: 1}
      files: {"docs/a.txt": "alpha", "big.log": {line: "n{i}", count: 3, insert: {1: NEEDLE}}}
    expect: {state: [{counter: hits, value: 1}]}
    reference: {}
"""


@pytest.fixture
def backend(tmp_path: Path) -> Backend:
    f = load_file("world.yaml", WORLD)
    return Backend(f.scenarios[0], f.tools, tmp_path)


def test_harness_errors_reach_the_model(backend: Backend) -> None:
    unknown = backend.call("logout", "{}")
    assert not unknown.ok and "unknown tool 'logout'" in unknown.text and "login" in unknown.text
    assert "not valid JSON" in backend.call("login", "{user: x").text
    assert "must be a JSON object" in backend.call("login", "[1]").text
    bad = backend.call("add_item", {"name": "x", "qty": 0})
    assert not bad.ok and "qty" in bad.text and "minimum" in bad.text
    assert "call login before add_item" in backend.call("add_item", {"name": "x", "qty": 1}).text
    assert backend.call("login", '{"user": "ana"}').text == "hi ana"
    assert "bad day 5 May" in backend.call("add_item", {"name": "x", "qty": 1, "day": "5 May"}).text
    transient = backend.call("add_item", {"name": "Desk", "qty": 2})
    assert not transient.ok and "temporarily unavailable" in transient.text
    done = backend.call("add_item", {"name": "Desk", "qty": 2, "day": "2025-01-02"})
    assert done.ok and '"id": 2' in done.text
    assert backend.tables["items"][-1] == {
        "name": "Desk",
        "qty": 2,
        "day": "2025-01-02",
        "note": "added Desk",
        "id": 2,
    }


def test_table_counter_and_calculator_actions(backend: Backend) -> None:
    assert backend.call("rename", {"id": 1, "name": "Big lamp"}).ok
    assert backend.tables["items"][0]["name"] == "Big lamp"
    missing = backend.call("rename", {"id": 9, "name": "x"})
    assert not missing.ok and missing.text == "Error: no item 9"
    assert backend.call("find", {"name": "big LAMP "}).text == '[{"id": 1, "name": "Big lamp"}]'
    assert backend.call("find", {}).ok
    assert backend.call("bump", {"by": 2}).text == "now 3"
    assert backend.counters["hits"] == 3
    assert backend.call("calc", {"expression": "2 * (3 + 4) - 1"}).text == "13"
    assert backend.call("calc", {"expression": "1 / 4"}).text == "0.25"
    for evil in ("__import__('os')", "(1).__class__", "9 ** 999", "1 / 0"):
        assert not backend.call("calc", {"expression": evil}).ok
    assert backend.call("drop", {"id": 1}).ok and backend.tables["items"] == []


def test_files_are_confined_to_the_work_dir(backend: Backend, tmp_path: Path) -> None:
    assert backend.call("read", {"path": "docs/a.txt"}).text == "alpha"
    assert backend.call("read", {"path": "big.log"}).text == "n1\nNEEDLE\nn2\nn3\n"
    assert backend.call("write", {"path": "out/b.txt", "content": "beta"}).ok
    assert (tmp_path / "out" / "b.txt").read_text() == "beta"
    for escape in ("../outside.txt", "/etc/passwd"):
        result = backend.call("read", {"path": escape})
        assert not result.ok and "outside" in result.text
    assert not backend.call("read", {"path": "nope.txt"}).ok
    assert backend.files()["out/b.txt"] == "beta"


@pytest.mark.parametrize(
    ("matcher", "value", "expected"),
    [
        ("Paris", "Paris ", True),
        ("Paris", "paris", False),
        ({"ieq": "PARIS"}, "paris", True),
        (3, 3.0, True),
        (True, 1, False),
        ({"approx": 21.5}, 21.5000001, True),
        ({"approx": 21.5, "tol": 0.01}, 21.7, False),
        ({"regex": "^A-\\d+$"}, "A-1002", True),
        ({"contains": "auth"}, ["auth", "ui"], True),
        ({"one_of": ["a", {"ieq": "B"}]}, "b", True),
        ({"exists": False}, MISSING, True),
        ({"exists": False}, None, False),
        ({"gt": 3}, "4", False),
        ({"json": {"eq": {"a": 1}}}, '{"a": 1}', True),
        ({"json": {"eq": {"a": 1}}}, '{"a": 1, "b": 2}', False),
        ({"all": [{"contains": "a"}, {"not_contains": "z"}]}, "abc", True),
        ({"any_of": [1, 2]}, 3, False),
        ("x", MISSING, False),
    ],
)
def test_matchers(matcher: Any, value: Any, expected: bool) -> None:
    assert matches(matcher, value) is expected
