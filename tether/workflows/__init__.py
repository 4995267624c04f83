"""Declarative workflows, step enforcement and context compaction.

* ``Workflow`` (``spec``): tools, required steps, prerequisites (arg-matched), terminal
  tools and budgets; ``load_workflow`` reads YAML/TOML (``loader``).
* ``WorkflowRunner`` (``runner``): model <-> tools until a terminal tool succeeds, with
  guardrails every turn and blocked (never executed) rule violations; ``CoreClient`` /
  ``HttpClient`` (``client``) are the model side, ``workflow_toolbox`` (``tools``) the tools.
* ``WorkflowState`` / ``check_calls`` (``state``, ``enforcement``): the rules, shared with
  the proxy's sessions (``tether.proxy.sessions``).
* ``compact`` / ``compact_job`` (``compaction``) and ``context_budget`` (``budget``).

See docs/workflows.md.
"""

from __future__ import annotations

from tether.turns.compaction import (
    NUDGE_PREFIXES,
    CompactionPolicy,
    CompactionResult,
    TokenCounter,
    compact,
    compact_job,
    core_token_counter,
)
from tether.workflows.budget import (
    KV_TYPE_BYTES,
    ContextBudget,
    context_budget,
    gpu_free_bytes,
    kv_bytes_per_token,
    mem_available_bytes,
)
from tether.workflows.client import CoreClient, HttpClient, ModelClient
from tether.workflows.enforcement import Blocked, Enforcement, check_calls, observe
from tether.workflows.events import (
    Compacted,
    EventCallback,
    Finished,
    InterventionEvent,
    ModelCalled,
    ModelReplied,
    RunEvent,
    RunResult,
    RunStatus,
    ToolResultEvent,
)
from tether.workflows.loader import WorkflowModel, load_workflow, workflow_from_mapping
from tether.workflows.runner import Steer, WorkflowRunner, progress_note
from tether.workflows.spec import Budgets, Prerequisite, Step, ToolDef, Workflow, schema_of
from tether.workflows.state import Violation, ViolationKind, WorkflowState, args_label, violation_text
from tether.workflows.tools import PythonHandler, python_tool, workflow_toolbox

__all__ = [
    "KV_TYPE_BYTES",
    "NUDGE_PREFIXES",
    "Blocked",
    "Budgets",
    "Compacted",
    "CompactionPolicy",
    "CompactionResult",
    "ContextBudget",
    "CoreClient",
    "Enforcement",
    "EventCallback",
    "Finished",
    "HttpClient",
    "InterventionEvent",
    "ModelCalled",
    "ModelClient",
    "ModelReplied",
    "Prerequisite",
    "PythonHandler",
    "RunEvent",
    "RunResult",
    "RunStatus",
    "Steer",
    "Step",
    "TokenCounter",
    "ToolDef",
    "ToolResultEvent",
    "Violation",
    "ViolationKind",
    "Workflow",
    "WorkflowModel",
    "WorkflowRunner",
    "WorkflowState",
    "args_label",
    "check_calls",
    "compact",
    "compact_job",
    "context_budget",
    "core_token_counter",
    "gpu_free_bytes",
    "kv_bytes_per_token",
    "load_workflow",
    "mem_available_bytes",
    "observe",
    "progress_note",
    "python_tool",
    "schema_of",
    "violation_text",
    "workflow_from_mapping",
    "workflow_toolbox",
]
