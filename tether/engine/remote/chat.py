"""Chat-API backends: servers that render the prompt and parse tool calls themselves (docs/backends.md).

An OpenAI-compatible endpoint or Ollama gets the job's messages and tools, not token ids, and
answers with text and finished tool calls. :class:`ChatBackend` is what such a server looks like
to tether: a :class:`ChatRequest` goes out and its pieces stream back (text as it comes, each
finished call, one :class:`ChatEnd` with the usage the server reported). The turn core for these
backends (:mod:`tether.turns.chat_core`) runs tether's post-hoc guard over them.

The scheduler still owns concurrency: one :class:`ChatSlot` per ``--slots`` is what it queues,
limits and counts; a request holds one through ``Scheduler.lease`` while its HTTP stream is open.
Requests are async on the event loop, so a client that hangs up cancels the task, which closes the
connection, which is how the backend learns to stop. Without token ids, prompt sizes are
estimated (:func:`estimate_tokens`) until the backend reports its own count.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import anyio
import httpx

from tether.calls import ToolCall
from tether.chat import Message, Usage
from tether.engine.base import Constraint, EngineBase, EngineInfo, Generation, SamplingParams
from tether.engine.remote.constraint import RemoteConstraint
from tether.errors import BackendUnavailableError, ConfigError, EngineError, InvalidRequestError, TetherError
from tether.grammar.formats.base import ToolSpec
from tether.grammar.spec import OutputSpec
from tether.grammar.structured import ReplyFormat

__all__ = [
    "CHARS_PER_TOKEN",
    "ChatBackend",
    "ChatEnd",
    "ChatPiece",
    "ChatRequest",
    "ChatSlot",
    "backend_info",
    "estimate_tokens",
    "mid_stream_error",
    "pick_model",
    "refusal",
]

# The estimate before a backend says: about 4 characters of English or code per token, plus the
# role markers a chat template adds around each turn.
CHARS_PER_TOKEN = 4
_PER_MESSAGE = 4


def estimate_tokens(messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> int:
    """Prompt tokens of ``messages`` with ``tools`` offered, estimated from their characters."""
    chars = sum(len(m.content) for m in messages)
    chars += sum(
        len(c.name) + len(json.dumps(dict(c.arguments), default=str)) for m in messages for c in m.tool_calls
    )
    chars += sum(len(json.dumps(t.to_openai(), default=str)) for t in tools)
    return -(-chars // CHARS_PER_TOKEN) + _PER_MESSAGE * len(messages)


@dataclass(frozen=True)
class ChatRequest:
    """One chat request. ``tool_choice``: auto | none | required | a tool's name; ``max_tokens``: None
    leaves the limit to the backend; ``reply``: what the whole reply must follow, as the backend compiled
    it (Ollama's ``format``; nothing where the backend takes no schema)."""

    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: str = "auto"
    parallel_tool_calls: bool = True
    params: SamplingParams = field(default_factory=SamplingParams)
    max_tokens: int | None = None
    reply_format: ReplyFormat | None = None
    reply: Constraint | None = None


@dataclass(frozen=True)
class ChatEnd:
    """The end of a reply: why, and the usage the backend reported (None when it did not)."""

    finish_reason: Literal["stop", "length"]
    usage: Usage | None = None


ChatPiece = str | ToolCall | ChatEnd  # text as it streams, a finished call, the end


def backend_info(kind: str, url: str, model: str, n_ctx: int, layers: tuple[str, ...]) -> EngineInfo:
    """The ``EngineInfo`` of a chat backend: no template, no vocabulary, remote constraints only."""
    return EngineInfo(
        model_id=model,
        n_ctx=n_ctx,
        chat_template=None,
        bos_token="",
        eos_token="",
        eos_token_ids=frozenset(),
        n_vocab=0,
        metadata={"backend.url": url},
        backend=kind,
        layers=layers,
    )


def pick_model(url: str, served: Sequence[str], wanted: str | None) -> str:
    """The model to send requests for: ``--model`` when the backend serves it, else its only one."""
    if wanted is not None:
        if wanted in served or f"{wanted}:latest" in served:  # Ollama's default tag
            return wanted
        raise ConfigError(f"--backend {url} does not serve model {wanted!r}; it serves: {', '.join(served)}")
    if len(served) == 1:
        return served[0]
    if not served:
        raise ConfigError(f"--backend {url} lists no model")
    raise ConfigError(
        f"--backend {url} serves {len(served)} models; choose one with --model: {', '.join(served)}"
    )


def _detail(text: str) -> str:
    try:
        value = json.loads(text)
    except ValueError:
        return text[:300]
    err = value.get("error", value) if isinstance(value, dict) else value
    if isinstance(err, dict):
        err = err.get("message") or err
    return str(err)[:300]


def refusal(where: str, status: int, text: str) -> TetherError:
    """The error for a backend's error answer. Down or busy (5xx, 429): retryable, 502. A refused
    request body (400, 413, 422: a window exceeded, an option the server lacks): the client's 400.
    Anything else (a key the backend refuses, an unknown model): tether's configuration, 500."""
    message = f"{where} answered {status}: {_detail(text)}"
    if status >= 500 or status == 429:
        return BackendUnavailableError(message)
    if status in (400, 413, 422):
        return InvalidRequestError(f"the backend refused the request: {message}")
    return EngineError(message)


def mid_stream_error(where: str, data: str) -> EngineError:
    return EngineError(f"{where} failed mid-stream: {_detail(data)}")


class ChatBackend(ABC):
    """A server with a chat API. ``native_tools``: it renders tools and parses calls itself (else tether
    folds them into the text and parses the reply); ``schema_replies``: it takes a JSON schema for a whole
    reply, so the guard's re-pick and repair are schema-constrained replies rather than forced calls;
    ``tool_format``: the tool-call format its model writes, for rescuing calls written as text."""

    kind: ClassVar[str]
    path: ClassVar[str]
    schema_replies: ClassVar[bool]

    def __init__(
        self,
        url: str,
        info: EngineInfo,
        *,
        native_tools: bool = True,
        tool_format: str = "generic",
        api_key: str | None = None,
        timeout_s: float = 600.0,
    ) -> None:
        self.url = url.rstrip("/")
        self.info = info
        self.model = info.model_id
        self.native_tools = native_tools
        self.tool_format = tool_format
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = httpx.Timeout(timeout_s, connect=10.0)

    @abstractmethod
    def body(self, request: ChatRequest) -> dict[str, Any]:
        """The JSON body of ``request`` in the backend's own shape."""

    def compile(self, spec: OutputSpec) -> dict[str, Any]:
        """The body fields that hold a whole reply to ``spec`` (none: this backend takes no schema)."""
        return {}

    @abstractmethod
    def pieces(self, lines: AsyncIterator[str]) -> AsyncIterator[ChatPiece]:
        """The reply's pieces from the lines of its streamed response; ends with one ``ChatEnd``."""

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatPiece]:
        """``request``'s reply as it streams; closing this closes the connection."""
        async with self._lines(self.body(request)) as lines:
            async for piece in self.pieces(lines):
                yield piece

    @asynccontextmanager
    async def _lines(self, body: dict[str, Any]) -> AsyncIterator[AsyncIterator[str]]:
        where = self.url + self.path
        http = httpx.AsyncClient(headers=self._headers, timeout=self._timeout)
        response: httpx.Response | None = None
        try:
            response = await http.send(http.build_request("POST", where, json=body), stream=True)
            if response.status_code >= 400:
                await response.aread()
                raise refusal(where, response.status_code, response.text)
            yield response.aiter_lines()
        except httpx.TransportError as exc:
            raise BackendUnavailableError(f"{where}: {exc!r}") from None
        finally:
            # Shielded: a client that hung up cancelled this task, and the backend must still see the
            # connection close (that is what stops its decoding).
            with anyio.CancelScope(shield=True):
                if response is not None:
                    await response.aclose()
                await http.aclose()


class ChatSlot(EngineBase):
    """One of ``--slots`` in front of a chat backend: what the scheduler queues, limits and counts.

    Its generation is the chat request the turn core sends while it holds the slot
    (``Scheduler.lease``); a chat API has no token ids, so the token-level ``Engine`` methods refuse.
    """

    def __init__(self, backend: ChatBackend) -> None:
        super().__init__()
        self.backend = backend

    @property
    def info(self) -> EngineInfo:
        return self.backend.info

    def _refuse(self) -> EngineError:
        return EngineError(f"the {self.backend.kind} backend takes chat requests, not token ids")

    def tokenize(self, text: str, *, special: bool = True) -> list[int]:
        raise self._refuse()

    def detokenize(self, ids: Sequence[int]) -> str:
        raise self._refuse()

    def token_pieces(self) -> list[bytes]:
        raise self._refuse()

    def cached_prefix_len(self, prompt: Sequence[int]) -> int:
        return 0

    def compile(self, spec: OutputSpec, *, prompt_len: int) -> RemoteConstraint:
        return RemoteConstraint(spec, self.backend.compile(spec))

    def _admit(self, run: Generation) -> Generation:
        raise self._refuse()

    def close(self) -> None:
        return None
