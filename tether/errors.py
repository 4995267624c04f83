"""The one error hierarchy of tether.

Every error a user can see is a ``TetherError`` subclass. HTTP status, the
OpenAI ``type``/``code`` and whether a client may retry are class attributes,
so the proxy maps errors to responses without ever looking at message text.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "AuthenticationError",
    "BackendUnavailableError",
    "ConfigError",
    "ContextOverflowError",
    "EngineError",
    "FixedPromptTooLargeError",
    "FormatError",
    "InternalError",
    "InvalidRequestError",
    "ModelNotFoundError",
    "PayloadTooLargeError",
    "QueueFullError",
    "QueueTimeoutError",
    "RequestCancelledError",
    "ResponseNotFoundError",
    "SandboxError",
    "SessionStoreUnavailableError",
    "ShuttingDownError",
    "TetherError",
    "ToolError",
]


class TetherError(Exception):
    """Base class. ``status``: HTTP status; ``retryable``: may the same request succeed later;
    ``retry_after``: seconds a client should wait first (sent as ``Retry-After``), or None."""

    status: ClassVar[int] = 500
    error_type: ClassVar[str] = "server_error"
    code: ClassVar[str | None] = None
    retryable: ClassVar[bool] = False
    retry_after: int | None = None

    def __init__(
        self, message: str, *, param: str | None = None, retry_after: int | None = None, **extra: Any
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if retry_after is not None:
            self.retry_after = retry_after
        self.extra = extra

    def headers(self) -> dict[str, str]:
        """HTTP headers that go with this error (``Retry-After`` for retryable refusals)."""
        return {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}

    def to_openai(self) -> dict[str, Any]:
        """The error body in OpenAI's shape."""
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }


class _ClientError(TetherError):
    """The request cannot be served as sent (OpenAI's ``invalid_request_error``; 400 unless a
    subclass says otherwise)."""

    status = 400
    error_type = "invalid_request_error"


class InvalidRequestError(_ClientError):
    """The request is malformed or violates the API schema."""

    code = "invalid_request"


class ContextOverflowError(InvalidRequestError):
    """The prompt (plus the requested completion) does not fit the model's context window."""

    code = "context_length_exceeded"

    def __init__(self, prompt_tokens: int, n_ctx: int) -> None:
        super().__init__(
            f"This model's maximum context length is {n_ctx} tokens, but the request has "
            f"{prompt_tokens} prompt tokens: context length exceeded. Shorten the messages.",
            param="messages",
        )
        self.prompt_tokens = prompt_tokens
        self.n_ctx = n_ctx


class FixedPromptTooLargeError(InvalidRequestError):
    """The system prompt and tool definitions alone do not fit: dropping history cannot help.

    Worded apart from the usual overflow message on purpose: clients that compact and retry on
    overflow (opencode) would otherwise retry forever.
    """

    code = "system_prompt_too_large"

    def __init__(self, fixed_tokens: int, n_ctx: int) -> None:
        super().__init__(
            f"The system prompt and tool definitions alone take {fixed_tokens} tokens and this model's "
            f"window is {n_ctx} tokens, so no conversation fits. Serve a model with a larger window "
            "(tether serve --ctx) or offer fewer tools.",
            param="tools",
        )
        self.fixed_tokens = fixed_tokens
        self.n_ctx = n_ctx


class AuthenticationError(TetherError):
    """Missing or wrong API key."""

    status = 401
    error_type = "authentication_error"
    code = "invalid_api_key"


class ModelNotFoundError(_ClientError):
    """The request names a model this server does not serve."""

    status = 404
    code = "model_not_found"


class ResponseNotFoundError(_ClientError):
    """A Responses API request names a response id this server does not hold (never made, or evicted)."""

    status = 404
    code = "response_not_found"


class PayloadTooLargeError(_ClientError):
    """The request body is larger than the configured limit."""

    status = 413
    code = "payload_too_large"


class QueueFullError(TetherError):
    """Every slot is busy and the wait queue is full; retry after ``retry_after`` seconds."""

    status = 429
    error_type = "rate_limit_error"
    code = "queue_full"
    retryable = True
    retry_after = 1


class _UnavailableError(TetherError):
    """The server cannot take the request now (503); the same request may succeed after ``retry_after``."""

    status = 503
    retryable = True
    retry_after = 1


class QueueTimeoutError(_UnavailableError):
    """A request waited longer than the server's queue timeout for a slot; retry later."""

    code = "queue_timeout"


class ShuttingDownError(_UnavailableError):
    """The server is shutting down: queued and running generations are cancelled."""

    code = "shutting_down"
    retry_after = 5


class SessionStoreUnavailableError(_UnavailableError):
    """The shared workflow-session store (Redis) cannot be reached or a session stays locked; the
    request is refused rather than run without its workflow being enforced."""

    code = "session_store_unavailable"


class RequestCancelledError(TetherError):
    """The client went away or the request was cancelled."""

    status = 499
    error_type = "cancelled"
    code = "cancelled"


# The errors below keep TetherError's 500 / ``server_error`` unless they say otherwise.


class InternalError(TetherError):
    """An unexpected fault inside tether; the request ends, the server stays up."""

    code = "internal_error"


class EngineError(TetherError):
    """The inference engine failed."""

    code = "engine_error"
    retryable = True


class BackendUnavailableError(EngineError):
    """The remote engine behind ``--backend`` could not be reached or answered with an error (retryable)."""

    status = 502
    code = "backend_unavailable"


class ConfigError(TetherError):
    """The configuration is invalid (raised at start-up, shown as one line by the CLI)."""

    code = "config_error"


class FormatError(_ClientError):
    """A tool-call format is unknown or cannot be used with this model."""

    code = "format_error"


class ToolError(TetherError):
    """A tool failed or was refused; reported to the model as a tool result, not to the client."""

    code = "tool_error"


class SandboxError(TetherError):
    """The sandbox cannot run (missing bubblewrap, namespaces refused); fails closed."""

    code = "sandbox_unavailable"
