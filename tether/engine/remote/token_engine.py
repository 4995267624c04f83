"""What every remote engine that decodes tether's prompt ids shares: one generation at a time, layer 0
as an ``OutputSpec``, no local vocabulary.

A subclass (llama-server, vLLM) sets ``_info`` and writes ``_generate``, which streams the
server's token ids through the one token loop (:func:`tether.engine.loop.token_loop`).
Leaving that generator closes the HTTP stream, which is how the server learns to stop.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

from tether.engine.base import EngineInfo, GenerationEvent, LogitsProcessor, SamplingParams
from tether.engine.remote.http import RemoteClient
from tether.errors import EngineError, InvalidRequestError
from tether.grammar.remote.spec import OutputSpec

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

    def generate(
        self,
        prompt: Sequence[int],
        params: SamplingParams,
        *,
        logits_processor: LogitsProcessor | None = None,
        cancel: threading.Event | None = None,
        constraint: OutputSpec | None = None,
    ) -> Iterator[GenerationEvent]:
        if logits_processor is not None:
            raise EngineError("a remote engine cannot run logits processors; pass an OutputSpec")
        if params.logprobs is not None:
            raise InvalidRequestError(f"logprobs are not available through the {self._info.backend} backend")
        if not self._lock.acquire(blocking=False):
            raise EngineError("engine slot is busy: the scheduler must not run two generations on one slot")
        try:
            yield from self._generate(list(prompt), params, cancel, constraint)
        finally:
            self._lock.release()

    def _generate(
        self,
        prompt: list[int],
        params: SamplingParams,
        cancel: threading.Event | None,
        constraint: OutputSpec | None,
    ) -> Iterator[GenerationEvent]:
        raise NotImplementedError

    def close(self) -> None:
        self._client.close()
