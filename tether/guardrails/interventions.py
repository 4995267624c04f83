"""Interventions: the record of everything the guardrails changed or refused, and their counters.

Each :class:`Intervention` is logged as one structlog event named
``guardrail_<kind>`` and counted on a :class:`GuardrailStats` the caller owns (there
is no process-wide counter). ``to_dict()`` gives the JSON shape the proxy reports in
``FinishOut.interventions`` and under ``"tether": {"interventions": [...]}``.

Kinds:

* ``call_rescued``: a tool call written as text in ``message.content`` was parsed;
* ``name_resolved`` / ``name_unresolved``: layer-1 name normalization;
* ``repick``: layer-2 constrained re-pick of a name (``after`` None when it gave none);
* ``args_coerced`` / ``args_defaulted`` / ``args_invalid``: argument checks;
* ``retry``: a retry was requested (``detail`` holds the reason and tier);
* ``failed``: retries ran out; ``unknown_tool_text``: the turn became the error text.

Serving path only (``tether.proxy.guard``): ``rescued`` / ``rescue_disabled`` (a malformed call was
repaired, or left as text under a preset without rescue), ``args_repaired`` (regenerated under the
schema grammar), ``duplicate_dropped`` (a call identical to an earlier one in the same reply), ``placeholder_dropped``
(under ``tool_choice: auto``, a call whose arguments hold the format prompt's example value, which no
message mentions: the model had no value to give).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import structlog

__all__ = ["KINDS", "GuardrailStats", "Intervention"]

log = structlog.get_logger(__name__)

KINDS: frozenset[str] = frozenset(
    {
        "call_rescued",
        "name_resolved",
        "name_unresolved",
        "repick",
        "args_coerced",
        "args_defaulted",
        "args_invalid",
        "retry",
        "failed",
        "unknown_tool_text",
        "rescued",
        "rescue_disabled",
        "args_repaired",
        "duplicate_dropped",
        "placeholder_dropped",
    }
)


@dataclass(frozen=True)
class Intervention:
    """One thing the guardrails did. ``before``/``after`` are JSON-compatible values."""

    kind: str
    detail: str
    tool: str | None = None
    before: Any = None
    after: Any = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "detail": self.detail,
            "tool": self.tool,
            "before": self.before,
            "after": self.after,
        }


class GuardrailStats:
    """Counters per intervention kind and per decision action; thread-safe, owned by the caller."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._interventions: dict[str, int] = {}
        self._actions: dict[str, int] = {}

    def record(self, intervention: Intervention) -> None:
        """Count and log one intervention (event ``guardrail_<kind>``)."""
        with self._lock:
            self._interventions[intervention.kind] = self._interventions.get(intervention.kind, 0) + 1
        log.info(
            f"guardrail_{intervention.kind}",
            tool=intervention.tool,
            detail=intervention.detail,
        )

    def record_action(self, action: str) -> None:
        with self._lock:
            self._actions[action] = self._actions.get(action, 0) + 1

    @property
    def interventions(self) -> dict[str, int]:
        """A copy of the per-kind counts."""
        with self._lock:
            return dict(self._interventions)

    @property
    def actions(self) -> dict[str, int]:
        """A copy of the per-action counts (``execute``, ``retry``, ``fail``, ``answer``)."""
        with self._lock:
            return dict(self._actions)

    def snapshot(self) -> dict[str, dict[str, int]]:
        return {"interventions": self.interventions, "actions": self.actions}
