"""What the app keeps on ``app.state.tether``: config, scheduler, the turn pipeline and model metadata."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.config import ServerConfig
from tether.engine.embedding import Embedder
from tether.engine.scheduler import Scheduler
from tether.guardrails.presets import GuardConfig
from tether.proxy.recorder import Recorder
from tether.proxy.responses_store import ResponseStore
from tether.turns.core import ChatCore
from tether.turns.events import ChatJob, TurnEvent
from tether.turns.stages import ServerToolsStage, Turn, TurnPipeline
from tether.workflows.sessions import SessionRef, SessionStore

__all__ = ["AppState"]


@dataclass
class AppState:
    config: ServerConfig
    scheduler: Scheduler
    core: ChatCore
    pipeline: TurnPipeline
    default_guard: GuardConfig
    sessions: SessionStore
    recorder: Recorder  # metrics and the dashboard's recent turns (tether/proxy/recorder.py)
    server_tools: ServerToolsStage | None = None
    context_budget: dict[str, Any] = field(default_factory=dict)
    responses: ResponseStore = field(default_factory=ResponseStore)
    started: float = field(default_factory=time.time)
    # The sentence-embedding model (/v1/embeddings; relevance scoring may share it); None: disabled.
    embedder: Embedder | None = None

    def start(self, job: ChatJob, session: SessionRef | None = None) -> AsyncIterator[TurnEvent]:
        """Where every protocol enters: the turn pipeline's events for ``job`` (pull the first one with
        ``prime`` so that errors before it keep their HTTP status); the recorder sees them on the way."""
        turn = Turn(job) if session is None else Turn(job, session.id, session.workflow)
        return self.recorder.track(self.pipeline.start(turn), job)

    @property
    def model_id(self) -> str:
        return self.core.info.model_id

    @property
    def model_names(self) -> tuple[str, ...]:
        names = [self.model_id, *self.config.model_aliases]
        path = self.core.info.path
        if path:
            names.append(Path(path).name)
        return tuple(dict.fromkeys(names))

    def model_card(self, name: str) -> dict[str, Any]:
        info = self.core.info
        return {
            "id": name,
            "object": "model",
            "created": int(self.started),
            "owned_by": "tether",
            "tether": {
                "n_ctx": info.n_ctx,
                "backend": info.backend,
                "layers": list(info.layers),
                "tool_format": self.core.fmt.name,
                "constrain": self.default_guard.constrain,
                "preset": self.config.preset,
                "slots": len(self.scheduler.engines),
                "chat_template_tools": self.core.template.supports_tools,
                "server_tools": sorted(self.server_tools.names) if self.server_tools else [],
                "context_budget": self.context_budget,
                "workflows": sorted(self.sessions.workflows),
            },
        }
