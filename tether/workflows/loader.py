"""Loading workflows from YAML or TOML files (or mappings): pydantic at the edge, frozen inside.

``load_workflow(path)`` reads ``.yaml``/``.yml``/``.toml``, validates with the
pydantic models below and returns a frozen ``Workflow``. Every problem is one
``ConfigError`` line naming the file and the field, e.g.
``flow.yaml: steps[1].tool: 'foo' is not a declared tool``.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tether.errors import ConfigError
from tether.workflows.spec import Budgets, Prerequisite, Step, ToolDef, Workflow

__all__ = ["WorkflowModel", "load_workflow", "workflow_from_mapping"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ToolModel(_Strict):
    name: str = Field(min_length=1)
    description: str = ""
    parameters: dict[str, Any] | None = None


class StepModel(_Strict):
    tool: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)
    description: str = ""


class PrerequisiteModel(_Strict):
    tool: str = Field(min_length=1)
    requires: str = Field(min_length=1)
    match: list[str] | dict[str, str] = Field(default_factory=list)


class BudgetsModel(_Strict):
    max_iterations: int = Field(default=16, ge=1)
    max_retries_per_step: int = Field(default=3, ge=0)
    max_consecutive_tool_errors: int = Field(default=3, ge=0)
    max_violations: int = Field(default=6, ge=0)


class WorkflowModel(_Strict):
    """The file format (see docs/workflows.md)."""

    name: str = Field(min_length=1)
    description: str = ""
    system: str = ""
    task: str = ""
    tools: list[ToolModel | str] = Field(min_length=1)
    steps: list[StepModel | str] = Field(default_factory=list)
    prerequisites: list[PrerequisiteModel] = Field(default_factory=list)
    terminal: list[str] | str
    ordered: bool = False
    budgets: BudgetsModel = Field(default_factory=BudgetsModel)
    error_pattern: str | None = None

    def freeze(self) -> Workflow:
        tools = tuple(
            ToolDef(t) if isinstance(t, str) else ToolDef(t.name, t.description, t.parameters)
            for t in self.tools
        )
        steps = tuple(
            Step(s) if isinstance(s, str) else Step(s.tool, dict(s.args), s.description) for s in self.steps
        )
        prereqs = tuple(
            Prerequisite(
                p.tool,
                p.requires,
                tuple((m, m) for m in p.match) if isinstance(p.match, list) else tuple(p.match.items()),
            )
            for p in self.prerequisites
        )
        extra: dict[str, Any] = {} if self.error_pattern is None else {"error_pattern": self.error_pattern}
        return Workflow(
            name=self.name,
            tools=tools,
            terminal=(self.terminal,) if isinstance(self.terminal, str) else tuple(self.terminal),
            steps=steps,
            prerequisites=prereqs,
            budgets=Budgets(**self.budgets.model_dump()),
            system=self.system,
            task=self.task,
            description=self.description,
            ordered=self.ordered,
            **extra,
        )


def _where(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("ToolModel", "StepModel", "str", "list[str]", "dict[str,str]"):
            continue  # union branch names pydantic puts in the location
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def _one_line(exc: ValidationError) -> str:
    errors = exc.errors()
    # Prefer the error of the union branch that got furthest (the most specific location).
    first = max(errors, key=lambda e: len(e["loc"])) if errors else None
    if first is None:
        return "invalid workflow"
    return f"{_where(tuple(first['loc']))}: {first['msg']}"


def workflow_from_mapping(data: Any, *, source: str = "workflow") -> Workflow:
    """Validate a mapping (already parsed YAML/TOML/JSON) into a ``Workflow``."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: the top level must be a mapping, not {type(data).__name__}")
    try:
        model = WorkflowModel.model_validate(dict(data))
    except ValidationError as exc:
        raise ConfigError(f"{source}: {_one_line(exc)}") from None
    try:
        return model.freeze()
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc.message}") from None


def load_workflow(path: str | Path) -> Workflow:
    """Read a workflow from a ``.yaml``/``.yml`` or ``.toml`` file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read workflow file ({exc.strerror or exc})") from None
    suffix = p.suffix.lower()
    try:
        if suffix in (".yaml", ".yml"):
            data = yaml.safe_load(text)
        elif suffix == ".toml":
            data = tomllib.loads(text)
        else:
            raise ConfigError(f"{p}: unknown workflow file type {suffix!r}; use .yaml, .yml or .toml")
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{p}: invalid YAML{at}: {getattr(exc, 'problem', None) or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: invalid TOML: {exc}") from None
    return workflow_from_mapping(data, source=str(p))
