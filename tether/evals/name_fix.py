"""The layer-0 name-fix set: requests where a harness vocabulary (``Read``, ``Bash``) invites wrong names.

The system prompt carries few-shot examples from another harness (Claude-Code style names) while the
offered tools use local names. Unconstrained, the bundled model copies the examples; with layer 0 it
can only write offered names. ``run_name_fix`` reports, per mode, how many calls named a tool that is
not offered, and (strict) how many calls' arguments validate against their schema.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import jsonschema

from tether.chat import Message
from tether.engine.base import Engine, SamplingParams, Token
from tether.engine.prompt import build_prompt
from tether.engine.template import ChatTemplate
from tether.grammar.formats import get_format
from tether.grammar.formats.base import ToolSpec
from tether.grammar.plan import Mode
from tether.grammar.provider import ConstraintProvider
from tether.grammar.spec import ReplySpec

__all__ = ["CASES", "FEW_SHOT", "PREFILL", "TOOLS", "NameFixResult", "run_name_fix"]

TOOLS = (
    ToolSpec(
        "read_file",
        "Read a text file from the workspace.",
        {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    ),
    ToolSpec(
        "run_command",
        "Run a shell command in the workspace.",
        {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    ),
    ToolSpec(
        "list_dir",
        "List the entries of a directory.",
        {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    ),
    ToolSpec(
        "write_file",
        "Write text to a file.",
        {
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    ),
)

FEW_SHOT = (
    "Examples of good replies:\n"
    'User: show me setup.py\nAssistant: {"tool_calls": [{"name": "Read", "arguments": {"file_path": "setup.py"}}]}\n'
    'User: run the tests\nAssistant: {"tool_calls": [{"name": "Bash", "arguments": {"command": "pytest"}}]}\n'
    'User: what is in src?\nAssistant: {"tool_calls": [{"name": "LS", "arguments": {"path": "src"}}]}\n'
    'User: save hi to a.txt\nAssistant: {"tool_calls": [{"name": "Write", "arguments": {"file_path": "a.txt", "content": "hi"}}]}'
)

_FILES = [
    "main.py",
    "README.md",
    "config.yaml",
    "notes.txt",
    "setup.cfg",
    "app/server.py",
    "docs/index.md",
    "data.csv",
    "Makefile",
    "requirements.txt",
]
_COMMANDS = ["ls -la", "git status", "pytest -q", "make build", "python --version"]
_DIRS = ["src", "tests", "docs", "build", "scripts"]


def _cases() -> tuple[str, ...]:
    out: list[str] = []
    out += [f"show me {f}" for f in _FILES]
    out += [f"Open {f} and print it." for f in _FILES]
    out += [f"run {c}" for c in _COMMANDS]
    out += [f"Please execute `{c}` in the shell." for c in _COMMANDS]
    out += [f"what is in {d}?" for d in _DIRS]
    out += [f"List the files in the {d} folder." for d in _DIRS]
    out += [f"save hello to {f}" for f in _FILES]
    return tuple(out)


CASES = _cases()
PREFILL = '{"tool_calls": [{"name": "'


@dataclass
class NameFixResult:
    """Counts for one mode over the case set."""

    mode: str
    cases: int = 0
    calls: int = 0
    not_offered: int = 0
    invalid_args: int = 0
    no_call: int = 0
    wrong_names: list[str] = field(default_factory=list)

    @property
    def not_offered_rate(self) -> float:
        return self.not_offered / self.calls if self.calls else 0.0


def run_name_fix(
    engine: Engine,
    modes: Iterable[Mode | str] = ("off", "names", "strict"),
    *,
    cases: Sequence[str] = CASES,
    max_tokens: int = 48,
    tools: Sequence[ToolSpec] = TOOLS,
    few_shot: str = FEW_SHOT,
) -> dict[str, NameFixResult]:
    """Greedy generation per case and mode; the shared system prompt keeps prefix reuse effective.

    Every mode starts from the same prefill, ``{"tool_calls": [{"name": "``, so the comparison isolates
    the naming decision: unconstrained, the model chooses the name freely after it.
    """
    info = engine.info
    template = ChatTemplate(info.chat_template, bos_token=info.bos_token, eos_token=info.eos_token)
    fmt = get_format("generic")
    provider = ConstraintProvider(engine)
    schemas = {t.name: t.parameters for t in tools}
    results = {m: NameFixResult(str(m)) for m in modes}
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0)
    for case in cases:
        messages = (Message("system", few_shot), Message("user", case))
        ids = engine.tokenize(build_prompt(template, fmt, messages, tools) + PREFILL)
        for mode, res in results.items():
            processor = None
            if mode != "off":
                spec = ReplySpec(fmt, tuple(tools), mode, required=True)  # type: ignore[arg-type]
                processor = provider.constraint(spec, prompt_len=len(ids), primed=PREFILL.encode())
            text = PREFILL + "".join(
                ev.text
                for ev in engine.generate(ids, params, logits_processor=processor)
                if isinstance(ev, Token)
            )
            parsed = fmt.parse(text, tools)
            res.cases += 1
            if not parsed.calls:
                res.no_call += 1
            for call in parsed.calls:
                res.calls += 1
                if call.name not in schemas:
                    res.not_offered += 1
                    res.wrong_names.append(call.name)
                    continue
                try:
                    jsonschema.validate(dict(call.arguments), schemas[call.name])
                except jsonschema.ValidationError:
                    res.invalid_args += 1
    return results


def summary(results: dict[str, NameFixResult]) -> str:
    lines = [
        f"{'mode':<8}{'cases':>6}{'calls':>7}{'not offered':>13}{'rate':>8}{'invalid args':>14}{'no call':>9}"
    ]
    for r in results.values():
        lines.append(
            f"{r.mode:<8}{r.cases:>6}{r.calls:>7}{r.not_offered:>13}{r.not_offered_rate:>8.1%}{r.invalid_args:>14}"
            f"{r.no_call:>9}"
        )
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - manual run: python -m tether.evals.name_fix
    from tether.engine.llama_cpp import LlamaCppEngine
    from tether.engine.locate import bundled_model_path

    res = run_name_fix(LlamaCppEngine(bundled_model_path(), n_ctx=4096))
    print(summary(res))  # noqa: T201
    print(json.dumps({m: sorted(set(r.wrong_names)) for m, r in res.items()}))  # noqa: T201
