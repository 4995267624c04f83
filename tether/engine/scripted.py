"""A deterministic engine that replays scripted replies, for testing the proxy (not the model).

Its vocabulary is the 256 byte values plus an end token. Replies come from a list
or a callable over the prompt text. When a logits processor is attached (a constraint,
``logit_bias``, or the log-probability recorder), the logits are fixed: 10 for the scripted
token, 0 for every other, and the processor may override them; the sampled token is the
argmax (lowest id on ties), so constraints and log-probabilities are deterministic.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from tether.engine.base import (
    ContextEngine,
    Done,
    EngineInfo,
    Generation,
    GenerationEvent,
    common_prefix_len,
)
from tether.engine.loop import token_loop

__all__ = ["ScriptedEngine"]

EOS_ID = 256
CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content']"
    " + '<|im_end|>\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

Reply = str | Callable[[str], str]


class ScriptedEngine(ContextEngine):
    """Replays ``replies`` in order (the last one repeats). ``n_ctx`` bounds prompt + output."""

    def __init__(
        self,
        replies: Sequence[Reply] = ("Hello!",),
        *,
        n_ctx: int = 4096,
        chat_template: str | None = CHATML,
        model_id: str = "scripted",
        pause_after: int | None = None,
    ) -> None:
        super().__init__()
        self._replies = list(replies)
        self._next = 0
        self._context: list[int] = []
        self.prompts: list[str] = []
        self.pause_after = pause_after
        self.resume = threading.Event()
        self.paused = threading.Event()
        self.released = threading.Event()  # the pause ended, by ``resume`` or its timeout
        self._info = EngineInfo(
            model_id=model_id,
            n_ctx=n_ctx,
            chat_template=chat_template,
            bos_token="",
            eos_token="<|im_end|>",
            eos_token_ids=frozenset({EOS_ID}),
            n_vocab=EOS_ID + 1,
        )

    @property
    def info(self) -> EngineInfo:
        return self._info

    def tokenize(self, text: str, *, special: bool = True) -> list[int]:
        return list(text.encode("utf-8"))

    def detokenize(self, ids: Sequence[int]) -> str:
        return bytes(i for i in ids if i < EOS_ID).decode("utf-8", errors="replace")

    def token_pieces(self) -> list[bytes]:
        return [bytes([i]) for i in range(256)] + [b""]

    def cached_prefix_len(self, prompt: Sequence[int]) -> int:
        return common_prefix_len(self._context, prompt[:-1])

    def _reply_for(self, prompt_text: str) -> str:
        reply = self._replies[min(self._next, len(self._replies) - 1)]
        self._next += 1
        return reply(prompt_text) if callable(reply) else reply

    def _generate(self, run: Generation) -> Iterator[GenerationEvent]:
        prompt, params, logits_processor, cancel = run.prompt, run.params, run.logits_processor, run.cancel
        prompt_text = self.detokenize(prompt)
        self.prompts.append(prompt_text)
        reused = self.cached_prefix_len(prompt)
        script = [*self.tokenize(self._reply_for(prompt_text)), EOS_ID]
        ids = list(prompt)

        def sampled() -> Iterator[int]:
            for step, scripted in enumerate(script):
                if self.pause_after is not None and step == self.pause_after:
                    self.paused.set()
                    self.resume.wait(timeout=30)
                    self.released.set()
                token = scripted
                if logits_processor is not None:
                    logits = np.zeros(EOS_ID + 1, dtype=np.single)
                    logits[scripted] = 10.0
                    logits = logits_processor(np.asarray(ids, dtype=np.intc), logits)
                    token = int(np.argmax(logits))
                if token != EOS_ID:
                    ids.append(token)
                yield token

        if cancel is not None and cancel.is_set():
            yield Done("cancelled", len(prompt), len(prompt) - reused, 0)
            return
        try:
            yield from token_loop(
                sampled(),
                piece=lambda t: bytes([t]) if t < EOS_ID else b"",
                eos=frozenset({EOS_ID}),
                max_tokens=params.max_tokens,
                cancel=cancel,
                prompt_tokens=len(prompt),
                evaluated=len(prompt) - reused,
            )
        finally:
            self._context = ids

    def close(self) -> None:
        return None
