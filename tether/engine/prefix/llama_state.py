"""Saving and restoring one sequence's KV cells through llama.cpp's state API, and the cache tag
of a loaded GGUF."""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

from tether.engine.llama_options import LlamaOptions, attention
from tether.engine.prefix.keys import CacheTag, model_fingerprint

__all__ = ["keep_seq", "llama_tag", "load_seq", "save_seq"]


def save_seq(ctx: Any, seq: int) -> bytearray:
    """The serialized cells of ``seq`` in the context ``ctx`` (a ``llama_context_p``)."""
    import llama_cpp

    size = int(llama_cpp.llama_state_seq_get_size(ctx, seq))
    state = bytearray(size)
    view = (ctypes.c_uint8 * size).from_buffer(state)
    got = int(llama_cpp.llama_state_seq_get_data(ctx, view, size, seq))
    del view  # the buffer may be resized once no ctypes view holds it
    if got < size:
        del state[got:]
    return state


def load_seq(ctx: Any, seq: int, state: bytearray) -> bool:
    """Replace ``seq``'s cells with ``state``; False when llama.cpp refuses it (the sequence is then
    left empty or partial: the caller clears it)."""
    import llama_cpp

    view = (ctypes.c_uint8 * len(state)).from_buffer(state)
    try:
        return int(llama_cpp.llama_state_seq_set_data(ctx, view, len(state), seq)) > 0
    finally:
        del view


def keep_seq(ctx: Any, seq: int, n: int) -> None:
    """Drop ``seq``'s cells from position ``n`` on (``n = 0``: all of them)."""
    import llama_cpp

    llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(ctx), seq, n, -1)


def llama_tag(path: str | Path, options: LlamaOptions, *, layout: str, n_ctx: int) -> CacheTag:
    import llama_cpp

    return CacheTag(
        model=model_fingerprint(path),
        layout=layout,
        n_ctx=n_ctx,
        cache_type_k=options.cache_type_k,
        cache_type_v=options.cache_type_v,
        flash_attn=attention(options, layout),
        runtime=str(llama_cpp.__version__),
    )
