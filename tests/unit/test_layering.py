"""The import graph runs one way: no package imports a package above it, and no two packages
import each other, directly or round a cycle.

Every module under ``tether/`` is parsed (not imported); each import of ``tether.X...`` is an
edge to package ``X`` (a subpackage such as ``grammar``, or a top-level module such as
``coercion``). Imports inside functions and under ``if TYPE_CHECKING:`` count too: they still
say that one package needs another. ``LAYERS`` below is the declared order, bottom first; a
package may import only packages in layers below its own, never one beside it in the same
layer. The top layer (the ``tether`` package module, with its lazy re-exports, and the CLI)
may import anything.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import tether

ROOT = Path(tether.__file__).parent

# Bottom first. Where the intended order had two packages in one layer and one needs the other,
# the layer is split into lettered steps: chat needs calls, coercion needs jsonscan and
# schema_kinds needs coercion; config_file reads config and config_cli edits config_file; evals
# serves its local targets through server.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("0", ("caches",)),
    ("0a", ("aio", "calls", "errors", "jsonscan", "logging", "schema_check")),
    ("0b", ("chat", "coercion")),
    ("0c", ("schema_kinds",)),
    ("1", ("grammar",)),
    ("2", ("engine", "sandbox", "selection")),
    ("3", ("guardrails", "mcp")),
    ("4", ("turns",)),
    ("5", ("workflows",)),
    ("6a", ("config",)),
    ("6b", ("config_file",)),
    ("6c", ("config_cli",)),
    ("7", ("launch", "proxy")),
    ("8a", ("server",)),
    ("8b", ("evals",)),
    ("8c", ("cli_help",)),
    ("9", ("cli", "tether")),
)

LEVEL = {pkg: i for i, (_, pkgs) in enumerate(LAYERS) for pkg in pkgs}
LABEL = {pkg: label for label, pkgs in LAYERS for pkg in pkgs}
TOP = len(LAYERS) - 1


@dataclass(frozen=True)
class Edge:
    file: Path
    line: int
    module: str  # what the import names, e.g. ``tether.grammar.spec``
    source: str  # the importing package
    target: str  # the imported package

    def __str__(self) -> str:
        where = self.file.relative_to(ROOT.parent)
        return (
            f"{where}:{self.line} imports {self.module} (package {self.target}, layer {_label(self.target)}) "
            f"from package {self.source} (layer {_label(self.source)})"
        )


def _label(pkg: str) -> str:
    return LABEL.get(pkg, "undeclared")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package(module: str) -> str:
    """``tether.grammar.spec`` -> ``grammar``, ``tether.coercion`` -> ``coercion``, ``tether`` -> ``tether``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "tether"


def _packages_on_disk() -> set[str]:
    found = {"tether"}
    for path in ROOT.iterdir():
        if path.is_dir() and any(path.rglob("*.py")):
            found.add(path.name)
        elif path.suffix == ".py" and path.stem != "__init__":
            found.add(path.stem)
    return found


def _imported(node: ast.AST, module: str, is_package: bool) -> Iterator[str]:
    """The absolute module names ``node`` imports (relative imports resolved against ``module``)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            base = module.split(".")
            base = base[: len(base) - node.level + (1 if is_package else 0)]
            stem = ".".join([*base, node.module] if node.module else base)
        else:
            stem = node.module or ""
        if stem == "tether":  # ``from tether import errors``: the names may be modules themselves
            on_disk = _packages_on_disk()
            yield from (f"tether.{a.name}" if a.name in on_disk else "tether" for a in node.names)
        else:
            yield stem
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute | ast.Name)
        and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == "import_module"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        yield node.args[0].value


def _edges() -> list[Edge]:
    edges: list[Edge] = []
    for path in sorted(ROOT.rglob("*.py")):
        module = _module_name(path)
        source = _package(module)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            for name in _imported(node, module, path.name == "__init__.py"):
                if name != "tether" and not name.startswith("tether."):
                    continue
                target = _package(name)
                if target != source:
                    edges.append(Edge(path, getattr(node, "lineno", 0), name, source, target))
    return edges


def _cycles(edges: list[Edge]) -> list[list[str]]:
    """The package cycles: each strongly connected component with more than one package (Tarjan)."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        graph.setdefault(e.source, set()).add(e.target)
        graph.setdefault(e.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component: list[str] = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_every_package_has_a_declared_layer() -> None:
    undeclared = sorted(_packages_on_disk() - set(LEVEL))
    assert not undeclared, f"declare a layer in LAYERS for: {', '.join(undeclared)}"
    stale = sorted(set(LEVEL) - _packages_on_disk())
    assert not stale, f"LAYERS names packages that do not exist: {', '.join(stale)}"


def test_no_package_imports_one_at_or_above_its_own_layer() -> None:
    wrong = [
        e
        for e in _edges()
        if LEVEL.get(e.source, -1) != TOP and LEVEL.get(e.target, TOP + 1) >= LEVEL.get(e.source, -1)
    ]
    assert not wrong, f"{len(wrong)} import(s) run up or across the layers:\n" + "\n".join(map(str, wrong))


def test_the_package_graph_has_no_cycle() -> None:
    edges = _edges()
    cycles = _cycles(edges)
    lines = []
    for component in cycles:
        members = set(component)
        lines.append(f"cycle between {', '.join(component)}:")
        lines.extend(f"  {e}" for e in edges if e.source in members and e.target in members)
    assert not cycles, "\n".join(lines)


# -- the checker itself ---------------------------------------------------------------------------


def _parsed(source: str, module: str, *, is_package: bool = False) -> list[str]:
    return [name for node in ast.walk(ast.parse(source)) for name in _imported(node, module, is_package)]


def test_the_checker_reads_every_kind_of_import() -> None:
    source = """
from typing import TYPE_CHECKING
import tether.engine.base
from tether.grammar.spec import OutputSpec
from tether import errors, __version__
from . import sibling
from ..calls import ToolCall
if TYPE_CHECKING:
    from tether.proxy.app import create_app
def later():
    import importlib
    importlib.import_module("tether.server")
"""
    names = _parsed(source, "tether.turns.stages")
    assert [_package(n) for n in names if n.startswith("tether")] == [
        "engine",
        "grammar",
        "errors",
        "tether",
        "turns",
        "calls",
        "proxy",
        "server",
    ]
    assert _parsed("from .core import ChatCore", "tether.turns", is_package=True) == ["tether.turns.core"]


def test_the_checker_finds_an_upward_edge_and_a_cycle() -> None:
    here = ROOT / "grammar" / "provider.py"
    up = Edge(here, 1, "tether.engine.base", "grammar", "engine")
    down = Edge(here, 2, "tether.grammar.spec", "engine", "grammar")
    assert LEVEL[up.target] >= LEVEL[up.source] and LEVEL[down.target] < LEVEL[down.source]
    assert str(up) == (
        "tether/grammar/provider.py:1 imports tether.engine.base (package engine, layer 2) "
        "from package grammar (layer 1)"
    )
    assert _cycles([up, down]) == [["engine", "grammar"]]
    assert _cycles([down]) == []
