"""An ``OutputSpec`` compiled for a remote server: the request fields that apply it in its own language."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tether.grammar.spec import OutputSpec

__all__ = ["RemoteConstraint"]


@dataclass(frozen=True)
class RemoteConstraint:
    """``spec`` as one remote engine compiled it: the request body fields that apply it (none: the
    server cannot apply it, and the guard checks the reply afterwards)."""

    spec: OutputSpec
    fields: Mapping[str, Any] = field(default_factory=dict)
