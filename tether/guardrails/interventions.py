"""Interventions: the record of everything the guardrails changed or refused, and their counters.

Each :class:`Intervention` is logged as one structlog event named
``guardrail_<kind>`` and counted on a :class:`GuardrailStats` the caller owns (there
is no process-wide counter). ``to_dict()`` gives the JSON shape the proxy reports in
``FinishOut.interventions`` and under ``"tether": {"interventions": [...]}``.

Kinds, one set for the server, ``Guardrails``/``wrap``, the runner and the evals:

* ``rescued`` / ``rescue_disabled``: a call parsing had to repair (or write as text in
  ``content``) was kept, or refused as text under a preset without rescue;
* ``name_resolved`` / ``name_unresolved`` / ``repick``: layers 1 and 2 of name resolution;
* ``args_coerced`` / ``args_defaulted`` / ``args_repaired`` / ``args_invalid``: argument checks;
* ``args_reshaped``: a string value put in the shape its parameter asks for (a date, a state code);
* ``args_filled``: enum values the request names, added to (or replacing an unnamed choice of) the
  lone call of a fresh ask;
* ``args_grounded``: a call of a fitting tool whose required strings nobody said (or that hold a
  value another parameter keeps), asked again with them limited to the request's words (``strict``);
* ``args_dropped``: optional values nobody said, which would have overridden the tool's default,
  left out of a call to a fresh ask (``strict``);
* ``duplicate_dropped``: a call identical to an earlier call in the same reply;
* ``duplicate_advanced``: such a repeat whose one listed value ("copper and aluminum") moved on to
  the list's next item no call used (``strict``);
* ``duplicate_mixed``: a later call that only combines anew values earlier calls of the reply hold;
* ``variant_merged``: a call that only reorders an earlier one's values, or differs from it only in
  optional values nobody said, merged into it (``strict``); or one that changes one value of an
  earlier call to a guess, dropped;
* ``call_repeated``: a call identical to one of the previous turn whose result came back, or to one
  made since the user spoke with nothing new called after it (``strict``);
* ``call_abstained``: a call whose values the conversation lacks was not made (``strict``,
  ``tool_choice: auto``, a fresh ask): a wrong guess is worse than no guess;
* ``call_redirected``: a call abstained from for a value another offered tool gives became that
  tool's call (``strict``);
* ``answer_redecided``: every call was dropped and nothing was said, so the model answered in text;
* ``answer_recalled``: a text answer to a fresh ask stated what an offered tool exists to supply
  (an invented result), so the reply was decided again as a call (``strict``);
* ``reply_repaired``: a structured reply from a backend that does not enforce its schema was repaired
  as tool arguments are (the JSON found in the text, read leniently, values coerced);
* ``reply_closed``: a structured reply cut short (``max_tokens``, the repetition stop) where no budget
  reached the sampler was closed as briefly as its schema allows, so it still parses;
* ``reply_invalid``: a structured reply (``response_format``) ended without holding its schema: a
  backend that does not enforce it wrote it (passed on as written, with the reason);
* ``repetition_stopped``: the generation looped on a short unit and was cut (finish ``length``);
* ``retry``, ``failed``, ``unknown_tool_text``: the retry policy of ``Guardrails``;
* ``decision_steered``: layer 0 made the reply a call (or an answer) where the model alone leaned
  the other way, because of how well the offered tools match the request;
* ``workflow_blocked`` / ``workflow_steered`` / ``workflow_regenerated`` /
  ``workflow_fallback_text``: step enforcement on workflow sessions;
* ``server_tool`` / ``server_tools_limit``: tools the server ran itself.
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
        "rescued",
        "rescue_disabled",
        "name_resolved",
        "name_unresolved",
        "repick",
        "args_coerced",
        "args_defaulted",
        "args_filled",
        "args_reshaped",
        "args_repaired",
        "args_invalid",
        "duplicate_dropped",
        "duplicate_advanced",
        "duplicate_mixed",
        "variant_merged",
        "args_grounded",
        "args_dropped",
        "call_repeated",
        "repetition_stopped",
        "reply_invalid",
        "reply_closed",
        "reply_repaired",
        "call_abstained",
        "call_redirected",
        "answer_redecided",
        "answer_recalled",
        "retry",
        "failed",
        "unknown_tool_text",
        "decision_steered",
        "workflow_blocked",
        "workflow_steered",
        "workflow_regenerated",
        "workflow_fallback_text",
        "server_tool",
        "server_tools_limit",
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
    tier: int | None = None  # the nudge tier of a blocked workflow call

    def to_dict(self) -> dict[str, Any]:
        out = {
            "kind": self.kind,
            "detail": self.detail,
            "tool": self.tool,
            "before": self.before,
            "after": self.after,
        }
        if self.tier is not None:
            out["tier"] = self.tier
        return out


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
