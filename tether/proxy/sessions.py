"""Workflow sessions: the proxy enforces a workflow across stateless ``/v1/chat/completions`` calls.

A client attaches a workflow to a session, either with ``POST /v1/tether/sessions``
(a registered workflow by name, or an inline definition) or lazily by sending the
headers ``X-Tether-Session: <id>`` and ``X-Tether-Workflow: <registered name>``.
Each request then carries ``X-Tether-Session``; the proxy folds the request's
history (assistant tool calls + their results) into the session's
``WorkflowState`` and checks the model's new calls against it.

A blocked call (premature terminal, missing prerequisite) never reaches the client.
The proxy regenerates once with the blocked turn and its tool-role error in context
(naming the needed tool in ``tool_choice`` when the client offered it); if the model
breaks the rules again, blocked calls are dropped and, when nothing is left, the
reply becomes text naming what is missing (``finish_reason: "stop"``). Everything is
reported in ``FinishOut.interventions``. Sessions expire ``ttl_s`` after last use and
at most ``max_sessions`` are kept (least recently used evicted).

A session created with ``"steer": "next_step"`` also narrows each request whose
``tool_choice`` is ``auto`` or ``required`` to the next pending step's tool (then
the terminal tool), as ``WorkflowRunner(steer="next_step")`` does: blocking alone
cannot stop a small model from repeating a finished step.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import structlog
from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from tether.aio import closing_stream
from tether.chat import Message
from tether.errors import ConfigError, ContextOverflowError, InvalidRequestError
from tether.proxy.core import CallOut, ChatCore, ChatJob, CoreEvent, FinishOut, Prepared, TextOut, Usage
from tether.workflows.enforcement import CallLike, Enforcement, check_calls, observe
from tether.workflows.loader import workflow_from_mapping
from tether.workflows.spec import Workflow
from tether.workflows.state import WorkflowState

__all__ = [
    "SESSION_HEADER",
    "WORKFLOW_HEADER",
    "Session",
    "SessionCreate",
    "SessionNotFoundError",
    "SessionSteer",
    "SessionStore",
    "enforced_run",
    "router",
    "store_of",
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
        """Fold the request's history into the session state (each call id counts once)."""
        session = self.resolve(session_id)
        new = observe(session.state, messages, session.seen)
        if new:
            log.info("session_observed", session=session_id, new_results=new)
        return session

    def steer(self, session_id: str, job: ChatJob) -> tuple[ChatJob, dict[str, Any] | None]:
        """``job`` with ``tool_choice`` narrowed to the session's next tool when the session steers,
        the client left the choice open (``auto``/``required``) and offered that tool."""
        session = self.observe(session_id, job.messages)
        if session.steer != "next_step" or job.tool_choice not in ("auto", "required"):
            return job, None
        step = session.state.next_step()
        terminal = session.workflow.terminal
        tool = step.tool if step is not None else (terminal[0] if len(terminal) == 1 else None)
        if tool is None or not any(t.name == tool for t in job.tools):
            return job, None
        log.info("session_steered", session=session_id, tool=tool)
        note = {"kind": "workflow_steered", "detail": f"tool_choice {job.tool_choice!r} -> {tool!r}"}
        return replace(job, tool_choice=tool), note

    def check_reply(
        self, session_id: str, messages: Sequence[Message], calls: Sequence[CallLike]
    ) -> Enforcement:
        """Update from ``messages``, then split ``calls`` (the model's new reply) into allowed and
        blocked; blocked ones carry the reason and the tool-role error text."""
        session = self.observe(session_id, messages)
        verdict = check_calls(session.state, calls)
        for b in verdict.blocked:
            log.info("session_call_blocked", session=session_id, reason=b.reason, tier=b.tier)
        return verdict

    def may_regenerate(self, session_id: str) -> bool:
        """Regeneration is allowed while the session stays within ``budgets.max_violations``."""
        session = self.get(session_id)
        return session is not None and session.state.violations <= session.workflow.budgets.max_violations

    def describe(self, session_id: str) -> dict[str, Any]:
        session = self.get(session_id)
        if session is None:
            raise SessionNotFoundError(f"unknown or expired session {session_id!r}", param="session_id")
        return session.describe(self.ttl_s, self._clock())


async def _collect(core: ChatCore, prepared: Prepared) -> AsyncIterator[CoreEvent]:
    async with closing_stream(core.run(prepared)) as events:
        async for ev in events:
            yield ev


async def enforced_run(
    core: ChatCore,
    prepared: Prepared,
    store: SessionStore,
    session_id: str,
    notes: Sequence[dict[str, Any]] = (),
) -> AsyncIterator[CoreEvent]:
    """``core.run(prepared)`` under the session's workflow (see the module doc for the policy).

    Text streams as it comes (a regenerated turn's text only when the first sent none);
    tool calls are held until the reply is checked. ``notes`` are interventions made before the
    run (steering); they lead the reply's list.
    """
    job = prepared.job
    store.observe(session_id, job.messages)
    current = prepared
    notes = list(notes)
    first_usage: Usage | None = None
    completion = 0
    sent_text = False
    verdict: Enforcement | None = None
    finish: FinishOut | None = None
    for attempt in (0, 1):
        calls: list[CallOut] = []
        text: list[str] = []
        async for ev in _collect(core, current):
            if isinstance(ev, TextOut):
                text.append(ev.text)
                if attempt == 0 or not sent_text:
                    yield ev
            elif isinstance(ev, CallOut):
                calls.append(ev)
            else:
                finish = ev
        assert finish is not None
        sent_text = sent_text or bool(text)
        first_usage = first_usage or finish.usage
        completion += finish.usage.completion_tokens
        notes.extend(finish.interventions)
        verdict = store.check_reply(session_id, job.messages, calls)
        notes.extend(verdict.interventions())
        if verdict.ok or attempt == 1 or not store.may_regenerate(session_id):
            break
        choice = verdict.next_tool if any(t.name == verdict.next_tool for t in job.tools) else job.tool_choice
        retry = replace(
            job,
            messages=(*job.messages, *verdict.retry_messages("".join(text))),
            tool_choice=choice or "auto",
        )
        try:
            current = core.prepare(retry)
        except ContextOverflowError:
            break
        notes.append({"kind": "workflow_regenerated", "detail": f"regenerating with tool_choice {choice!r}"})
    assert verdict is not None and finish is not None and first_usage is not None
    usage = Usage(first_usage.prompt_tokens, completion, first_usage.prompt_tokens_evaluated)
    out = [
        CallOut(index=i, id=c.id, name=c.name, arguments=c.arguments)
        for i, c in enumerate(verdict.allowed_calls)
        if isinstance(c, CallOut)
    ]
    for call in out:
        yield call
    reason: Literal["stop", "length", "tool_calls", "cancelled"] = (
        "tool_calls" if out else finish.finish_reason
    )
    if not verdict.ok and not out:
        yield TextOut(("\n" if sent_text else "") + verdict.fallback_text())
        notes.append({"kind": "workflow_fallback_text", "detail": "every call was blocked"})
        reason = "stop"
    yield FinishOut(reason, usage, tuple(notes), matched_stop=finish.matched_stop)


# -- HTTP: /v1/tether/sessions ------------------------------------------------------------

router = APIRouter(prefix="/v1/tether")


class SessionCreate(BaseModel):
    """``workflow``: a registered name or an inline definition (the YAML file's fields as JSON)."""

    model_config = ConfigDict(extra="forbid")

    workflow: str | dict[str, Any]
    session_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._:-]{1,128}$")
    steer: SessionSteer = Field(
        default="off",
        description="next_step: narrow an open tool_choice to the next pending step's tool, then the terminal.",
    )


def store_of(request: Request) -> SessionStore:
    """The app's ``SessionStore`` (``app.state.tether.sessions``); 404 when sessions are off."""
    store = getattr(getattr(request.app.state, "tether", None), "sessions", None)
    if not isinstance(store, SessionStore):
        raise SessionNotFoundError("workflow sessions are not enabled on this server")
    return store


@router.post("/sessions", status_code=201)
async def create_session(body: SessionCreate, request: Request) -> dict[str, Any]:
    store = store_of(request)
    workflow: str | Workflow
    if isinstance(body.workflow, Mapping):
        try:
            workflow = workflow_from_mapping(body.workflow, source="workflow")
        except ConfigError as exc:
            raise InvalidRequestError(exc.message, param="workflow") from None
    else:
        workflow = body.workflow
    session = store.create(workflow, body.session_id, steer=body.steer)
    return store.describe(session.id)


@router.get("/sessions/{session_id}")
async def get_session(session_id: str, request: Request) -> dict[str, Any]:
    return store_of(request).describe(session_id)


@router.delete("/sessions/{session_id}")
async def delete_session(session_id: str, request: Request) -> dict[str, Any]:
    if not store_of(request).drop(session_id):
        raise SessionNotFoundError(f"unknown or expired session {session_id!r}", param="session_id")
    return {"session_id": session_id, "deleted": True}


@router.get("/workflows")
async def list_workflows(request: Request) -> dict[str, Any]:
    store = store_of(request)
    return {
        "workflows": [
            {"name": wf.name, "description": wf.description, "terminal": list(wf.terminal)}
            for wf in store.workflows.values()
        ]
    }
