"""vLLM as an engine: tether renders and tokenizes, vLLM decodes under layer 0 as structured outputs.

Generation goes to ``/v1/completions`` with the prompt as token ids, streamed with the ids of
every chunk (:mod:`tether.engine.remote.vllm_wire`), through the one token loop; layer 0
arrives as ``structured_outputs`` (:func:`tether.grammar.remote.structural_tag.compile_vllm`).
Closing the generation closes the HTTP stream, and vLLM aborts the request.

The chat template: vLLM serves it only from ``/tokenizer_info``, which it exposes with
``--enable-tokenizer-info-endpoint``. With it tether renders exactly as for llama-server
(and detects the tool-call format from the template). Without it tether still decides what the
turns say, and vLLM renders them with its template through ``/tokenize`` with ``messages``
(:class:`tether.engine.prompt.RendersChat`); the format is then ``generic`` unless
``--tool-format`` names one.

vLLM's prefix cache is global (automatic prefix caching, no slots): any tether slot reuses any
cached prefix, so no slot is preferred and ``cached_prefix_len`` says 0.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import structlog

from tether.engine.base import Done, EngineInfo, Generation, GenerationEvent
from tether.engine.loop import token_loop
from tether.engine.remote.http import RemoteClient, connecting
from tether.engine.remote.token_engine import RemoteTokenEngine
from tether.engine.remote.vllm_wire import (
    STOPPED,
    StreamEnd,
    chat_template_of,
    completion_body,
    constraint_fields,
    evaluated_tokens,
    stream_pieces,
    token_text,
    wire_turns,
)
from tether.errors import BackendUnavailableError, ConfigError, EngineError, InvalidRequestError, TetherError
from tether.grammar.spec import OutputSpec

__all__ = ["VllmEngine", "connect_vllm", "probe_vocab_size", "render_chat"]

log = structlog.get_logger(__name__)

_PROBE = {
    "type": "function",
    "function": {"name": "probe", "description": "", "parameters": {"type": "object", "properties": {}}},
}


def connect_vllm(
    url: str, *, slots: int = 1, api_key: str | None = None, timeout_s: float = 600.0
) -> list[VllmEngine]:
    """One engine per tether slot on the vLLM server at ``url``; reads what tether needs from it."""
    with connecting(url, api_key=api_key, timeout_s=timeout_s, errors=TetherError) as client:
        models = client.get_json("/v1/models")
        cards = [m for m in models.get("data") or () if isinstance(m, dict) and m.get("owned_by") == "vllm"]
        if not cards:
            raise ConfigError(
                f"--backend {url} does not look like vLLM (no model owned_by vllm in /v1/models)"
            )
        info = _read_info(client, url, cards[0])
        # Rendered by vLLM: whether its template reads ``tools`` (the same turn with and without one).
        turn = [{"role": "user", "content": "Hello"}]
        reads_tools = info.chat_template is None and (
            render_chat(client, info.model_id, turn, None)
            != render_chat(client, info.model_id, turn, [_PROBE])
        )
    first = VllmEngine(url, info, api_key=api_key, timeout_s=timeout_s, chat_template_tools=reads_tools)
    log.info(
        "backend_vllm_ready",
        model=info.model_id,
        n_ctx=info.n_ctx,
        n_vocab=info.n_vocab,
        renders=info.metadata["backend.renders"],
    )
    if info.chat_template is None:
        log.warning(
            "backend_chat_template_hidden",
            detail="vLLM renders the prompts; start it with --enable-tokenizer-info-endpoint so tether "
            "detects the tool-call format from the template (else: generic, or --tool-format)",
        )
    return [first, *(first.sibling() for _ in range(1, slots))]


def _read_info(client: RemoteClient, url: str, card: dict[str, Any]) -> EngineInfo:
    model = str(card["id"])
    tokenizer: dict[str, Any] = {}
    try:
        tokenizer = client.get_json("/tokenizer_info")
    except BackendUnavailableError:
        raise
    except EngineError:
        pass  # 404: the endpoint is off (--enable-tokenizer-info-endpoint)
    template = chat_template_of(tokenizer)
    bos, eos = token_text(tokenizer.get("bos_token")), token_text(tokenizer.get("eos_token"))
    eos_ids: frozenset[int] = frozenset()
    if eos:
        found = client.post_json("/tokenize", {"model": model, "prompt": eos, "add_special_tokens": False})
        eos_ids = frozenset(int(t) for t in found["tokens"][-1:])
    version = ""
    with contextlib.suppress(EngineError):
        version = str(client.get_json("/version").get("version") or "")
    return EngineInfo(
        model_id=model,
        n_ctx=int(card.get("max_model_len") or 0) or 4096,
        chat_template=template,
        bos_token=bos,
        eos_token=eos,
        eos_token_ids=eos_ids,
        n_vocab=probe_vocab_size(client, model),
        path=str(card.get("root") or ""),  # the model's directory or hub id on the server's side
        metadata={
            "backend.url": url,
            "backend.version": version,
            "backend.renders": "tether" if template is not None else "vllm",
            "backend.prefix_cache": "global",
        },
        backend="vllm",
        # prefix_reuse: vLLM's automatic prefix caching, global across slots. Steering, the
        # call-or-answer decision and grounding act on logits: embedded engine only.
        layers=("layer0_names", "layer0_strict", "repick", "repair", "prefix_reuse", "streaming"),
    )


def probe_vocab_size(client: RemoteClient, model: str) -> int:
    """The model's vocabulary size (what ``logit_bias`` ids are checked against), which no vLLM
    endpoint reports: the smallest id vLLM refuses in a ``logit_bias``, found with one-token
    requests (about 20, at start-up)."""

    def accepted(token: int) -> bool:
        body = {
            "model": model,
            "prompt": [0],
            "max_tokens": 1,
            "temperature": 0,
            "logit_bias": {str(token): 0},
        }
        try:
            client.post_json("/v1/completions", body)
        except BackendUnavailableError:
            raise
        except EngineError:
            return False
        return True

    if not accepted(0):
        raise ConfigError(
            f"{client.base_url} refused a one-token completion; is it serving a generative model?"
        )
    low, high = 0, 1 << 15  # low: accepted; high: to be found refused
    while accepted(high):
        low, high = high, high * 2
        if high > 1 << 24:
            raise ConfigError(
                f"{client.base_url} accepts any token id in logit_bias; cannot size its vocabulary"
            )
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if accepted(middle) else (low, middle)
    return high


def render_chat(
    client: RemoteClient, model: str, turns: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> list[int]:
    """The prompt ids vLLM's own chat template makes of ``turns`` (``/tokenize`` with messages)."""
    body: dict[str, Any] = {
        "model": model,
        "messages": wire_turns(turns),
        "add_generation_prompt": True,
        "add_special_tokens": False,  # as vLLM's chat endpoint: the template writes the BOS
    }
    if tools:
        body["tools"] = tools
    try:
        return [int(t) for t in client.post_json("/tokenize", body)["tokens"]]
    except BackendUnavailableError:
        raise
    except EngineError as exc:  # a 4xx: the template refused these turns
        raise InvalidRequestError(
            f"the backend's chat template refused the conversation: {exc.message}", param="messages"
        ) from None


class VllmEngine(RemoteTokenEngine):
    """One tether slot's connection to a vLLM server. Synchronous; one generation at a time on it."""

    def __init__(
        self,
        url: str,
        info: EngineInfo,
        *,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        chat_template_tools: bool = False,
    ) -> None:
        super().__init__(url, api_key=api_key, timeout_s=timeout_s)
        self._info = info
        self._template_tools = chat_template_tools

    def sibling(self) -> VllmEngine:
        """Another slot on the same server, sharing the model description."""
        return VllmEngine(
            self.url,
            self._info,
            api_key=self._api_key,
            timeout_s=self._timeout_s,
            chat_template_tools=self._template_tools,
        )

    def tokenize(self, text: str, *, special: bool = True) -> list[int]:
        """Ids for ``text``. vLLM's tokenizers always read special-token text (``special`` is moot);
        the BOS is added unless the text starts with it, as for llama-server."""
        bos = self._info.bos_token
        body = {
            "model": self._model,
            "prompt": text,
            "add_special_tokens": not (bos and text.startswith(bos)),
        }
        return [int(t) for t in self._client.post_json("/tokenize", body)["tokens"]]

    def detokenize(self, ids: Sequence[int]) -> str:
        return str(
            self._client.post_json("/detokenize", {"model": self._model, "tokens": list(ids)})["prompt"]
        )

    def cached_prefix_len(self, prompt: Sequence[int]) -> int:
        """0: vLLM's prefix cache is shared by every slot, so none holds more of ``prompt`` than another."""
        return 0

    @property
    def chat_template_tools(self) -> bool:
        return self._template_tools

    def render_chat(self, turns: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
        """The prompt ids vLLM's own chat template makes of ``turns``."""
        return render_chat(self._client, self._model, turns, tools)

    @property
    def _model(self) -> str:
        return self._info.model_id

    def _fields(self, spec: OutputSpec) -> dict[str, Any]:
        return constraint_fields(spec)

    def _generate(self, run: Generation, fields: Mapping[str, Any]) -> Iterator[GenerationEvent]:
        prompt, params, cancel = run.prompt, run.params, run.cancel
        end = StreamEnd()
        current = [b""]  # the text of the id being handed to the token loop
        body = completion_body(self._model, prompt, params, fields)
        with self._client.stream("/v1/completions", body) as chunks:
            pieces = stream_pieces(chunks, end)

            def ids() -> Iterator[int]:
                for token, piece in pieces:
                    current[0] = piece
                    yield token

            for event in token_loop(
                ids(),
                piece=lambda _t: current[0],
                eos=frozenset({STOPPED}),  # vLLM decides where the reply ends (EOS or a stop id)
                max_tokens=params.max_tokens,
                cancel=cancel,
                prompt_tokens=len(prompt),
                evaluated=len(prompt),
            ):
                if isinstance(event, Done):
                    if end.usage is None and event.finish_reason != "cancelled":
                        # The usage chunk follows the last token at once (nothing more is decoded).
                        for _ in pieces:
                            pass
                    event = replace(event, prompt_tokens_evaluated=evaluated_tokens(end.usage, len(prompt)))
                yield event
