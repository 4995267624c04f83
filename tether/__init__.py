"""tether: make small local models call tools reliably, in the serving path."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
