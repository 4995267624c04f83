"""One llama.cpp context shared by many sequences, through ``llama-cpp-python``'s low-level API.

A :class:`BatchContext` owns the context (``n_seq_max`` sequences, each with its own stream of
``n_ctx / n_seq`` KV cells, as llama-server's slots: in one unified cache every sequence would
attend over every other sequence's cells, which doubled a lone stream's step time once the
others had filled theirs) and one ``llama_batch``. The runner fills the batch with :meth:`add` (a token, its position, its
sequence and whether its logits are wanted), runs :meth:`decode` once per step, and reads each
wanted row with :meth:`logits`. Only the runner thread touches it.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import numpy.typing as npt

from tether.engine.prefix import load_seq, save_seq
from tether.errors import EngineError

__all__ = ["BatchContext"]


class BatchContext:
    """``n_seq`` sequences in one context of ``n_ctx`` cells; at most ``n_batch`` tokens per decode."""

    def __init__(
        self, llm: Any, *, n_ctx: int, n_seq: int, n_batch: int, flash_attn: bool | None = None
    ) -> None:
        import llama_cpp

        self._lib = llama_cpp
        limit = int(llama_cpp.llama_max_parallel_sequences())
        if n_seq > limit:
            raise EngineError(f"llama.cpp batches at most {limit} sequences in one context, not {n_seq}")
        # The loading Llama's own context settings (threads, cache types) carry over.
        params = llama_cpp.llama_context_params.from_buffer_copy(llm.context_params)
        params.n_ctx = n_ctx
        params.n_batch = n_batch
        params.n_ubatch = n_batch
        params.n_seq_max = n_seq
        params.kv_unified = False
        # Not forced (--flash-attn / --no-flash-attn): llama.cpp decides, as llama-server does. On CPU it
        # picks flash attention: one stream decodes ~1.12x faster, 8 streams ~1.2x (bench_stream,
        # bench_batch), and a one-slot server writes llama-server's greedy tokens.
        params.flash_attn_type = {
            True: llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
            False: llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED,
            None: llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO,
        }[flash_attn]
        self._ctx = llama_cpp.llama_init_from_model(llm._model.model, params)
        if not self._ctx:
            raise EngineError(f"llama.cpp could not create a context of {n_ctx} tokens for {n_seq} sequences")
        self._mem = llama_cpp.llama_get_memory(self._ctx)
        self.n_ctx = int(llama_cpp.llama_n_ctx(self._ctx))
        self.n_batch = n_batch
        self.n_vocab = int(llm.n_vocab())
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        self._token = np.ctypeslib.as_array(self._batch.token, shape=(n_batch,))
        self._pos = np.ctypeslib.as_array(self._batch.pos, shape=(n_batch,))
        self._n_seq_id = np.ctypeslib.as_array(self._batch.n_seq_id, shape=(n_batch,))
        self._wants = np.ctypeslib.as_array(self._batch.logits, shape=(n_batch,))
        self._seq_rows = [self._batch.seq_id[i] for i in range(n_batch)]
        self._n_seq_id[:] = 1
        self.size = 0

    @property
    def room(self) -> int:
        """Tokens that still fit in this step's batch."""
        return self.n_batch - self.size

    def add(self, token: int, pos: int, seq: int, *, logits: bool) -> int:
        """Queue one token for the next decode; returns its row (for :meth:`logits`)."""
        i = self.size
        if i >= self.n_batch:
            raise EngineError("the batch is full (a runner bug)")
        self._token[i] = token
        self._pos[i] = pos
        self._seq_rows[i][0] = seq
        self._wants[i] = 1 if logits else 0
        self.size = i + 1
        return i

    def clear(self) -> None:
        """Drop what was queued for the next decode (a step that failed before decoding)."""
        self.size = 0

    def decode(self) -> None:
        """Evaluate the queued tokens in one ``llama_decode`` and start a new batch."""
        if self.size == 0:
            return
        self._batch.n_tokens = self.size
        rc = int(self._lib.llama_decode(self._ctx, self._batch))
        self.size = 0
        if rc != 0:
            reason = "no room left in the KV cache" if rc == 1 else f"llama_decode returned {rc}"
            raise EngineError(f"the batched decode failed: {reason}")

    def logits(self, row: int, *, copy: bool = True) -> npt.NDArray[np.single]:
        """The logits at ``row`` of the last decode: a copy (processors edit it in place), or with
        ``copy=False`` a view of llama.cpp's buffer, valid until the next decode."""
        ptr = self._lib.llama_get_logits_ith(self._ctx, row)
        if not ptr:
            raise EngineError(f"no logits at batch row {row}")
        view = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(self.n_vocab,))
        return np.array(view, dtype=np.single) if copy else view

    def keep(self, seq: int, n: int) -> None:
        """Drop ``seq``'s cells from position ``n`` on (``n = 0``: all of them)."""
        if not self._lib.llama_memory_seq_rm(self._mem, seq, n, -1):
            raise EngineError(f"llama.cpp could not trim sequence {seq} to {n} tokens")

    def share(self, src: int, dst: int, n: int) -> None:
        """Give ``dst`` the first ``n`` positions of ``src``: nothing is recomputed. Separate streams
        copy whole (llama.cpp aborts on a partial copy between streams), then ``dst`` is trimmed."""
        self._lib.llama_memory_seq_cp(self._mem, src, dst, -1, -1)
        self.keep(dst, n)

    def save_state(self, seq: int) -> bytearray:
        """``seq``'s cells, serialized (the prefix cache keeps them)."""
        return save_seq(self._ctx, seq)

    def load_state(self, seq: int, state: bytearray) -> bool:
        """Replace ``seq``'s cells with a saved state; on False the sequence is left empty."""
        if load_seq(self._ctx, seq, state):
            return True
        self.keep(seq, 0)
        return False

    def close(self) -> None:
        if self._ctx:
            self._lib.llama_batch_free(self._batch)
            self._lib.llama_free(self._ctx)
            self._ctx = None
