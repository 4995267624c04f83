"""What a cached prefix is keyed by: a chained hash per block of tokens, salted with a tag.

Block ``k``'s hash covers every token up to the end of block ``k`` (it hashes block ``k``'s ids
after block ``k-1``'s hash), so the longest cached prefix of a new prompt is found by walking
the prompt's chain until a hash is unknown. The salt is the :class:`CacheTag`'s digest: state
saved for another model file, another KV cache type or another engine layout never matches.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

__all__ = ["BLOCK", "CacheTag", "block_chain", "model_fingerprint"]

BLOCK = 256  # tokens per hashed block: a prefix is cached and found in whole blocks

_SAMPLE = 4 << 20  # bytes read from each end of a model file for its fingerprint


def model_fingerprint(path: str | Path) -> str:
    """A model file's identity: its size and a hash of its first and last 4 MiB.

    A GGUF's header (architecture, quantization, vocabulary) is at the start and its last tensors
    at the end; hashing a multi-GB file whole at every start would cost seconds."""
    p = Path(path)
    size = p.stat().st_size
    digest = hashlib.blake2b(str(size).encode(), digest_size=16)
    with p.open("rb") as f:
        digest.update(f.read(_SAMPLE))
        if size > 2 * _SAMPLE:
            f.seek(size - _SAMPLE)
            digest.update(f.read(_SAMPLE))
    return digest.hexdigest()


@dataclass(frozen=True)
class CacheTag:
    """Everything a saved KV state depends on besides the tokens."""

    model: str  # model_fingerprint of the GGUF
    layout: str  # "serial" (a context of its own) or "batched" (a stream of a shared context)
    n_ctx: int  # cells of the sequence the state was saved from
    cache_type_k: str
    cache_type_v: str
    flash_attn: str  # the V cache is stored transposed without it
    runtime: str  # llama.cpp's state format can change between versions

    def digest(self) -> bytes:
        text = json.dumps(asdict(self), sort_keys=True).encode()
        return hashlib.blake2b(text, digest_size=16).digest()


def block_chain(tokens: Sequence[int] | np.ndarray, salt: bytes) -> list[bytes]:
    """The chained hash of every whole block of ``tokens`` (a partial last block is left out)."""
    ids = np.ascontiguousarray(tokens, dtype="<i4")
    chain: list[bytes] = []
    prev = salt
    for start in range(0, len(ids) - BLOCK + 1, BLOCK):
        prev = hashlib.blake2b(prev + ids[start : start + BLOCK].tobytes(), digest_size=16).digest()
        chain.append(prev)
    return chain
