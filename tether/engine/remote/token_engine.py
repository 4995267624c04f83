"""What every remote engine that decodes tether's prompt ids shares: one generation at a time, layer 0
compiled into request fields, no local vocabulary.

A subclass (llama-server, vLLM) sets ``_info`` and writes ``_fields`` (an ``OutputSpec`` in its
server's grammar language) and ``_generate``, which streams the server's token ids through the one
token loop (:func:`tether.engine.loop.token_loop`). Leaving that generator closes the HTTP stream,
which is how the server learns to stop.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from tether.engine.base import EngineBase, EngineInfo, Generation, GenerationEvent
from tether.engine.remote.constraint import RemoteConstraint
from tether.engine.remote.http import RemoteClient
from tether.errors import EngineError, InvalidRequestError
from tether.grammar.spec import OutputSpec

__all__ = ["RemoteTokenEngine"]


class RemoteTokenEngine(EngineBase):
    """One slot's worth of a remote server. Synchronous; the scheduler runs one generation at a time on it."""

    _info: EngineInfo

    def __init__(self, url: str, *, api_key: str | None = None, timeout_s: float = 600.0) -> None:
        self.url = url
        self._api_key = api_key
        self._timeout_s = timeout_s
        self._client = RemoteClient(url, api_key=api_key, timeout_s=timeout_s)
        super().__init__()

    @property
    def info(self) -> EngineInfo:
        return self._info

    def token_pieces(self) -> list[bytes]:
        raise EngineError("a remote engine has no local vocabulary: layer 0 runs on the server")

    def compile(self, spec: OutputSpec, *, prompt_len: int) -> RemoteConstraint:
        return RemoteConstraint(spec, self._fields(spec))

    def _fields(self, spec: OutputSpec) -> dict[str, Any]:
        raise NotImplementedError

    def _admit(self, run: Generation) -> Generation:
        if run.logits_processor is not None:
            raise EngineError("a remote engine cannot run logits processors; compile an OutputSpec")
        if run.constraint is not None and not isinstance(run.constraint, RemoteConstraint):
            raise EngineError(
                f"a remote engine cannot apply {type(run.constraint).__name__}: compile it here"
            )
        if run.params.logprobs is not None:
            raise InvalidRequestError(f"logprobs are not available through the {self._info.backend} backend")
        return run

    def _run(self, run: Generation) -> Iterator[GenerationEvent]:
        fields = run.constraint.fields if isinstance(run.constraint, RemoteConstraint) else {}
        return self._generate(run, fields)

    def _generate(self, run: Generation, fields: Mapping[str, Any]) -> Iterator[GenerationEvent]:
        """Stream ``run`` from the server with ``fields`` (the compiled constraint) in its request."""
        raise NotImplementedError

    def close(self) -> None:
        self._client.close()
