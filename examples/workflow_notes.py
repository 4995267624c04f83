"""Run examples/workflow_notes.yaml: in-process on the bundled model, or against a tether server.

    .venv/bin/python examples/workflow_notes.py                       # embedded SmolLM2-135M
    .venv/bin/python examples/workflow_notes.py --base-url http://127.0.0.1:8000/v1

The tools are trusted Python callables over a small in-memory project. Every event
(model call, intervention, tool result) is printed as it happens.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from tether.workflows import (
    CoreClient,
    Finished,
    HttpClient,
    InterventionEvent,
    ModelCalled,
    ModelClient,
    RunEvent,
    ToolResultEvent,
    WorkflowRunner,
    load_workflow,
)

HERE = Path(__file__).parent
FILES = {
    "notes.txt": "The release moves to Friday because the database migration needs one more review.",
    "todo.txt": "- write the changelog\n- tag the release",
}


def handlers() -> dict[str, Any]:
    def list_files() -> str:
        return "\n".join(sorted(FILES))

    def read_file(path: str) -> str:
        return FILES[path]

    def submit_report(path: str, day: str) -> str:
        return f"report on {path} accepted: the release is on {day}"

    return {"list_files": list_files, "read_file": read_file, "submit_report": submit_report}


def show(event: RunEvent) -> None:
    if isinstance(event, ModelCalled):
        print(
            f"[{event.iteration}] model call, tool_choice={event.tool_choice}, {event.prompt_tokens} tokens"
        )
    elif isinstance(event, InterventionEvent):
        print(f"    intervention {event.kind}: {event.detail}")
    elif isinstance(event, ToolResultEvent):
        flag = "error" if event.is_error else "ok"
        print(f"    {event.call.name}({event.call.arguments}) -> {flag}: {event.content[:80]!r}")
    elif isinstance(event, Finished):
        print(f"finished: {event.result.status} ({event.result.reason})")


def embedded_client() -> ModelClient:
    from tether.engine.llama_cpp import LlamaCppEngine
    from tether.engine.locate import bundled_model_path
    from tether.engine.scheduler import Scheduler
    from tether.grammar.formats import detect_format, get_format
    from tether.turns.core import ChatCore, CoreOptions
    from tether.turns.layer0 import reply_spec_factory

    engine = LlamaCppEngine(bundled_model_path(), n_ctx=4096)
    core = ChatCore(
        Scheduler([engine]),
        get_format(detect_format(engine.info.chat_template)),
        CoreOptions(reply_spec=reply_spec_factory(engine.info.layers)),
    )
    return CoreClient(core, constrain="strict", max_tokens=160)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", help="an OpenAI-compatible server; default: embedded model")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--steer", default="next_step", choices=["off", "required", "next_step"])
    args = parser.parse_args()
    workflow = load_workflow(HERE / "workflow_notes.yaml")
    client: ModelClient = (
        HttpClient(args.base_url, args.model, extra_body={"tether": {"constrain": "strict"}})
        if args.base_url
        else embedded_client()
    )
    runner = WorkflowRunner(workflow, client, handlers=handlers(), on_event=show, steer=args.steer)
    result = await runner.run()
    print(f"terminal call: {result.terminal_call}")


if __name__ == "__main__":
    asyncio.run(main())
