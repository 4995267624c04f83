"""``tether serve`` stopped where it would load the model, to see the ``ServerConfig`` it built."""

from __future__ import annotations

import pytest

from tether.config import ServerConfig

__all__ = ["capture_serve"]


def capture_serve(monkeypatch: pytest.MonkeyPatch) -> list[ServerConfig]:
    """The configs ``tether serve`` runs with from now on (in order); no model is loaded, no server run."""
    import tether.server

    seen: list[ServerConfig] = []

    def build_app(config: ServerConfig, **_: object) -> object:
        seen.append(config)
        return object()

    monkeypatch.setattr(tether.server, "build_app", build_app)
    monkeypatch.setattr(tether.server, "run_server", lambda app, config: None)
    return seen
