"""A stand-in for vLLM's OpenAI server on a loopback socket: its routes and wire shapes, no model.

The routes tether's vLLM engine uses (vLLM 0.32): ``/v1/models``, ``/version``,
``/tokenizer_info`` (off, as in vLLM without ``--enable-tokenizer-info-endpoint``, when
``template`` is None), ``/tokenize`` (text or messages), ``/detokenize`` and
``/v1/completions``: plain (the vocabulary probe: ``logit_bias`` ids past ``vocab`` are
refused with 400, as vLLM does) or streamed. A stream sends the scripted ``steps`` in
vLLM's chunk shape (:func:`chunk`; tests/unit/engine/test_vllm_wire.py checks it against
what vLLM's own serializer writes), then the usage chunk and ``[DONE]``.

"Tokens" are code points, so a prompt's ids say what was rendered.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

__all__ = ["MODEL", "FakeVllm", "Step", "chunk", "ids_of", "usage_chunk"]

MODEL = "smollm2-135m-instruct"
EOS = 2  # the id vLLM appends to the last chunk when the model ends its reply


@dataclass(frozen=True)
class Step:
    """One streamed chunk: the ids decoded in one engine step, their text, and the finish if last."""

    ids: tuple[int, ...]
    text: str
    finish: str | None = None
    stop_reason: int | str | None = None


def ids_of(text: str) -> list[int]:
    return [ord(c) for c in text]


def chunk(step: Step, prompt: list[int] | None) -> dict[str, Any]:
    """A ``CompletionStreamResponse`` as vLLM's completions server dumps it (``exclude_unset``);
    ``prompt``: the prompt ids, sent on the first chunk with ``return_token_ids``."""
    return {
        "id": "cmpl-t",
        "object": "text_completion",
        "created": 0,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "text": step.text,
                "logprobs": None,
                "finish_reason": step.finish,
                "stop_reason": step.stop_reason,
                "prompt_token_ids": prompt,
                "token_ids": list(step.ids),
            }
        ],
    }


def usage_chunk(prompt_tokens: int, completion_tokens: int, cached: int | None) -> dict[str, Any]:
    """The chunk after the last with ``stream_options.include_usage`` (``exclude_none``)."""
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }
    if cached is not None:  # only with --enable-prompt-tokens-details
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return {
        "id": "cmpl-t",
        "object": "text_completion",
        "created": 0,
        "model": MODEL,
        "choices": [],
        "usage": usage,
    }


def reply_steps(text: str, *, finish: str = "stop") -> list[Step]:
    """``text`` one code point per step, then EOS (``finish`` stop) or nothing more (length)."""
    steps = [Step((ord(c),), c) for c in text]
    if finish == "stop":
        return [*steps, Step((EOS,), "", "stop")]
    last = steps[-1]
    return [*steps[:-1], Step(last.ids, last.text, finish)]


@dataclass
class FakeVllm:
    """The server's state: what it serves and what it was sent."""

    template: str | None = "{{ messages }}"
    template_reads_tools: bool = False
    vocab: int = 50_257
    max_model_len: int = 2048
    owned_by: str = "vllm"
    steps: list[Step] = field(default_factory=lambda: reply_steps("Hello"))
    cached: int | None = 3
    delay_s: float = 0.0
    fail_after: int | None = None  # steps, then an error chunk (a generation error)
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    hung_up: threading.Event = field(default_factory=threading.Event)

    def sent(self, path: str) -> list[dict[str, Any]]:
        return [body for p, body in self.requests if p == path]

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.get("/v1/models")
        async def models() -> dict[str, Any]:
            card = {"id": MODEL, "object": "model", "created": 0, "owned_by": self.owned_by}
            return {
                "object": "list",
                "data": [{**card, "root": "/models/smollm2", "max_model_len": self.max_model_len}],
            }

        @app.get("/version")
        async def version() -> dict[str, Any]:
            return {"version": "0.32.0"}

        @app.get("/tokenizer_info")
        async def tokenizer_info() -> Any:
            if self.template is None:
                return JSONResponse({"detail": "Not Found"}, status_code=404)
            return {
                "tokenizer_class": "GPT2TokenizerFast",
                "chat_template": self.template,
                "bos_token": "<|im_start|>",
                "eos_token": {"content": "\x02"},
            }

        @app.post("/tokenize")
        async def tokenize(request: Request) -> Any:
            body = await request.json()
            self.requests.append(("/tokenize", body))
            if "messages" not in body:
                return {
                    "tokens": ids_of(body["prompt"]),
                    "count": len(body["prompt"]),
                    "max_model_len": self.max_model_len,
                }
            if any(m.get("role") not in ("system", "user", "assistant", "tool") for m in body["messages"]):
                error = {
                    "message": "Conversation roles must alternate",
                    "type": "BadRequestError",
                    "code": 400,
                }
                return JSONResponse({"error": error}, status_code=400)
            text = "".join(f"{m['role']}: {m.get('content') or ''}\n" for m in body["messages"])
            if self.template_reads_tools and body.get("tools"):
                text = json.dumps(body["tools"]) + "\n" + text
            return {"tokens": ids_of(text + "assistant: "), "count": 0, "max_model_len": self.max_model_len}

        @app.post("/detokenize")
        async def detokenize(request: Request) -> dict[str, Any]:
            body = await request.json()
            self.requests.append(("/detokenize", body))
            return {"prompt": "".join(chr(t) for t in body["tokens"])}

        @app.post("/v1/completions")
        async def completions(request: Request) -> Any:
            body = await request.json()
            self.requests.append(("/v1/completions", body))
            bad = [k for k in body.get("logit_bias") or {} if int(k) >= self.vocab]
            if bad:
                message = f"token_id(s) {bad} in logit_bias contain out-of-vocab token ids"
                return JSONResponse(
                    {"error": {"message": message, "type": "BadRequestError", "code": 400}}, status_code=400
                )
            if not body.get("stream"):
                choice = {"index": 0, "text": "x", "finish_reason": "length", "token_ids": None}
                return {"id": "cmpl-t", "object": "text_completion", "model": MODEL, "choices": [choice]}
            return StreamingResponse(self._stream(list(body["prompt"])), media_type="text/event-stream")

        return app

    async def _stream(self, prompt: list[int]) -> AsyncIterator[str]:
        finished = False
        try:
            for i, step in enumerate(self.steps):
                if self.fail_after is not None and i == self.fail_after:
                    error = {"message": "generation failed", "type": "InternalServerError", "code": 500}
                    yield f"data: {json.dumps({'error': error})}\n\n"
                    break
                yield _sse(chunk(step, prompt if i == 0 else None))
                await asyncio.sleep(self.delay_s)
            produced = sum(len(s.ids) for s in self.steps)
            yield _sse(usage_chunk(len(prompt), produced, self.cached))
            yield "data: [DONE]\n\n"
            finished = True
        finally:
            if not finished:
                self.hung_up.set()


def _sse(value: dict[str, Any]) -> str:
    return f"data: {json.dumps(value, ensure_ascii=False, separators=(',', ':'))}\n\n"
