"""Workflow sessions: the state that lets the proxy enforce a workflow across stateless requests.

A client attaches a workflow to a session, either with ``POST /v1/tether/sessions``
(a registered workflow by name, or an inline definition) or lazily by sending the
headers ``X-Tether-Session: <id>`` and ``X-Tether-Workflow: <registered name>``.
Each request then carries ``X-Tether-Session``; the turn pipeline folds the request's
history (assistant tool calls + their results) into the session's ``WorkflowState``
once, steers, and checks the model's new calls (:mod:`tether.turns.sessions`).
Sessions expire ``ttl_s`` after last use and at most ``max_sessions`` are kept (least
recently used evicted).
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import structlog

from tether.calls import ToolCall
from tether.chat import Message
from tether.errors import ConfigError, InvalidRequestError
from tether.guardrails.interventions import Intervention
from tether.turns.events import ChatJob
from tether.workflows.enforcement import Enforcement, check_calls, observe
from tether.workflows.spec import Workflow
from tether.workflows.state import WorkflowState

__all__ = [
    "SESSION_HEADER",
    "WORKFLOW_HEADER",
    "Session",
    "SessionNotFoundError",
    "SessionSteer",
    "SessionStore",
]

log = structlog.get_logger(__name__)

SESSION_HEADER = "X-Tether-Session"
WORKFLOW_HEADER = "X-Tether-Workflow"
SessionSteer = Literal["off", "next_step"]


class SessionNotFoundError(InvalidRequestError):
    """The session id is unknown or expired, and no workflow was named to start it."""

    status = 404
    code = "session_not_found"


@dataclass
class Session:
    """One client conversation under a workflow."""

    id: str
    workflow: Workflow
    state: WorkflowState
    created: float
    last_used: float
    seen: OrderedDict[str, None] = field(default_factory=OrderedDict)
    steer: SessionSteer = "off"

    def describe(self, ttl_s: float, now: float) -> dict[str, Any]:
        return {
            "session_id": self.id,
            "workflow": self.workflow.name,
            "steer": self.steer,
            "expires_in_s": max(0.0, round(self.last_used + ttl_s - now, 3)),
            "state": self.state.snapshot(),
        }


class SessionStore:
    """Workflow sessions in memory: sliding TTL, LRU cap, registered workflows by name."""

    def __init__(
        self,
        workflows: Iterable[Workflow] = (),
        *,
        ttl_s: float = 3600.0,
        max_sessions: int = 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if ttl_s <= 0 or max_sessions < 1:
            raise ConfigError("sessions: ttl_s must be > 0 and max_sessions >= 1")
        self.workflows: dict[str, Workflow] = {}
        for wf in workflows:
            self.register_workflow(wf)
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self._clock = clock
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def __len__(self) -> int:
        self._expire()
        return len(self._sessions)

    def register_workflow(self, workflow: Workflow) -> None:
        """Make ``workflow`` attachable by name (config or start-up code)."""
        self.workflows[workflow.name] = workflow

    def _expire(self) -> None:
        now = self._clock()
        for sid in [s.id for s in self._sessions.values() if now - s.last_used > self.ttl_s]:
            del self._sessions[sid]
            log.info("session_expired", session=sid)

    def create(
        self, workflow: str | Workflow, session_id: str | None = None, *, steer: SessionSteer = "off"
    ) -> Session:
        """Attach ``workflow`` (a registered name or a ``Workflow``) to a new or reset session."""
        if isinstance(workflow, str):
            found = self.workflows.get(workflow)
            if found is None:
                known = ", ".join(sorted(self.workflows)) or "none"
                raise InvalidRequestError(
                    f"unknown workflow {workflow!r}; registered: {known}", param="workflow"
                )
            workflow = found
        self._expire()
        sid = session_id or secrets.token_urlsafe(16)
        now = self._clock()
        self._sessions.pop(sid, None)
        session = Session(sid, workflow, WorkflowState(workflow), now, now, steer=steer)
        self._sessions[sid] = session
        while len(self._sessions) > self.max_sessions:
            old, _ = self._sessions.popitem(last=False)
            log.info("session_evicted", session=old)
        log.info("session_created", session=sid, workflow=workflow.name, steer=steer)
        return session

    def get(self, session_id: str) -> Session | None:
        """The live session (touching it), or None when unknown or expired."""
        self._expire()
        session = self._sessions.get(session_id)
        if session is not None:
            session.last_used = self._clock()
            self._sessions.move_to_end(session_id)
        return session

    def resolve(self, session_id: str, workflow: str | None = None) -> Session:
        """The session for a request's headers: existing, or created from ``X-Tether-Workflow``."""
        session = self.get(session_id)
        if session is not None:
            if workflow and workflow != session.workflow.name:
                raise InvalidRequestError(
                    f"session {session_id!r} runs workflow {session.workflow.name!r}, not {workflow!r}",
                    param=WORKFLOW_HEADER,
                )
            return session
        if workflow:
            return self.create(workflow, session_id)
        raise SessionNotFoundError(
            f"unknown or expired session {session_id!r}; create it with POST /v1/tether/sessions "
            f"or send {WORKFLOW_HEADER}",
            param=SESSION_HEADER,
        )

    def drop(self, session_id: str) -> bool:
        return self._sessions.pop(session_id, None) is not None

    def observe(self, session_id: str, messages: Sequence[Message]) -> Session:
        """Fold the request's history into the session state (each call id counts once).

        The turn pipeline calls this once per request; ``steer`` and ``check`` then read the state.
        """
        session = self.resolve(session_id)
        new = observe(session.state, messages, session.seen)
        if new:
            log.info("session_observed", session=session_id, new_results=new)
        return session

    def steer(self, session: Session, job: ChatJob) -> tuple[ChatJob, Intervention | None]:
        """``job`` with ``tool_choice`` narrowed to the session's next tool when the session steers,
        the client left the choice open (``auto``/``required``) and offered that tool."""
        if session.steer != "next_step" or job.tool_choice not in ("auto", "required"):
            return job, None
        step = session.state.next_step()
        terminal = session.workflow.terminal
        tool = step.tool if step is not None else (terminal[0] if len(terminal) == 1 else None)
        if tool is None or not any(t.name == tool for t in job.tools):
            return job, None
        log.info("session_steered", session=session.id, tool=tool)
        note = Intervention("workflow_steered", f"tool_choice {job.tool_choice!r} -> {tool!r}", tool)
        return replace(job, tool_choice=tool), note

    def check(self, session: Session, calls: Sequence[ToolCall]) -> Enforcement:
        """Split ``calls`` (the model's new reply) into allowed and blocked; blocked ones carry the
        reason and the tool-role error text."""
        verdict = check_calls(session.state, calls)
        for b in verdict.blocked:
            log.info("session_call_blocked", session=session.id, reason=b.reason, tier=b.tier)
        return verdict

    @staticmethod
    def may_regenerate(session: Session) -> bool:
        """Regeneration is allowed while the session stays within ``budgets.max_violations``."""
        return session.state.violations <= session.workflow.budgets.max_violations

    def describe(self, session_id: str) -> dict[str, Any]:
        session = self.get(session_id)
        if session is None:
            raise SessionNotFoundError(f"unknown or expired session {session_id!r}", param="session_id")
        return session.describe(self.ttl_s, self._clock())
