"""OpenAI-compatible ``POST /v1/embeddings`` on the server's sentence-embedding model.

``input``: a string, a list of strings, a list of token ids or a list of such lists (ids of the
embedding model's own WordPiece vocabulary). ``encoding_format``: ``float`` or ``base64`` (little-endian
float32, what the openai SDK asks for by default). ``dimensions``: only the model's own (384).
Inputs longer than the model's window (512 tokens) are cut; ``usage`` counts the tokens embedded.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Annotated, Any, Literal

import numpy as np
import numpy.typing as npt
import structlog
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import Field, ValidationError, ValidatorFunctionWrapHandler, field_validator
from pydantic_core import PydanticCustomError

from tether.engine.embedding import Embedder, Embeddings
from tether.errors import InvalidRequestError, ModelNotFoundError
from tether.proxy.wire import RequestBody, app_state

__all__ = ["MAX_INPUTS", "EmbeddingRequest", "embedding_model_card", "router"]

log = structlog.get_logger(__name__)

router = APIRouter(prefix="/v1")

MAX_INPUTS = 2048
"""Inputs one request may carry (OpenAI's limit too)."""

TokenId = Annotated[int, Field(ge=0, strict=True)]


class EmbeddingRequest(RequestBody):
    input: str | list[str] | list[TokenId] | list[list[TokenId]]
    model: str
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    user: str | None = None  # accepted and ignored

    @field_validator("input", mode="wrap")
    @classmethod
    def _one_message(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """One error naming the accepted shapes, not one per member of the union."""
        try:
            return handler(value)
        except ValidationError:
            raise PydanticCustomError(
                "input_shape",
                "input must be a string, a list of strings, a list of token ids (integers >= 0) or a list "
                "of token-id lists",
            ) from None


def _inputs(value: str | list[str] | list[int] | list[list[int]]) -> list[str | list[int]]:
    """The request's inputs as a list (one token list is one input); a 400 for none, too many or an empty one."""
    items: list[str | list[int]]
    if isinstance(value, str):
        items = [value]
    elif value and isinstance(value[0], int):
        items = [[int(v) for v in value if isinstance(v, int)]]
    else:
        items = [v for v in value if not isinstance(v, int)]
    if not items:
        raise InvalidRequestError("input must not be empty", param="input")
    if len(items) > MAX_INPUTS:
        raise InvalidRequestError(
            f"input holds {len(items)} items; at most {MAX_INPUTS} per request", param="input"
        )
    for i, item in enumerate(items):
        if len(item) == 0:
            where = "input" if isinstance(value, str) else f"input[{i}]"
            raise InvalidRequestError(f"{where} is empty: every input needs text or token ids", param="input")
    return items


def _embedder(request: Request, model: str) -> Embedder:
    embedder = app_state(request).embedder
    if embedder is None:
        raise ModelNotFoundError(
            "this server has no embedding model: start it with --embedding-model PATH.gguf, or run "
            "scripts/setup.sh to convert the bundled all-MiniLM-L6-v2",
            param="model",
        )
    if model.lower() not in {name.lower() for name in embedder.names}:
        raise ModelNotFoundError(
            f"model {model!r} is not an embedding model served here; available: {', '.join(embedder.names)}",
            param="model",
        )
    return embedder


def _encode(vector: npt.NDArray[np.float32], encoding_format: str) -> list[float] | str:
    """``float``: a JSON list; ``base64``: the little-endian float32 bytes, as OpenAI sends them."""
    if encoding_format == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    values: list[float] = vector.tolist()
    return values


def embedding_model_card(embedder: Embedder, created: int) -> dict[str, Any]:
    """The embedding model's entry in ``/v1/models``."""
    return {
        "id": embedder.model_id,
        "object": "model",
        "created": created,
        "owned_by": "tether",
        "tether": {"kind": "embedding", "dimensions": embedder.dimensions, "max_tokens": embedder.max_tokens},
    }


@router.post("/embeddings", response_model=None)
async def embeddings(body: EmbeddingRequest, request: Request) -> JSONResponse:
    embedder = _embedder(request, body.model)
    if body.dimensions is not None and body.dimensions != embedder.dimensions:
        raise InvalidRequestError(
            f"dimensions {body.dimensions} is not supported: {embedder.model_id} has {embedder.dimensions} "
            "dimensions and cannot shorten them",
            param="dimensions",
        )
    inputs = _inputs(body.input)
    # One llama.cpp context: the embedder takes turns under its own lock, off the event loop.
    result: Embeddings = await asyncio.to_thread(embedder.embed_inputs, inputs)
    truncated = [i for i, cut in enumerate(result.truncated) if cut]
    if truncated:
        log.info(
            "embedding_inputs_truncated",
            indices=truncated[:16],
            count=len(truncated),
            max_tokens=embedder.max_tokens,
        )
    out: dict[str, Any] = {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": _encode(vector, body.encoding_format)}
            for i, vector in enumerate(result.vectors)
        ],
        "model": embedder.model_id,
        "usage": {"prompt_tokens": result.prompt_tokens, "total_tokens": result.prompt_tokens},
    }
    if truncated:
        out["tether"] = {"truncated": truncated, "max_tokens": embedder.max_tokens}
    return JSONResponse(out)
