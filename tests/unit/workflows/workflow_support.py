"""Shared helpers for the workflow tests: a small file-editing workflow, scripted cores, replies."""

from __future__ import annotations

import codecs
import json
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from pydantic import BaseModel

from tether.chat import Message
from tether.engine.base import Constraint, Done, GenerationEvent, LogitsProcessor, SamplingParams, Token
from tether.engine.scheduler import Scheduler
from tether.engine.scripted import Reply, ScriptedEngine
from tether.grammar.formats import get_format
from tether.turns.core import ChatCore
from tether.workflows import Budgets, Prerequisite, Step, ToolDef, Workflow


class EditArgs(BaseModel):
    path: str
    text: str


PATH = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
SUMMARY = {"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]}


def edit_workflow(**options: Any) -> Workflow:
    """read_file / edit_file / run_tests / submit: edit needs a read of the same path; tests must
    have run before submit."""
    return Workflow(
        name="fix_bug",
        tools=(
            ToolDef.of("read_file", PATH, "Read a file"),
            ToolDef.of("edit_file", EditArgs, "Replace a file's text"),
            ToolDef.of("run_tests", None, "Run the test suite"),
            ToolDef.of("submit", SUMMARY, "Finish with a summary"),
        ),
        terminal=("submit",),
        steps=(Step("run_tests"),),
        prerequisites=(Prerequisite("edit_file", "read_file", (("path", "path"),)),),
        budgets=options.pop("budgets", Budgets(max_iterations=12)),
        system="You fix bugs.",
        task="Fix the bug in a.txt, run the tests, then submit.",
        **options,
    )


class Files:
    """In-memory files and trusted handlers over them; records every executed call."""

    def __init__(self, **files: str) -> None:
        self.files = dict(files) or {"a.txt": "bug", "b.txt": "fine"}
        self.executed: list[tuple[str, dict[str, Any]]] = []
        self.fail_tests = False

    def handlers(self) -> dict[str, Callable[..., Any]]:
        def read_file(path: str) -> str:
            self.executed.append(("read_file", {"path": path}))
            return self.files[path]  # KeyError for a missing file: an error result

        async def edit_file(path: str, text: str) -> str:
            self.executed.append(("edit_file", {"path": path, "text": text}))
            self.files[path] = text
            return f"wrote {len(text)} chars to {path}"

        def run_tests() -> dict[str, Any]:
            self.executed.append(("run_tests", {}))
            if self.fail_tests:
                raise RuntimeError("tests crashed")
            return {"passed": 3, "failed": 0}

        def submit(summary: str) -> str:
            self.executed.append(("submit", {"summary": summary}))
            return "accepted"

        return {"read_file": read_file, "edit_file": edit_file, "run_tests": run_tests, "submit": submit}


def call(name: str, **arguments: Any) -> str:
    """A generic-format reply calling one tool."""
    return json.dumps({"tool_calls": [{"name": name, "arguments": arguments}]})


def calls(*pairs: tuple[str, dict[str, Any]]) -> str:
    return json.dumps({"tool_calls": [{"name": n, "arguments": a} for n, a in pairs]})


def say(text: str) -> str:
    return json.dumps({"response": text})


def scripted_core(
    replies: Sequence[Reply] = (), *, engine: ScriptedEngine | None = None, n_ctx: int = 4096, **sched: Any
) -> tuple[ChatCore, ScriptedEngine]:
    """A ChatCore over one scripted slot, generic tool format, no constraint."""
    eng = engine if engine is not None else ScriptedEngine(list(replies), n_ctx=n_ctx)
    return ChatCore(Scheduler([eng], **sched), get_format("generic")), eng


ASSISTANT = "<|im_start|>assistant\n"


class PromptEngine(ScriptedEngine):
    """Replies as a function of the prompt up to the last assistant header; a prompt that already
    holds part of that reply continues it (so a preempted generation resumes exactly).
    ``delay`` pauses between tokens; with ``hold`` the first generation stops after 3 tokens
    (setting ``blocked``) until ``go`` is set."""

    def __init__(
        self, reply: Callable[[str], str], *, delay: float = 0.0, hold: bool = False, n_ctx: int = 4096
    ) -> None:
        super().__init__(["unused"], n_ctx=n_ctx)
        self.reply = reply
        self.delay = delay
        self.hold = hold
        self.blocked = threading.Event()
        self.go = threading.Event()
        self.lock = threading.Lock()
        self.overlap = False

    def generate(
        self,
        prompt: Sequence[int],
        params: SamplingParams,
        *,
        constraint: Constraint | None = None,
        cancel: threading.Event | None = None,
        logits_processor: LogitsProcessor | None = None,
    ) -> Iterator[GenerationEvent]:
        if not self.lock.acquire(blocking=False):
            self.overlap = True
            raise RuntimeError("two generations on one slot")
        try:
            text = self.detokenize(prompt)
            self.prompts.append(text)
            at = text.rfind(ASSISTANT) + len(ASSISTANT)
            full = self.reply(text[:at]).encode()
            partial = text[at:].encode()
            assert full.startswith(partial), (full, partial)
            produced = 0
            finish = "stop"
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
            hold, self.hold = self.hold, False
            for i, byte in enumerate(full[len(partial) :]):
                if hold and i == 3:
                    self.blocked.set()
                    self.go.wait(10)
                if cancel is not None and cancel.is_set():
                    finish = "cancelled"
                    break
                if produced >= params.max_tokens:
                    finish = "length"
                    break
                if self.delay:
                    threading.Event().wait(self.delay)
                produced += 1
                yield Token(byte, decoder.decode(bytes([byte])))
            yield Done(finish, len(prompt), len(prompt), produced)  # type: ignore[arg-type]
        finally:
            self.lock.release()


def user_text(messages: Sequence[Message]) -> str:
    return next(m.content for m in messages if m.role == "user")
