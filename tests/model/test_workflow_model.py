"""A real multi-step workflow (examples/workflow_notes.yaml) on the bundled SmolLM2-135M.

The model is weak; the runner carries it: strict layer-0 constraint (arguments held to
the schema), greedy sampling and ``steer="next_step"`` (tool_choice names the next
pending step's tool, then the terminal tool). The model still has to produce every
call itself and the run must end on the terminal tool.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tether.engine.llama_cpp import LlamaCppEngine
from tether.engine.scheduler import Scheduler
from tether.grammar.formats import detect_format, get_format
from tether.turns.core import ChatCore, CoreOptions
from tether.turns.layer0 import reply_spec_factory
from tether.workflows import CoreClient, ModelCalled, RunEvent, WorkflowRunner, load_workflow

EXAMPLE = Path(__file__).parents[2] / "examples" / "workflow_notes.yaml"
FILES = {"notes.txt": "The release moves to Friday.", "todo.txt": "- tag the release"}


@pytest.mark.timeout(1800)
async def test_notes_workflow_runs_to_its_terminal_tool(smollm: LlamaCppEngine) -> None:
    workflow = load_workflow(EXAMPLE)
    core = ChatCore(
        Scheduler([smollm]),
        get_format(detect_format(smollm.info.chat_template)),
        CoreOptions(reply_spec=reply_spec_factory(smollm.info.layers)),
    )
    executed: list[tuple[str, dict[str, Any]]] = []

    def list_files() -> str:
        executed.append(("list_files", {}))
        return "\n".join(sorted(FILES))

    def read_file(path: str) -> str:
        executed.append(("read_file", {"path": path}))
        return FILES[path]

    def submit_report(path: str, day: str) -> str:
        executed.append(("submit_report", {"path": path}))
        return "accepted"

    events: list[RunEvent] = []
    runner = WorkflowRunner(
        workflow,
        CoreClient(core, constrain="strict", max_tokens=120),
        handlers={"list_files": list_files, "read_file": read_file, "submit_report": submit_report},
        on_event=events.append,
        steer="next_step",
    )
    result = await runner.run()
    assert result.ok, (result.reason, [m.content for m in result.messages])
    assert result.terminal_call is not None and result.terminal_call.name == "submit_report"
    final = dict(result.terminal_call.arguments)
    # The notes say Friday: an option the tool result names replaces one nobody said.
    assert final == {"path": "notes.txt", "day": "Friday"}
    assert executed[0] == ("list_files", {}) and ("read_file", {"path": "notes.txt"}) in executed
    assert executed[-1] == ("submit_report", {"path": "notes.txt"})
    assert result.state["pending"] == [] and result.iterations <= 6
    choices = [e.tool_choice for e in events if isinstance(e, ModelCalled)]
    assert choices[0] == "list_files" and choices[-1] == "submit_report"
