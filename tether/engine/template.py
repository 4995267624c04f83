"""Rendering prompts with a model's own Jinja chat template, in a sandboxed environment.

A model whose GGUF ships no template gets tether's ChatML fallback (:data:`DEFAULT_CHATML`). Its
turn markers mean something to the model only where they are its own special tokens; where the
end-of-turn marker is plain text to it, the model goes on writing the next turns after its reply,
so the markers become stop strings of every generation on it (:func:`fallback_stops`).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jinja2
import jinja2.meta
from jinja2.sandbox import ImmutableSandboxedEnvironment

from tether.errors import ConfigError, InvalidRequestError

__all__ = ["DEFAULT_CHATML", "FALLBACK_TURN_END", "FALLBACK_TURN_OPEN", "ChatTemplate", "fallback_stops"]

# The fallback's turn markers.
FALLBACK_TURN_OPEN = "<|im_start|>"
FALLBACK_TURN_END = "<|im_end|>"

# Used only when a model ships no template at all.
DEFAULT_CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content']"
    " + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def fallback_stops(
    chat_template: str | None, tokenize: Callable[[str], Sequence[int]], ends: frozenset[int]
) -> tuple[str, ...]:
    """The stop strings a model needs for tether's fallback template: none when the model ships a
    template of its own, or when the fallback's end-of-turn marker is one token that ends a
    generation (``ends``: the model's end-of-generation ids); else the marker and the next turn's
    opener, which the model would otherwise write as text and run on into invented turns.

    ``tokenize`` is the model's, with special tokens parsed (a BOS it adds is discounted)."""
    if chat_template:
        return ()
    lead = list(tokenize(""))
    ids = list(tokenize(FALLBACK_TURN_END))
    if ids[: len(lead)] == lead:
        ids = ids[len(lead) :]
    if len(ids) == 1 and ids[0] in ends:
        return ()
    return (FALLBACK_TURN_END, FALLBACK_TURN_OPEN)


def _raise(message: str) -> None:
    raise InvalidRequestError(f"chat template refused the conversation: {message}", param="messages")


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


class ChatTemplate:
    """A compiled chat template. ``supports_tools`` is true when it reads the ``tools`` variable."""

    def __init__(self, source: str | None, *, bos_token: str = "", eos_token: str = "") -> None:
        self.source = source or DEFAULT_CHATML
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = _strftime_now
        env.filters["tojson"] = _tojson
        try:
            parsed = env.parse(self.source)
            self._template = env.from_string(self.source)
        except jinja2.TemplateError as exc:
            raise ConfigError(f"the model's chat template does not compile: {exc}") from exc
        self.variables = frozenset(jinja2.meta.find_undeclared_variables(parsed))
        self.supports_tools = "tools" in self.variables
        self.bos_token = bos_token
        self.eos_token = eos_token

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> str:
        ctx: dict[str, Any] = {
            "messages": [dict(m) for m in messages],
            "add_generation_prompt": add_generation_prompt,
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
        }
        if tools and self.supports_tools:
            ctx["tools"] = [dict(t) for t in tools]
        try:
            return self._template.render(**ctx)
        except jinja2.TemplateError as exc:
            raise InvalidRequestError(f"chat template failed to render: {exc}", param="messages") from exc


def _tojson(value: Any, indent: int | None = None, ensure_ascii: bool = False, **_: Any) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii)
