"""llama-server as an engine: tether renders and tokenizes, llama-server decodes under tether's grammar.

Each ``LlamaServerEngine`` is one slot of the remote server (``id_slot``), so a slot's KV
cache holds the previous prompt of the same tether slot and ``cache_prompt`` reuses its
prefix. Generation goes to the native ``/completion`` endpoint with the prompt as token
ids, because ``/v1/chat/completions`` refuses a grammar together with ``tools``; layer 0
arrives as GBNF with lazy triggers (:mod:`tether.grammar.remote.gbnf`). The streamed token
ids run through the one token loop (:func:`tether.engine.loop.token_loop`); closing the
generation closes the HTTP stream, and llama-server stops decoding for a client that left.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import structlog

from tether.engine.base import (
    Done,
    EngineInfo,
    Generation,
    GenerationEvent,
    SamplingParams,
    common_prefix_len,
)
from tether.engine.llama_cpp import model_id_for
from tether.engine.loop import token_loop
from tether.engine.remote.http import connecting
from tether.engine.remote.token_engine import RemoteTokenEngine
from tether.errors import BackendUnavailableError, ConfigError
from tether.grammar.remote.gbnf import compile_gbnf
from tether.grammar.spec import OutputSpec

__all__ = ["LlamaServerEngine", "connect_llama_server"]

log = structlog.get_logger(__name__)


def connect_llama_server(
    url: str, *, slots: int = 1, api_key: str | None = None, timeout_s: float = 600.0
) -> list[LlamaServerEngine]:
    """One engine per tether slot on the llama-server at ``url``; checks it answers first."""
    with connecting(url, api_key=api_key, timeout_s=timeout_s, errors=BackendUnavailableError) as client:
        props = client.get_json("/props")
        models = client.get_json("/v1/models")
    if not isinstance(props.get("chat_template"), str) or "default_generation_settings" not in props:
        raise ConfigError(f"--backend {url} does not look like llama-server (no /props chat_template)")
    remote_slots = int(props.get("total_slots") or 1)
    if slots > remote_slots:
        log.warning("backend_slots_fewer", tether_slots=slots, backend_slots=remote_slots)
    first = LlamaServerEngine(url, props, models, slot=0, api_key=api_key, timeout_s=timeout_s)
    return [first, *(first.sibling(i % remote_slots) for i in range(1, slots))]


class LlamaServerEngine(RemoteTokenEngine):
    """One slot of a llama-server. Synchronous; the scheduler runs one generation at a time on it."""

    def __init__(
        self,
        url: str,
        props: dict[str, Any],
        models: dict[str, Any],
        *,
        slot: int,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        info: EngineInfo | None = None,
    ) -> None:
        super().__init__(url, api_key=api_key, timeout_s=timeout_s)
        self.slot = slot
        self._held: list[int] = []  # what this slot's KV cache holds after our last request
        # BOS text first: ``tokenize`` needs it, and reading the info tokenizes the EOS text.
        self._bos = info.bos_token if info is not None else str(props.get("bos_token") or "")
        self._info = info or self._read_info(props, models)

    def sibling(self, slot: int) -> LlamaServerEngine:
        """Another slot of the same server, sharing the model description."""
        return LlamaServerEngine(
            self.url, {}, {}, slot=slot, api_key=self._api_key, timeout_s=self._timeout_s, info=self._info
        )

    def _read_info(self, props: dict[str, Any], models: dict[str, Any]) -> EngineInfo:
        meta: dict[str, Any] = {}
        data = models.get("data")
        if isinstance(data, list) and data and isinstance(data[0], dict):
            meta = data[0].get("meta") or {}
        path = str(props.get("model_path") or "")
        eos_text = str(props.get("eos_token") or "")
        eos = frozenset(self.tokenize(eos_text, special=True)[-1:]) if eos_text else frozenset()
        settings = props.get("default_generation_settings") or {}
        return EngineInfo(
            model_id=model_id_for(Path(path), {}) if path else "llama-server",
            n_ctx=int(settings.get("n_ctx") or meta.get("n_ctx") or 4096),
            chat_template=str(props.get("chat_template") or "") or None,
            bos_token=str(props.get("bos_token") or ""),
            eos_token=eos_text,
            eos_token_ids=eos,
            n_vocab=int(meta.get("n_vocab") or 0),
            path=path,  # the file on the server's side: its name is one the model answers to
            metadata={"backend.url": self.url, "backend.build": str(props.get("build_info") or "")},
            backend="llama-server",
            # Steering, the call-or-answer decision and grounding act on logits: embedded engine only.
            layers=("layer0_names", "layer0_strict", "repick", "repair", "prefix_reuse", "streaming"),
        )

    def tokenize(self, text: str, *, special: bool = True) -> list[int]:
        add_bos = not (self._bos and text.startswith(self._bos))
        body = {"content": text, "add_special": add_bos, "parse_special": special}
        return [int(t) for t in self._client.post_json("/tokenize", body)["tokens"]]

    def detokenize(self, ids: Sequence[int]) -> str:
        return str(self._client.post_json("/detokenize", {"tokens": list(ids)})["content"])

    def cached_prefix_len(self, prompt: Sequence[int]) -> int:
        return common_prefix_len(self._held, prompt)

    def _fields(self, spec: OutputSpec) -> dict[str, Any]:
        """``spec`` as GBNF (lazy, armed by the format's triggers, where the reply may be prose)."""
        grammar = compile_gbnf(spec)
        return grammar.request_fields() if grammar is not None else {}

    def _body(self, prompt: list[int], params: SamplingParams, fields: Mapping[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {
            "prompt": prompt,
            "n_predict": params.max_tokens,
            "temperature": params.temperature,
            "top_k": params.top_k,
            "top_p": params.top_p,
            "min_p": params.min_p,
            "repeat_penalty": params.repeat_penalty,
            "presence_penalty": params.presence_penalty,
            "frequency_penalty": params.frequency_penalty,
            "seed": params.seed if params.seed is not None else -1,
            "stream": True,
            "return_tokens": True,
            "cache_prompt": True,
            "id_slot": self.slot,
        }
        if params.logit_bias:
            body["logit_bias"] = [[tok, bias] for tok, bias in params.logit_bias]
        body.update(fields)
        return body

    def _generate(self, run: Generation, fields: Mapping[str, Any]) -> Iterator[GenerationEvent]:
        prompt, params, cancel = run.prompt, run.params, run.cancel
        final: dict[str, Any] = {}
        current = [b""]  # the text of the id being handed to the token loop
        produced: list[int] = []
        eos = min(self._info.eos_token_ids) if self._info.eos_token_ids else -1

        def ids(chunks: Iterator[dict[str, Any]]) -> Iterator[int]:
            for chunk in chunks:
                tokens = [int(t) for t in chunk.get("tokens") or ()]
                text = str(chunk.get("content") or "").encode()
                for i, token in enumerate(tokens):
                    current[0] = text if i == len(tokens) - 1 else b""
                    produced.append(token)
                    yield token
                if chunk.get("stop"):
                    final.update(chunk)
                    if chunk.get("stop_type") == "eos" and eos >= 0:
                        current[0] = b""
                        yield eos  # this server version did not stream the EOS id itself
                    return

        try:
            with self._client.stream("/completion", self._body(prompt, params, fields)) as chunks:
                for event in token_loop(
                    ids(chunks),
                    piece=lambda _t: current[0],
                    eos=self._info.eos_token_ids,
                    max_tokens=params.max_tokens,
                    cancel=cancel,
                    prompt_tokens=len(prompt),
                    evaluated=len(prompt),
                ):
                    if isinstance(event, Done):
                        if not final and event.finish_reason != "cancelled":
                            # EOS or the budget ended the loop one chunk before the server's final one:
                            # read it for the accounting (it follows at once; nothing more is decoded).
                            final.update(next((c for c in chunks if c.get("stop")), {}))
                        timings = final.get("timings") or {}
                        evaluated = int(timings.get("prompt_n", event.prompt_tokens_evaluated))
                        event = replace(event, prompt_tokens_evaluated=evaluated)
                    yield event
        finally:
            # The server's slot keeps what it evaluated, also when the stream was closed early.
            self._held = [*prompt, *produced]
