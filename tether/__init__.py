"""tether: make small local models call tools reliably, in the serving path.

The serving side is ``tether serve`` (see ``tether.server`` and ``tether.proxy``); the Python
middleware for any OpenAI-compatible client is :class:`Guardrails` and :func:`wrap`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["Guardrails", "__version__", "wrap"]

__version__ = "0.1.0"

if TYPE_CHECKING:
    from tether.guardrails import Guardrails, wrap


def __getattr__(name: str) -> Any:
    # Lazy: ``import tether`` stays cheap for the CLI and the server.
    if name in ("Guardrails", "wrap"):
        import tether.guardrails as guardrails

        return getattr(guardrails, name)
    raise AttributeError(f"module 'tether' has no attribute {name!r}")
