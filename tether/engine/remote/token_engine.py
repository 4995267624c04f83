"""What every remote engine that decodes tether's prompt ids shares: one generation at a time, layer 0
compiled into request fields, no local vocabulary.

A subclass (llama-server, vLLM) sets ``_info`` and writes ``_fields`` (an ``OutputSpec`` in its
server's grammar language) and ``_generate``, which streams the server's token ids through the one
token loop (:func:`tether.engine.loop.token_loop`). Leaving that generator closes the HTTP stream,
which is how the server learns to stop.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from tether.engine.base import (
    Constraint,
    EngineInfo,
    Generation,
    GenerationEvent,
    LogitsProcessor,
    SamplingParams,
)
from tether.engine.remote.constraint import RemoteConstraint
from tether.engine.remote.http import RemoteClient
from tether.errors import EngineError, InvalidRequestError
from tether.grammar.spec import OutputSpec

__all__ = ["RemoteTokenEngine"]


class RemoteTokenEngine:
    """One slot's worth of a remote server. Synchronous; the scheduler runs one generation at a time on it."""

    _info: EngineInfo

    def __init__(self, url: str, *, api_key: str | None = None, timeout_s: float = 600.0) -> None:
        self.url = url
        self._api_key = api_key
        self._timeout_s = timeout_s
        self._client = RemoteClient(url, api_key=api_key, timeout_s=timeout_s)
        self._lock = threading.Lock()

    @property
    def info(self) -> EngineInfo:
        return self._info

    def token_pieces(self) -> list[bytes]:
        raise EngineError("a remote engine has no local vocabulary: layer 0 runs on the server")

    def compile(self, spec: OutputSpec, *, prompt_len: int) -> RemoteConstraint:
        return RemoteConstraint(spec, self._fields(spec))

    def _fields(self, spec: OutputSpec) -> dict[str, Any]:
        raise NotImplementedError

    def generate(
        self,
        prompt: Sequence[int],
        params: SamplingParams,
        *,
        constraint: Constraint | None = None,
        cancel: threading.Event | None = None,
        logits_processor: LogitsProcessor | None = None,
    ) -> Iterator[GenerationEvent]:
        if logits_processor is not None:
            raise EngineError("a remote engine cannot run logits processors; compile an OutputSpec")
        if constraint is not None and not isinstance(constraint, RemoteConstraint):
            raise EngineError(f"a remote engine cannot apply {type(constraint).__name__}: compile it here")
        if params.logprobs is not None:
            raise InvalidRequestError(f"logprobs are not available through the {self._info.backend} backend")
        if not self._lock.acquire(blocking=False):
            raise EngineError("engine slot is busy: the scheduler must not run two generations on one slot")
        try:
            fields = constraint.fields if constraint is not None else {}
            yield from self._generate(Generation(list(prompt), params, cancel=cancel), fields)
        finally:
            self._lock.release()

    def _generate(self, run: Generation, fields: Mapping[str, Any]) -> Iterator[GenerationEvent]:
        """Stream ``run`` from the server with ``fields`` (the compiled constraint) in its request."""
        raise NotImplementedError

    def close(self) -> None:
        self._client.close()
