"""What the app keeps on ``app.state.tether``: config, scheduler, core and model metadata."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.config import ServerConfig
from tether.engine.scheduler import Scheduler
from tether.proxy.core import ChatCore
from tether.proxy.guard import GuardConfig

__all__ = ["AppState"]


@dataclass
class AppState:
    config: ServerConfig
    scheduler: Scheduler
    core: ChatCore
    default_guard: GuardConfig
    started: float = field(default_factory=time.time)

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
            },
        }
