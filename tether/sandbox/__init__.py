"""Sandboxed execution of tools: bubblewrap executor, built-in tools and permission modes.

``SandboxExecutor`` runs commands under bubblewrap (no network, read-only
system, one writable work dir, rlimits, a pids cgroup and a wall clock) and
refuses to run when it cannot isolate, unless the operator chose
``mode="unsandboxed"``. ``make_toolbox`` builds the built-in tools behind a
``PermissionPolicy``. See docs/sandbox.md for the threat model.
"""

from __future__ import annotations

from tether.sandbox.builtin_tools import BuiltinTools, make_toolbox
from tether.sandbox.config import WORKSPACE, ExecResult, Limits, SandboxConfig, SandboxMode
from tether.sandbox.executor import CallableExecutor, Executor, SandboxExecutor, TrustedCallable
from tether.sandbox.paths import Workspace
from tether.sandbox.permissions import (
    ApprovalCallback,
    Decision,
    PermissionMode,
    PermissionPolicy,
    ToolKind,
    parse_mode,
)
from tether.sandbox.toolbox import Tool, ToolBox, ToolHandler, ToolResult, ToolSource

__all__ = [
    "WORKSPACE",
    "ApprovalCallback",
    "BuiltinTools",
    "CallableExecutor",
    "Decision",
    "ExecResult",
    "Executor",
    "Limits",
    "PermissionMode",
    "PermissionPolicy",
    "SandboxConfig",
    "SandboxExecutor",
    "SandboxMode",
    "Tool",
    "ToolBox",
    "ToolHandler",
    "ToolKind",
    "ToolResult",
    "ToolSource",
    "TrustedCallable",
    "Workspace",
    "make_toolbox",
    "parse_mode",
]
