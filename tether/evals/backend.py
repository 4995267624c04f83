"""The stateful fake tool backend a scenario declares: tables, counters and files in a work dir.

Every call goes through the same harness checks for every preset, the way an agent
harness treats tool calls: an unknown tool, arguments that are not a JSON object
or that fail the tool's JSON schema, an unmet prerequisite or a failed argument
precondition all come back to the model as an ``Error: ...`` tool result (so a
model without guardrails sees the same error a guarded one would). Only then does
the tool's declarative :class:`~tether.evals.scenario_spec.Action` run.
"""

from __future__ import annotations

import ast
import copy
import json
import math
import operator
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema

from tether.errors import ToolError
from tether.evals.scenario_spec import Action, FileGen, Scenario, ToolSpecModel
from tether.sandbox import Workspace

__all__ = ["Backend", "CallOutcome", "same_value"]

_MAX_FILE = 1 << 20
_TEMPLATE = re.compile(r"\{(args|row)\.(\w+)\}|\{(rows|value|count)\}")


@dataclass(frozen=True)
class CallOutcome:
    """One executed call: the name and arguments as written, whether it succeeded, the result text."""

    name: str
    arguments: dict[str, Any] | None
    ok: bool
    text: str


def same_value(a: Any, b: Any) -> bool:
    """Equality for matching rows to arguments: strings ignore case and surrounding space,
    numbers compare numerically (``2 == 2.0``), booleans only equal booleans."""
    if isinstance(a, str) and isinstance(b, str):
        return a.strip().casefold() == b.strip().casefold()
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-9)
    return bool(a == b)


def _render(
    template: str, *, args: Mapping[str, Any], row: Mapping[str, Any] | None = None, **extra: Any
) -> str:
    def one(m: re.Match[str]) -> str:
        space, key, name = m.group(1), m.group(2), m.group(3)
        value = extra.get(name) if name is not None else (args if space == "args" else row or {}).get(key)
        if value is None:
            return ""
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

    return _TEMPLATE.sub(one, template)


_BINOPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}


def _arith(node: ast.AST) -> float:
    """Numbers, + - * / // % **, unary minus and parentheses; nothing else."""
    if isinstance(node, ast.Expression):
        return _arith(node.body)
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    ):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _arith(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _arith(node.left), _arith(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 64:
            raise ValueError("exponent too large")
        return float(_BINOPS[type(node.op)](left, right))
    raise ValueError("only numbers and + - * / // % ** are allowed")


def _file_text(spec: str | FileGen) -> str:
    if isinstance(spec, str):
        return spec
    lines = [spec.line.replace("{i}", str(i + 1)) for i in range(spec.count)]
    for at, text in sorted(spec.insert.items()):
        lines.insert(min(at, len(lines)), text)
    return "\n".join(lines) + "\n"


class Backend:
    """The world of one scenario run; ``call`` executes one tool call against it."""

    def __init__(self, scenario: Scenario, library: Mapping[str, ToolSpecModel], work_dir: Path) -> None:
        self.tools = {name: library[name] for name in scenario.tools}
        self.tables: dict[str, list[dict[str, Any]]] = copy.deepcopy(dict(scenario.state.tables))
        self.counters: dict[str, float] = dict(scenario.state.counters)
        self.workspace = Workspace(work_dir)
        for rel, spec in scenario.state.files.items():
            self.workspace.write_bytes(
                self.workspace.resolve(rel), _file_text(spec).encode(), max_bytes=_MAX_FILE
            )
        self.succeeded: set[str] = set()
        self._attempts: Counter[str] = Counter()
        self._validators = {
            name: jsonschema.Draft202012Validator(tool.parameters) for name, tool in self.tools.items()
        }

    # -- the harness checks ----------------------------------------------------------

    def call(self, name: str, arguments: Any) -> CallOutcome:
        """Execute one call; every problem becomes an ``Error: ...`` result the model sees."""
        if name not in self.tools:
            offered = ", ".join(self.tools)
            return CallOutcome(
                name, None, False, f"Error: unknown tool '{name}'. Available tools: {offered}."
            )
        args = arguments
        if isinstance(arguments, str):
            try:
                args = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as exc:
                return CallOutcome(
                    name, None, False, f"Error: the arguments for '{name}' are not valid JSON: {exc}."
                )
        if not isinstance(args, dict):
            return CallOutcome(name, None, False, f"Error: the arguments for '{name}' must be a JSON object.")
        problems = sorted(self._validators[name].iter_errors(args), key=lambda e: list(e.path))
        if problems:
            detail = "; ".join(
                f"{'.'.join(map(str, e.path)) or '(arguments)'}: {e.message}" for e in problems
            )
            return CallOutcome(name, args, False, f"Error: invalid arguments for tool '{name}': {detail}.")
        action = self.tools[name].action
        refusal = self._preconditions(name, action, args)
        if refusal is not None:
            return CallOutcome(name, args, False, refusal)
        try:
            text = self._run(action, args)
        except ToolError as exc:
            return CallOutcome(name, args, False, f"Error: {exc}")
        self.succeeded.add(name)
        return CallOutcome(name, args, True, text)

    def _preconditions(self, name: str, action: Action, args: Mapping[str, Any]) -> str | None:
        for needed in action.requires:
            if needed not in self.succeeded:
                message = action.requires_message or f"Error: call {needed} before {name}."
                return _render(message, args=args)
        for check in action.checks:
            if check.arg not in args:
                continue
            value = args[check.arg]
            bad = (
                (check.regex is not None and not re.fullmatch(check.regex, str(value)))
                or (check.one_of is not None and not any(same_value(value, v) for v in check.one_of))
                or (check.min is not None and isinstance(value, int | float) and value < check.min)
                or (check.max is not None and isinstance(value, int | float) and value > check.max)
            )
            if bad:
                return _render(check.message, args=args)
        self._attempts[name] += 1
        if self._attempts[name] <= action.fail_times:
            return _render(action.fail_message, args=args)
        return None

    # -- the actions -----------------------------------------------------------------

    def _value(self, spec: Any, args: Mapping[str, Any]) -> Any:
        if isinstance(spec, str):
            if spec.startswith("$"):
                return args.get(spec[1:])
            return _render(spec, args=args)
        return spec

    def _matching(
        self, table: str, pairs: Mapping[str, str], args: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        wanted = {field: args[arg] for field, arg in pairs.items() if args.get(arg) is not None}
        return [r for r in self.tables[table] if all(same_value(r.get(f), v) for f, v in wanted.items())]

    def _missing(self, action: Action, args: Mapping[str, Any]) -> ToolError:
        text = _render(action.missing, args=args) if action.missing else f"no {action.table} entry matches"
        return ToolError(text.removeprefix("Error: "))

    def _run(self, action: Action, args: Mapping[str, Any]) -> str:
        op, table = action.op, action.table or ""
        rows: list[dict[str, Any]] = []
        row: dict[str, Any] | None = None
        value: Any = None
        default = "OK"
        if op in ("lookup", "update", "delete"):
            if any(args.get(a) is None for a in action.match.values()):
                raise self._missing(action, args)
            rows = self._matching(table, action.match, args)
            if not rows:
                raise self._missing(action, args)
            row = rows[0]
            if op == "update":
                for r in rows:
                    r.update({k: self._value(v, args) for k, v in action.set.items()})
                default = f"Updated {len(rows)} {table} entr{'y' if len(rows) == 1 else 'ies'}."
            elif op == "delete":
                self.tables[table] = [r for r in self.tables[table] if not any(r is x for x in rows)]
                default = f"Deleted {len(rows)} {table} entr{'y' if len(rows) == 1 else 'ies'}."
            else:
                default = json.dumps(self._project(row, action), ensure_ascii=False)
        elif op in ("select", "count"):
            rows = self._matching(table, action.filters, args)
            value = len(rows)
            default = json.dumps([self._project(r, action) for r in rows], ensure_ascii=False)
            if op == "count":
                default = str(value)
        elif op == "insert":
            row = {k: self._value(v, args) for k, v in action.values.items()}
            existing = self.tables[table]
            if "id" not in row and all(isinstance(r.get("id"), int) for r in existing):
                row["id"] = max((int(r["id"]) for r in existing), default=0) + 1
            existing.append(row)
            default = f"Created {table} entry: {json.dumps(row, ensure_ascii=False)}"
        elif op == "calculate":
            try:
                value = _arith(ast.parse(str(args.get(action.expression_arg, "")), mode="eval"))
            except (SyntaxError, ValueError, ZeroDivisionError, OverflowError) as exc:
                raise ToolError(f"cannot evaluate the expression: {exc}") from exc
            value = int(value) if value.is_integer() and abs(value) < 1e15 else round(value, 10)
            default = str(value)
        elif op != "reply":
            default = self._file_op(action, args)
        if action.counter is not None:
            amount = self._value(action.add, args)
            if not isinstance(amount, int | float) or isinstance(amount, bool):
                raise ToolError(f"the amount must be a number, got {amount!r}")
            self.counters[action.counter] += amount
            value = self.counters[action.counter]
            value = int(value) if float(value).is_integer() else value
        if action.result is None:
            return default
        shown = [self._project(r, action) for r in rows]
        return _render(action.result, args=args, row=row, rows=shown, value=value, count=len(rows))

    def _project(self, row: Mapping[str, Any], action: Action) -> dict[str, Any]:
        return {k: row.get(k) for k in action.fields} if action.fields else dict(row)

    def _file_op(self, action: Action, args: Mapping[str, Any]) -> str:
        ws = self.workspace
        if action.op == "list_files":
            names = sorted(ws.relative(p) for p in ws.root.rglob("*") if p.is_file())
            return "\n".join(names) if names else "(no files)"
        path = ws.resolve(str(args.get(action.path_arg, "")))
        rel = ws.relative(path)
        if action.op == "read_file":
            data, _ = ws.read_bytes(path, max_bytes=_MAX_FILE)
            return data.decode("utf-8", errors="replace")
        if action.op == "delete_file":
            if not path.is_file():
                raise ToolError(f"file not found: {rel}")
            path.unlink()
            return f"Deleted {rel}."
        content = str(args.get(action.content_arg, ""))
        if action.op == "append_file" and path.is_file():
            old, _ = ws.read_bytes(path, max_bytes=_MAX_FILE)
            content = old.decode("utf-8", errors="replace") + content
        ws.write_bytes(path, content.encode(), max_bytes=_MAX_FILE)
        return f"Wrote {len(content)} characters to {rel}."

    # -- the final state -------------------------------------------------------------

    def files(self) -> dict[str, str]:
        ws = self.workspace
        out: dict[str, str] = {}
        for p in sorted(ws.root.rglob("*")):
            if p.is_file():
                out[ws.relative(p)] = p.read_text(encoding="utf-8", errors="replace")
        return out
