"""Permission modes: which tool calls may run, which need approval, which are refused.

Every tool has a kind: ``read`` (no side effects), ``edit`` (changes files in
the work dir) or ``command`` (runs a program). The decision, in order:

1. a tool on the deny list is refused (deny always wins);
2. ``plan`` refuses every non-``read`` tool, allow list or not;
3. a tool on the allow list runs without asking;
4. ``read`` tools run;
5. ``auto`` runs everything; ``accept-edits`` runs ``edit`` tools;
6. anything else asks the approval callback; with no callback, or if the
   callback fails, the call is refused.

``parse_mode`` never fails open: a missing or unknown setting becomes ``plan``
with a warning.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import structlog

__all__ = [
    "ApprovalCallback",
    "Decision",
    "PermissionMode",
    "PermissionPolicy",
    "ToolKind",
    "parse_mode",
]

log = structlog.get_logger(__name__)

ToolKind = Literal["read", "edit", "command"]
ApprovalCallback = Callable[[str, Mapping[str, Any]], Awaitable[bool]]


class PermissionMode(enum.StrEnum):
    """How much the model may do without a human."""

    PLAN = "plan"
    ASK = "ask"
    ACCEPT_EDITS = "accept-edits"
    AUTO = "auto"


_ALIASES = {
    "plan": PermissionMode.PLAN,
    "read-only": PermissionMode.PLAN,
    "readonly": PermissionMode.PLAN,
    "ask": PermissionMode.ASK,
    "default": PermissionMode.ASK,
    "accept-edits": PermissionMode.ACCEPT_EDITS,
    "acceptedits": PermissionMode.ACCEPT_EDITS,
    "auto": PermissionMode.AUTO,
}


def parse_mode(value: object) -> PermissionMode:
    """The mode named by ``value`` (case, ``_``/``-`` insensitive); anything else is ``plan``, with a warning."""
    if isinstance(value, PermissionMode):
        return value
    if isinstance(value, str):
        key = value.strip().lower().replace("_", "-")
        mode = _ALIASES.get(key)
        if mode is not None:
            return mode
    log.warning(
        "permission_mode_invalid",
        value=repr(value)[:100],
        fallback=PermissionMode.PLAN.value,
        expected=[m.value for m in PermissionMode],
    )
    return PermissionMode.PLAN


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether a call may run, and why (the reason is shown to the model when refused)."""

    allowed: bool
    reason: str


@dataclass(frozen=True, slots=True)
class PermissionPolicy:
    """A mode, allow/deny lists of tool names and an optional approval callback."""

    mode: PermissionMode = PermissionMode.PLAN
    allow: frozenset[str] = field(default_factory=frozenset)
    deny: frozenset[str] = field(default_factory=frozenset)
    approve: ApprovalCallback | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", parse_mode(self.mode))
        object.__setattr__(self, "allow", _names(self.allow))
        object.__setattr__(self, "deny", _names(self.deny))

    @classmethod
    def from_settings(
        cls,
        mode: str | None,
        *,
        allow: Iterable[str] = (),
        deny: Iterable[str] = (),
        approve: ApprovalCallback | None = None,
    ) -> PermissionPolicy:
        """Build from configuration strings; an invalid mode falls back to ``plan``."""
        return cls(mode=parse_mode(mode), allow=frozenset(allow), deny=frozenset(deny), approve=approve)

    def offers(self, name: str, kind: ToolKind) -> bool:
        """Whether the tool can ever run under this policy (so it is worth offering to the model)."""
        if name in self.deny:
            return False
        return not (self.mode is PermissionMode.PLAN and kind != "read")

    def _static(self, name: str, kind: ToolKind) -> Decision | None:
        if name in self.deny:
            return Decision(False, f"tool {name!r} is on the deny list")
        if self.mode is PermissionMode.PLAN and kind != "read":
            return Decision(
                False, f"tool {name!r} changes things and the permission mode is 'plan' (read-only)"
            )
        if name in self.allow:
            return Decision(True, "on the allow list")
        if kind == "read":
            return Decision(True, "read-only tool")
        if self.mode is PermissionMode.AUTO:
            return Decision(True, "mode 'auto'")
        if self.mode is PermissionMode.ACCEPT_EDITS and kind == "edit":
            return Decision(True, "mode 'accept-edits' allows file edits")
        return None

    async def check(self, name: str, kind: ToolKind, arguments: Mapping[str, Any]) -> Decision:
        """Decide one call; asks ``approve`` when the mode requires it."""
        decision = self._static(name, kind)
        if decision is not None:
            return decision
        if self.approve is None:
            return Decision(
                False,
                f"tool {name!r} needs approval in mode '{self.mode.value}' and no approver is configured; "
                "the call was not run",
            )
        try:
            approved = await self.approve(name, arguments)
        except Exception as exc:
            log.warning("permission_approval_failed", tool=name, error=repr(exc)[:200])
            return Decision(False, f"approval for tool {name!r} failed; the call was not run")
        if approved is True:
            return Decision(True, "approved")
        return Decision(False, f"the user declined the call to tool {name!r}")


def _names(values: Iterable[str]) -> frozenset[str]:
    if isinstance(values, str):  # a lone string would otherwise become a set of letters
        values = [values]
    return frozenset(str(v).strip() for v in values if str(v).strip())
