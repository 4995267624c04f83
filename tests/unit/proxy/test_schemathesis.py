"""Property-based requests from the app's own OpenAPI schema: no input makes the server answer 5xx.

schemathesis generates bodies for every operation (both protocols, sessions, models,
health) — valid ones and deliberately broken ones — and sends them to the app on a
scripted engine. Bodies name the served model, so they reach conversion, prompt building,
the core and the guard. The only check is the one that matters here: never a server error.
"""

from __future__ import annotations

import os
from typing import Any

import hypothesis
import schemathesis
from schemathesis.checks import not_a_server_error

from tether.config import ServerConfig
from tether.engine.scheduler import Scheduler
from tether.engine.scripted import ScriptedEngine
from tether.proxy.app import create_app

EXAMPLES = int(os.environ.get("TETHER_SCHEMATHESIS_EXAMPLES", "60"))

served = create_app(
    ServerConfig(queue_limit=64),
    Scheduler([ScriptedEngine(['{"response": "ok"}', "plain text", "x" * 40])], queue_limit=64),
)


async def app(scope: Any, receive: Any, send: Any) -> None:
    """The app without its lifespan: schemathesis starts and stops lifespans around each operation,
    and a real server's shutdown (the scheduler refuses work from then on) happens once."""
    if scope["type"] == "lifespan":
        raise RuntimeError("lifespan is not used in this test")
    await served(scope, receive, send)


schema = schemathesis.openapi.from_asgi("/openapi.json", app)


@schema.parametrize()
@hypothesis.settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(hypothesis.HealthCheck),
)
def test_no_server_errors(case: schemathesis.Case) -> None:
    if isinstance(case.body, dict) and "model" in case.body:
        case.body["model"] = "scripted"  # past the model check, into conversion, the core and the guard
    response = case.call()
    case.validate_response(response, checks=[not_a_server_error])


def test_every_route_is_covered() -> None:
    paths = {result.ok().path for result in schema.get_all_operations()}
    assert {"/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/messages/count_tokens"} <= paths
    ollama_and_responses = {"/api/chat", "/api/generate", "/api/show", "/v1/responses"}
    assert ollama_and_responses | {"/v1/responses/{response_id}"} <= paths
