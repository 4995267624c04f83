"""Workflow definitions: Python (JSON Schema or pydantic parameters), YAML and TOML, one-line errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from workflow_support import EditArgs, edit_workflow

from tether.errors import ConfigError
from tether.workflows import (
    Budgets,
    Prerequisite,
    Step,
    ToolDef,
    Workflow,
    load_workflow,
    workflow_from_mapping,
)

EXAMPLES = Path(__file__).parents[3] / "examples"

YAML = """
name: review
system: You review code.
task: Review a.py.
tools:
  - read_file
  - name: comment
    description: Leave a comment
    parameters: {type: object, properties: {path: {type: string}, text: {type: string}}, required: [path, text]}
  - approve
steps:
  - tool: read_file
    args: {path: a.py}
prerequisites:
  - {tool: comment, requires: read_file, match: [path]}
  - {tool: approve, requires: comment, match: {path: path}}
terminal: approve
ordered: true
budgets: {max_iterations: 5, max_violations: 1}
"""

TOML = """
name = "review"
task = "Review a.py."
tools = ["read_file", "approve"]
steps = ["read_file"]
terminal = ["approve"]

[[prerequisites]]
tool = "approve"
requires = "read_file"

[budgets]
max_retries_per_step = 1
"""


def test_python_definition_with_pydantic_parameters() -> None:
    wf = edit_workflow()
    edit = wf.tool("edit_file")
    assert edit is not None and edit.parameters is not None
    assert edit.parameters["required"] == ["path", "text"]
    assert edit.parameters["properties"]["path"]["type"] == "string"
    assert "title" not in edit.parameters
    assert ToolDef.of("x", EditArgs).spec().parameters == edit.parameters
    assert wf.prerequisites_of("edit_file") == (Prerequisite("edit_file", "read_file", (("path", "path"),)),)


def test_build_shorthand() -> None:
    wf = Workflow.build(
        "w",
        tools=["read_file", "edit_file", "done"],
        terminal="done",
        steps=["edit_file"],
        prerequisites=[("edit_file", "read_file", ["path"]), ("done", "edit_file")],
    )
    assert wf.terminal == ("done",) and wf.steps == (Step("edit_file"),)
    assert wf.prerequisites[0].match == (("path", "path"),)
    assert wf.prerequisites[1] == Prerequisite("done", "edit_file")


def test_yaml_and_toml_files(tmp_path: Path) -> None:
    (tmp_path / "w.yaml").write_text(YAML)
    (tmp_path / "w.toml").write_text(TOML)
    wf = load_workflow(tmp_path / "w.yaml")
    assert wf.steps == (Step("read_file", {"path": "a.py"}),)
    assert wf.prerequisites[1].match == (("path", "path"),)
    assert wf.ordered and wf.budgets == Budgets(max_iterations=5, max_violations=1)
    tool = wf.tool("comment")
    assert tool is not None and tool.description == "Leave a comment"
    toml = load_workflow(tmp_path / "w.toml")
    assert toml.terminal == ("approve",) and toml.budgets.max_retries_per_step == 1
    assert toml.tool("read_file") == ToolDef("read_file")


def test_bundled_example_loads() -> None:
    wf = load_workflow(EXAMPLES / "workflow_notes.yaml")
    assert wf.name == "notes_report" and wf.terminal == ("submit_report",)
    assert [s.label() for s in wf.steps] == ["list_files", "read_file(path='notes.txt')"]


BASE: dict[str, Any] = {"name": "w", "tools": ["a", "b"], "terminal": "b"}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"terminal": "zzz"}, "w.yaml: terminal[0]: 'zzz' is not a declared tool"),
        ({"steps": ["a", {"tool": "nope"}]}, "w.yaml: steps[1].tool: 'nope' is not a declared tool"),
        ({"steps": ["b"]}, "w.yaml: steps[0].tool: 'b' is terminal; terminal tools end the run"),
        ({"tools": ["a", "a", "b"]}, "w.yaml: tools: duplicate tool name 'a'"),
        (
            {"budgets": {"max_iterations": 0}},
            "w.yaml: budgets.max_iterations: Input should be greater than or equal to 1",
        ),
        ({"budgets": {"max_iteration": 3}}, "w.yaml: budgets.max_iteration: Extra inputs are not permitted"),
        (
            {"prerequisites": [{"tool": "a", "requires": "q"}]},
            "w.yaml: prerequisites[0].requires: 'q' is not a declared tool",
        ),
        ({"prerequisites": [{"tool": "a"}]}, "w.yaml: prerequisites[0].requires: Field required"),
        (
            {"tools": [{"name": "a", "parameters": {"type": "objekt"}}, "b"]},
            "w.yaml: tools[0].parameters: invalid JSON Schema",
        ),
        ({"error_pattern": "("}, "w.yaml: error_pattern: invalid regular expression"),
        ({"name": ""}, "w.yaml: name: String should have at least 1 character"),
    ],
)
def test_bad_definitions_fail_with_one_line_naming_the_field(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        workflow_from_mapping({**BASE, **change}, source="w.yaml")
    assert err.value.message.startswith(message), err.value.message
    assert "\n" not in err.value.message


def test_missing_required_field_and_bad_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^w: terminal: Field required$"):
        workflow_from_mapping({"name": "w", "tools": ["a"]}, source="w")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: invalid YAML at line 2"):
        load_workflow(bad)
    (tmp_path / "list.yaml").write_text("- a\n")
    with pytest.raises(ConfigError, match="the top level must be a mapping, not list"):
        load_workflow(tmp_path / "list.yaml")
    (tmp_path / "w.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"unknown workflow file type '\.json'"):
        load_workflow(tmp_path / "w.json")
    with pytest.raises(ConfigError, match="cannot read workflow file"):
        load_workflow(tmp_path / "missing.yaml")
    (tmp_path / "bad.toml").write_text("name = \n")
    with pytest.raises(ConfigError, match=r"bad\.toml: invalid TOML"):
        load_workflow(tmp_path / "bad.toml")


def test_python_constructor_validates_too() -> None:
    with pytest.raises(ConfigError, match=r"^terminal: name at least one terminal tool$"):
        Workflow("w", (ToolDef("a"),), terminal=())
    with pytest.raises(ConfigError, match=r"prerequisites\[0\]\.requires: a tool cannot require itself"):
        Workflow("w", (ToolDef("a"),), terminal=("a",), prerequisites=(Prerequisite("a", "a"),))
    with pytest.raises(ConfigError, match=r"budgets\.max_violations: must be >= 0"):
        Budgets(max_violations=-1)
