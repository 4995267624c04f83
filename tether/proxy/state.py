"""What the app keeps on ``app.state.tether``: config, scheduler, core and model metadata."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.config import ServerConfig
from tether.engine.scheduler import Scheduler
from tether.proxy.core import ChatCore, ChatJob, CoreEvent
from tether.proxy.guard import GuardConfig
from tether.proxy.server_tools import ServerTools
from tether.proxy.sessions import SessionStore, enforced_run
from tether.workflows.compaction import compact_job

__all__ = ["AppState"]


@dataclass
class AppState:
    config: ServerConfig
    scheduler: Scheduler
    core: ChatCore
    default_guard: GuardConfig
    server_tools: ServerTools | None = None
    sessions: SessionStore | None = None
    context_budget: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.time)

    def start(self, job: ChatJob, session: str | None = None) -> AsyncIterator[CoreEvent]:
        """Prepare now (errors become HTTP statuses before any byte is sent) and return the event stream.

        With a workflow session, steps and prerequisites are enforced on the reply (server-side tools
        are not combined with sessions).
        """
        if self.config.compaction:
            job, _ = compact_job(self.core, job)
        if session is not None and self.sessions is not None:
            job, steered = self.sessions.steer(session, job)
            notes = [steered] if steered else []
            return enforced_run(self.core, self.core.prepare(job), self.sessions, session, notes)
        if self.server_tools is None:
            return self.core.run(self.core.prepare(job))
        first = self.core.prepare(self.server_tools.offer(job))
        return self.server_tools.run(self.core, first, [t.name for t in job.tools])

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
                "tool_format": self.core.fmt.name,
                "constrain": self.default_guard.constrain,
                "preset": self.config.preset,
                "slots": len(self.scheduler.engines),
                "chat_template_tools": self.core.template.supports_tools,
                "server_tools": sorted(self.server_tools.names) if self.server_tools else [],
                "context_budget": self.context_budget,
                "workflows": sorted(self.sessions.workflows) if self.sessions else [],
            },
        }
