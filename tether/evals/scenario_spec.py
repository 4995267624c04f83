"""The scenario suite's data model: YAML files under ``tether/evals/scenarios/``, one per tier.

A file declares a ``tier``, a library of ``tools`` (JSON-schema parameters plus a
declarative ``action`` on the fake backend) and its ``scenarios``. A scenario
offers some of those tools, seeds the backend ``state`` (tables of rows, counters,
files in a work dir), gives the user prompt, and states what must hold at the
end in ``expect``: matchers on the arguments of calls (and of the terminal call),
on the final state, on the final answer, tools that must never be called. No
scenario needs Python code; :func:`load_suite` checks every cross-reference
(tools, tables, counters, argument names) when it loads.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tether.errors import ConfigError
from tether.schema_check import schema_problem

__all__ = [
    "TIERS",
    "Action",
    "ArgCheck",
    "CallExpect",
    "Expect",
    "FileGen",
    "Reference",
    "ReferenceCall",
    "Scenario",
    "ScenarioFile",
    "StateCheck",
    "StateSpec",
    "ToolSpecModel",
    "load_file",
    "load_suite",
]

TIERS = ("plumbing", "selection", "arguments", "sequencing", "recovery", "relevance", "long_context")
Op = Literal[
    "reply",
    "lookup",
    "select",
    "insert",
    "update",
    "delete",
    "count",
    "read_file",
    "write_file",
    "append_file",
    "list_files",
    "delete_file",
    "calculate",
]
TEMPLATE_ARG = re.compile(r"\{args\.(\w+)\}")
MATCH_OPS = frozenset(
    {"eq", "ieq", "contains", "icontains", "not_contains", "regex", "approx", "tol", "one_of", "gt", "lt"}
    | {"exists", "json", "all", "any_of"}
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ArgCheck(_Strict):
    """An extra precondition on one argument; its ``message`` is the tool error the model sees."""

    arg: str
    regex: str | None = None
    one_of: list[Any] | None = None
    min: float | None = None
    max: float | None = None
    message: str


class Action(_Strict):
    """What a tool does to the backend. ``$name`` in ``values``/``set`` is the argument ``name``;
    ``{args.x}``, ``{row.x}``, ``{rows}``, ``{value}`` fill ``result``/``missing`` templates."""

    op: Op
    table: str | None = None
    match: dict[str, str] = Field(default_factory=dict)
    filters: dict[str, str] = Field(default_factory=dict)
    values: dict[str, Any] = Field(default_factory=dict)
    set: dict[str, Any] = Field(default_factory=dict)
    counter: str | None = None
    add: Any = None
    path_arg: str = "path"
    content_arg: str = "content"
    expression_arg: str = "expression"
    fields: list[str] | None = None
    result: str | None = None
    missing: str | None = None
    requires: list[str] = Field(default_factory=list)
    requires_message: str | None = None
    fail_times: int = 0
    fail_message: str = "Error: the service is temporarily unavailable. Try the same call again."
    checks: list[ArgCheck] = Field(default_factory=list)

    @model_validator(mode="after")
    def _needs(self) -> Action:
        table_ops = ("lookup", "select", "insert", "update", "delete", "count")
        if self.op in table_ops and not self.table:
            raise ValueError(f"op {self.op!r} needs a table")
        if self.op in ("lookup", "update", "delete") and not self.match:
            raise ValueError(f"op {self.op!r} needs match")
        if self.op == "reply" and self.result is None:
            raise ValueError("op 'reply' needs result")
        if self.counter is not None and self.add is None:
            raise ValueError("a counter action needs add")
        return self


class ToolSpecModel(_Strict):
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    action: Action

    def properties(self) -> Mapping[str, Any]:
        props = self.parameters.get("properties") or {}
        return props if isinstance(props, Mapping) else {}


class FileGen(_Strict):
    """A generated file: ``count`` copies of ``line`` (``{i}`` is the 1-based line number), with
    ``insert`` lines placed at the given 0-based positions (the needle in a long log)."""

    line: str
    count: int = Field(ge=1, le=5000)
    insert: dict[int, str] = Field(default_factory=dict)


class StateSpec(_Strict):
    tables: dict[str, list[dict[str, Any]]] = Field(default_factory=dict)
    counters: dict[str, float] = Field(default_factory=dict)
    files: dict[str, str | FileGen] = Field(default_factory=dict)


class CallExpect(_Strict):
    """A call of ``tool`` whose arguments satisfy every matcher in ``args``."""

    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    succeeded: bool = True


class StateCheck(_Strict):
    """One assertion on the final state: a table (rows matching ``where`` / ``count``), a counter,
    or a file (``exists``, ``content``)."""

    table: str | None = None
    where: dict[str, Any] = Field(default_factory=dict)
    row: dict[str, Any] | None = None
    count: int | None = None
    counter: str | None = None
    value: Any = None
    file: str | None = None
    exists: bool | None = None
    content: Any = None

    @model_validator(mode="after")
    def _one_target(self) -> StateCheck:
        targets = [t for t in (self.table, self.counter, self.file) if t is not None]
        if len(targets) != 1:
            raise ValueError("a state check names exactly one of table, counter, file")
        if self.table is not None and self.row is None and self.count is None:
            raise ValueError("a table check needs row or count")
        if self.counter is not None and self.value is None:
            raise ValueError("a counter check needs value")
        if self.file is not None and self.exists is None and self.content is None:
            raise ValueError("a file check needs exists or content")
        return self


class Expect(_Strict):
    calls: list[CallExpect] = Field(default_factory=list)
    ordered: bool = False
    terminal: CallExpect | None = None
    forbid: list[str] = Field(default_factory=list)
    state: list[StateCheck] = Field(default_factory=list)
    answer: Any = None
    no_calls: bool = False
    max_calls: int | None = None

    @model_validator(mode="after")
    def _something(self) -> Expect:
        if not (self.calls or self.terminal or self.state or self.no_calls or self.answer is not None):
            raise ValueError("expect states nothing to check")
        return self


class ReferenceCall(_Strict):
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)


class Reference(_Strict):
    """A known solution (the calls in order, then the answer); tests replay it to prove the
    scenario solvable and its validators satisfiable."""

    calls: list[ReferenceCall] = Field(default_factory=list)
    answer: str = ""


class Scenario(_Strict):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$")
    description: str = ""
    system: str | None = None
    prompt: str
    tools: list[str]
    tool_choice: Literal["auto", "required"] = "auto"
    state: StateSpec = Field(default_factory=StateSpec)
    max_turns: int = Field(default=6, ge=1, le=20)
    context_budget: int | None = Field(default=None, ge=500)
    expect: Expect
    reference: Reference


class ScenarioFile(_Strict):
    tier: Literal["plumbing", "selection", "arguments", "sequencing", "recovery", "relevance", "long_context"]
    description: str = ""
    tools: dict[str, ToolSpecModel]
    scenarios: list[Scenario] = Field(min_length=1)


def _matcher_problems(value: Any, where: str) -> list[str]:
    if isinstance(value, Mapping):
        unknown = set(value) - MATCH_OPS
        if unknown:
            return [f"{where}: unknown matcher {sorted(unknown)} (known: {sorted(MATCH_OPS)})"]
        nested = [*value.get("all", ()), *value.get("any_of", ())]
        return [p for i, m in enumerate(nested) for p in _matcher_problems(m, f"{where}[{i}]")]
    return []


def _check_scenario(sc: Scenario, library: Mapping[str, ToolSpecModel]) -> list[str]:
    where = f"scenario {sc.id}"
    problems = [f"{where}: tool {t!r} is not in the file's tools" for t in sc.tools if t not in library]
    offered = {t: library[t] for t in sc.tools if t in library}
    tables, counters = set(sc.state.tables), set(sc.state.counters)
    for name, tool in offered.items():
        act, props = tool.action, tool.properties()
        if (problem := schema_problem(tool.parameters)) is not None:
            problems.append(f"{where}: tool {name!r} has an invalid schema: {problem.message}")
        if act.table is not None and act.table not in tables:
            problems.append(f"{where}: tool {name!r} uses table {act.table!r}, not in state.tables")
        if act.counter is not None and act.counter not in counters:
            problems.append(f"{where}: tool {name!r} uses counter {act.counter!r}, not in state.counters")
        refs = [*act.match.values(), *act.filters.values(), *(c.arg for c in act.checks)]
        dynamic = [v for v in (*act.values.values(), *act.set.values(), act.add) if isinstance(v, str)]
        refs += [v[1:] for v in dynamic if v.startswith("$")]
        texts = [*dynamic, act.result or "", act.missing or "", act.requires_message or "", act.fail_message]
        refs += [m for t in texts for m in TEMPLATE_ARG.findall(t)]
        if act.op in ("read_file", "write_file", "append_file", "delete_file"):
            refs.append(act.path_arg)
        if act.op in ("write_file", "append_file"):
            refs.append(act.content_arg)
        if act.op == "calculate":
            refs.append(act.expression_arg)
        problems += [
            f"{where}: tool {name!r} reads argument {r!r}, not a parameter" for r in refs if r not in props
        ]
        problems += [
            f"{where}: tool {name!r} requires {r!r}, not offered" for r in act.requires if r not in offered
        ]
    exp = sc.expect
    named = [c.tool for c in exp.calls] + ([exp.terminal.tool] if exp.terminal else [])
    problems += [f"{where}: expect names tool {t!r}, not offered" for t in named if t not in offered]
    for call in [*exp.calls, *([exp.terminal] if exp.terminal else [])]:
        props = offered[call.tool].properties() if call.tool in offered else {}
        problems += [
            f"{where}: expect checks argument {a!r} of {call.tool!r}, not a parameter"
            for a in call.args
            if call.tool in offered and a not in props
        ]
        problems += [
            p for a, m in call.args.items() for p in _matcher_problems(m, f"{where}: {call.tool}.{a}")
        ]
    for check in exp.state:
        if check.table is not None and check.table not in tables:
            problems.append(f"{where}: expect checks table {check.table!r}, not in state.tables")
        if check.counter is not None and check.counter not in counters:
            problems.append(f"{where}: expect checks counter {check.counter!r}, not in state.counters")
        if check.file is not None and not any(t.action.op.endswith("_file") for t in offered.values()):
            problems.append(f"{where}: expect checks file {check.file!r} but no file tool is offered")
    problems += _matcher_problems(exp.answer, f"{where}: answer")
    problems += [
        f"{where}: reference calls {c.tool!r}, not offered"
        for c in sc.reference.calls
        if c.tool not in offered
    ]
    if exp.no_calls and (exp.calls or exp.terminal):
        problems.append(f"{where}: no_calls contradicts expected calls")
    return problems


def load_file(path: str | Path, text: str | None = None) -> ScenarioFile:
    """Parse and cross-check one scenario file; ``ConfigError`` lists every problem."""
    source = str(path)
    try:
        data = yaml.safe_load(text if text is not None else Path(path).read_text(encoding="utf-8"))
        parsed = ScenarioFile.model_validate(data)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: invalid YAML: {exc}") from exc
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"{source}: {loc}: {first['msg']} ({exc.error_count()} problem(s))") from exc
    problems = [p for sc in parsed.scenarios for p in _check_scenario(sc, parsed.tools)]
    if problems:
        raise ConfigError(f"{source}: " + "; ".join(problems))
    return parsed


@cache
def load_suite() -> tuple[ScenarioFile, ...]:
    """Every bundled scenario file, in tier order; scenario ids are unique across files."""
    folder = resources.files("tether.evals") / "scenarios"
    files = [
        load_file(f"scenarios/{entry.name}", entry.read_text(encoding="utf-8"))
        for entry in sorted(folder.iterdir(), key=lambda e: e.name)
        if entry.name.endswith((".yaml", ".yml"))
    ]
    files.sort(key=lambda f: TIERS.index(f.tier))
    seen: set[str] = set()
    for f in files:
        for sc in f.scenarios:
            if sc.id in seen:
                raise ConfigError(f"duplicate scenario id {sc.id!r}")
            seen.add(sc.id)
    return tuple(files)
