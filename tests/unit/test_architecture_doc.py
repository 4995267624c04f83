"""docs/architecture.md names real places: every path it quotes exists, and every name it tells a
newcomer to extend is defined where it says."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"

# `path` quotes: anything in backticks that starts in a top-level folder of the checkout.
_PATH = re.compile(r"`((?:tether|tests|docs|benchmarks|examples)/[^`\s]*)`")

# What "Where to add" and the engine section tell a newcomer to use, and where it must be defined.
NAMED = [
    ("ToolCallFormat", "tether/grammar/formats/base.py"),
    ("STEPS", "tether/guardrails/pipeline.py"),
    ("GuardContext", "tether/guardrails/steps/context.py"),
    ("never_asks", "tether/guardrails/steps/context.py"),
    ("GuardConfig", "tether/guardrails/presets.py"),
    ("ErrorShapeMiddleware", "tether/proxy/middleware.py"),
    ("event_stream", "tether/proxy/sse.py"),
    ("collect", "tether/turns/events.py"),
    ("ChatJob", "tether/turns/events.py"),
    ("AppState", "tether/proxy/state.py"),
    ("ContextEngine", "tether/engine/base.py"),
    ("Engine", "tether/engine/base.py"),
    ("Decides", "tether/engine/base.py"),
    ("ReportsBatch", "tether/engine/base.py"),
    ("Forcing", "tether/engine/batch/draft.py"),
    ("token_loop", "tether/engine/loop.py"),
    ("RemoteTokenEngine", "tether/engine/remote/token_engine.py"),
    ("ChatBackend", "tether/engine/remote/chat.py"),
    ("ENGINE_LOADERS", "tether/server.py"),
    ("ReplySpec", "tether/grammar/spec.py"),
    ("NameChoiceSpec", "tether/grammar/spec.py"),
    ("JsonSpec", "tether/grammar/spec.py"),
    ("ChatCore", "tether/turns/core.py"),
    ("ChatBackendCore", "tether/turns/chat_core.py"),
    ("TurnPipeline", "tether/turns/stages.py"),
    ("SessionStage", "tether/workflows/stage.py"),
    ("ServerToolsStage", "tether/turns/stages.py"),
    ("CompactionStage", "tether/turns/stages.py"),
    ("SchedulerRegenerator", "tether/turns/regenerate.py"),
    ("ToolCall", "tether/calls.py"),
    ("ServerConfig", "tether/config.py"),
]


def _defined(path: Path) -> set[str]:
    """Top-level classes, functions and assigned names of a module."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_every_quoted_path_exists() -> None:
    paths = sorted(set(_PATH.findall(DOC.read_text(encoding="utf-8"))))
    assert len(paths) > 40, "the doc should map the code by its paths"
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


@pytest.mark.parametrize(("name", "module"), NAMED)
def test_named_extension_points_are_where_the_doc_says(name: str, module: str) -> None:
    text = DOC.read_text(encoding="utf-8")
    assert f"`{name}`" in text or f"`{name}(" in text or name in text, f"the doc no longer mentions {name}"
    assert module in text, f"the doc no longer names {module}"
    assert name in _defined(ROOT / module), f"{name} is not defined in {module}"


def test_every_package_is_in_the_layer_table() -> None:
    """A new package must be placed in the map: each one under tether/ appears in the doc."""
    packages = sorted(p.name for p in (ROOT / "tether").iterdir() if (p / "__init__.py").exists())
    text = DOC.read_text(encoding="utf-8")
    unmapped = [p for p in packages if f"`tether/{p}/`" not in text]
    assert not unmapped, f"packages missing from docs/architecture.md's layer table: {unmapped}"
