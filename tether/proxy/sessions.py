"""HTTP routes for workflow sessions: ``/v1/tether/sessions`` and ``/v1/tether/workflows``.

The sessions themselves live in :mod:`tether.workflows.sessions` (in memory, or in Redis with
``--session-store``: a 503 ``session_store_unavailable`` when it fails); enforcement on each
request is a stage of the turn pipeline (:class:`tether.workflows.stage.SessionStage`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from tether.errors import ConfigError, InvalidRequestError
from tether.workflows.loader import workflow_from_mapping
from tether.workflows.sessions import SessionNotFoundError, SessionSteer, SessionStore
from tether.workflows.spec import Workflow

__all__ = ["SessionCreate", "router", "store_of"]

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
    session = await store.create(workflow, body.session_id, steer=body.steer)
    return session.describe(store.ttl_s, store.backend.clock())


@router.get("/sessions/{session_id}")
async def get_session(session_id: str, request: Request) -> dict[str, Any]:
    return await store_of(request).describe(session_id)


@router.delete("/sessions/{session_id}")
async def delete_session(session_id: str, request: Request) -> dict[str, Any]:
    if not await store_of(request).drop(session_id):
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
