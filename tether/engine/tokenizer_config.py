"""What a Hugging Face checkpoint's tokenizer files say, read the same way for every engine that loads one."""

from __future__ import annotations

from typing import Any

__all__ = ["token_text"]


def token_text(value: Any) -> str | None:
    """A special token's text as ``tokenizer_config.json`` writes it: a string, or ``{"content": ...}``."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None
