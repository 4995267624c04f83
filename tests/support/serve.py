"""``tether serve`` stopped where it would load the model, to see the ``ServerConfig`` it built."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tether.config import ServerConfig

__all__ = ["capture_serve", "isolated_serve", "serve"]


def capture_serve(monkeypatch: pytest.MonkeyPatch) -> list[ServerConfig]:
    """The configs ``tether serve`` runs with from now on (in order); no model is loaded, no server run."""
    import tether.server

    seen: list[ServerConfig] = []

    def build_app(config: ServerConfig, **_: object) -> object:
        seen.append(config)
        return object()

    monkeypatch.setattr(tether.server, "build_app", build_app)
    monkeypatch.setattr(tether.server, "bind", lambda config: None)
    monkeypatch.setattr(tether.server, "run_server", lambda app, config, sock=None: None)
    return seen


def isolated_serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[ServerConfig]:
    """``capture_serve`` in an empty working directory with no ``TETHER_*`` variables and no user config."""
    for name in [name for name in os.environ if name.startswith("TETHER_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    return capture_serve(monkeypatch)


def serve(*args: str) -> tuple[int, str]:
    """``tether serve ARGS``: its exit code and output."""
    from tether.cli import app

    result = CliRunner().invoke(app, ["serve", *args])
    return result.exit_code, result.output
