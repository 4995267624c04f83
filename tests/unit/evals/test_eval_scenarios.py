"""The scenario suite as data: every file loads, every reference solves, every check can fail."""

from __future__ import annotations

from collections import Counter

import pytest

from tether.errors import ConfigError
from tether.evals.episode import replay_reference
from tether.evals.scenario_spec import TIERS, ScenarioFile, load_file, load_suite


def _all() -> list[tuple[ScenarioFile, str]]:
    return [(f, sc.id) for f in load_suite() for sc in f.scenarios]


def test_suite_has_every_tier_and_enough_scenarios() -> None:
    files = load_suite()
    tiers = Counter(f.tier for f in files for _ in f.scenarios)
    assert set(tiers) == set(TIERS)
    assert all(n >= 4 for n in tiers.values())
    assert sum(tiers.values()) >= 30
    assert any(sc.context_budget for f in files if f.tier == "long_context" for sc in f.scenarios)


@pytest.mark.parametrize(("file", "scenario_id"), _all(), ids=[sid for _, sid in _all()])
def test_reference_passes_and_nothing_fails(file: ScenarioFile, scenario_id: str) -> None:
    scenario = next(sc for sc in file.scenarios if sc.id == scenario_id)
    assert replay_reference(scenario, file.tools) == []
    # An agent that does nothing and says nothing must fail every scenario.
    assert replay_reference(scenario, file.tools, [], "") != []
    if scenario.expect.no_calls:
        first = scenario.tools[0]
        assert replay_reference(scenario, file.tools, [(first, {})], "ok") != []
    elif scenario.reference.calls:
        # Dropping the reference's last call must break it (the checks look at what was done).
        calls = [(c.tool, c.args) for c in scenario.reference.calls[:-1]]
        assert replay_reference(scenario, file.tools, calls, scenario.reference.answer) != []


BASE = """
tier: plumbing
tools:
  get_weather:
    parameters: {type: object, properties: {city: {type: string}}, required: [city]}
    action: {op: lookup, table: weather, match: {city: city}}
scenarios:
  - id: x.one
    prompt: hi
    tools: [get_weather]
    state: {tables: {weather: []}}
    expect: {calls: [{tool: get_weather, args: {city: Paris}}]}
    reference: {calls: [{tool: get_weather, args: {city: Paris}}]}
"""


def test_a_valid_file_loads() -> None:
    assert load_file("inline.yaml", BASE).scenarios[0].id == "x.one"


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("tools: [get_weather]", "tools: [get_wether]", "not in the file's tools"),
        (
            "{calls: [{tool: get_weather, args: {city: Paris}}]}",
            "{calls: [{tool: send, args: {}}]}",
            "not offered",
        ),
        ("args: {city: Paris}}]}\n    reference", "args: {town: Paris}}]}\n    reference", "not a parameter"),
        ("match: {city: city}", "match: {city: town}", "reads argument 'town'"),
        ("state: {tables: {weather: []}}", "state: {tables: {}}", "not in state.tables"),
        (
            "args: {city: Paris}}]}\n    reference",
            "args: {city: {equals: Paris}}}]}\n    reference",
            "unknown matcher",
        ),
        ("expect: {calls: [{tool: get_weather, args: {city: Paris}}]}", "expect: {}", "nothing to check"),
        ("tier: plumbing", "tier: misc", "tier"),
        ("op: lookup,", "op: teleport,", "op"),
        ("{city: {type: string}}", "{city: {type: strng}}", "'get_weather' has an invalid schema"),
    ],
)
def test_broken_files_are_refused(old: str, new: str, message: str) -> None:
    assert old in BASE
    with pytest.raises(ConfigError, match=message):
        load_file("inline.yaml", BASE.replace(old, new, 1))
