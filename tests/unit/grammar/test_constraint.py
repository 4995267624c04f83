"""Layer-0 automaton on a synthetic BPE-like vocabulary, driven by a "model" that wants a given text."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

import jsonschema
import numpy as np
import pytest

from tether.grammar.automata import run_bytes
from tether.grammar.constraint import ToolConstraint
from tether.grammar.formats import get_format
from tether.grammar.formats.base import ToolSpec
from tether.grammar.masks import MaskCache, forced_text
from tether.grammar.plan import build_plan
from tether.grammar.regex import RegexCompiler
from tether.grammar.vocab import TokenVocab

MULTI = [
    "<tool_call>",
    "<tool",
    "_call",
    ">",
    "</tool_call>",
    "\n",
    '{"',
    "name",
    '":',
    ' "',
    '",',
    '"}',
    "}}",
    "}",
    "read",
    "_file",
    "Read",
    "read_file",
    "file",
    ' {"',
    "path",
    "arguments",
    "run",
    "_command",
    "command",
    '{"name": "',
    "<function=",
    "</function>",
    "[",
    "(",
    ")",
    "]",
    "tool_calls",
    "response",
    '": ',
    ", ",
    "a.txt",
    '"',
    "hello",
    " world",
    "Sure",
    "!",
    '\\"',
    "hi",
    "ls",
    "-la",
    "=",
    "re",
    "ad",
]
EOS = 0
FALLBACK = {b'"': 0.4, b"}": 0.3, b"]": 0.2, b"1": 0.1}


def make_vocab(drop: Sequence[bytes] = ()) -> TokenVocab:
    pieces = [b"<eos>"] + [bytes((b,)) for b in range(256) if bytes((b,)) not in drop]
    pieces += [m.encode() for m in MULTI if m.encode() not in pieces]
    return TokenVocab.from_pieces(pieces, eos_ids=[EOS], excluded=[])


TOOLS = [
    ToolSpec(
        "read_file",
        "Read a file",
        {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    ),
    ToolSpec(
        "run_command",
        "Run",
        {
            "type": "object",
            "properties": {"command": {"type": "string"}, "n": {"type": "integer"}},
            "required": ["command"],
        },
    ),
]


def drive(
    vocab: TokenVocab, constraint: ToolConstraint | None, want: str, *, prompt_len: int = 3, steps: int = 300
) -> tuple[str, list[bytes]]:
    """Greedy 'model' that prefers the longest token continuing ``want``; falls back to EOS, then lowest id."""
    target = want.encode()
    ids = [1] * prompt_len
    out = b""
    used: list[bytes] = []
    for _ in range(steps):
        rest = target[len(out) :] if target.startswith(out) else b""
        logits = np.full(vocab.size, -5.0, dtype=np.single)
        for tid, piece in enumerate(vocab.pieces):
            if tid != EOS and rest.startswith(piece):
                logits[tid] = float(len(piece))
        logits[EOS] = 0.5 if not rest else -1.0
        if not rest:  # off script: prefer closing whatever is open
            for piece, score in FALLBACK.items():
                for tid in vocab.ids_for(piece):
                    logits[tid] = max(logits[tid], score)
        if constraint is not None:
            logits = constraint(np.asarray(ids, dtype=np.intc), logits)
        tid = int(np.argmax(logits))
        if not np.isfinite(logits[tid]):
            raise AssertionError("no token allowed at all")
        if tid == EOS:
            break
        ids.append(tid)
        out += vocab.pieces[tid]
        used.append(vocab.pieces[tid])
    return out.decode("utf-8", "replace"), used


def constraint_for(
    fmt_name: str,
    mode: str = "names",
    tools: Sequence[ToolSpec] = TOOLS,
    *,
    vocab: TokenVocab | None = None,
    required: bool = False,
    parallel: bool = True,
) -> tuple[TokenVocab, ToolConstraint]:
    vocab = vocab or make_vocab()
    plan = build_plan(
        get_format(fmt_name), tools, mode, RegexCompiler(vocab), required=required, parallel=parallel
    )  # type: ignore[arg-type]
    return vocab, ToolConstraint(plan, vocab, MaskCache(plan.automaton, vocab), prompt_len=3)


def test_prose_is_untouched() -> None:
    vocab, c = constraint_for("hermes")
    text = "Sure! hello world"
    assert drive(vocab, c, text)[0] == drive(vocab, None, text)[0] == text
    assert c.stats.masked_steps == 0


def test_marker_split_across_tokens_then_valid_call_passes() -> None:
    vocab, c = constraint_for("hermes")
    want = 'Sure!<tool_call>\n{"name": "read_file", "arguments": {"path": "a.txt"}}\n</tool_call>'
    out, _used = drive(vocab, c, want)
    assert out == want
    assert c.stats.armed == 1


def test_wrong_name_is_unsampleable() -> None:
    vocab, c = constraint_for("hermes")
    out, _ = drive(vocab, c, '<tool_call>\n{"name": "Read", "arguments": {"path": "a.txt"}}</tool_call>')
    name = out.split('"name": "', 1)[1].split('"', 1)[0]
    assert name in {"read_file", "run_command"}, out


def test_token_crossing_the_closing_quote() -> None:
    vocab, c = constraint_for("hermes")
    out, used = drive(vocab, c, '<tool_call>{"name": "read_file", "arguments": {}}</tool_call>')
    assert b'",' in used
    assert '"name": "read_file",' in out


def test_name_key_inside_arguments_is_free_in_names_mode() -> None:
    vocab, c = constraint_for("hermes")
    want = '<tool_call>{"name": "read_file", "arguments": {"name": "Read \\"x\\""}}</tool_call>'
    assert drive(vocab, c, want)[0] == want


def test_parallel_calls_rearm() -> None:
    vocab, c = constraint_for("hermes")
    want = (
        '<tool_call>{"name": "read_file", "arguments": {}}</tool_call>\n'
        '<tool_call>{"name": "Read", "arguments": {}}</tool_call>'
    )
    out, _ = drive(vocab, c, want)
    assert c.stats.armed == 2
    assert out.count('"name": "read_file"') + out.count('"name": "run_command"') == 2


def test_prefix_sharing_names() -> None:
    tools = [ToolSpec("read"), ToolSpec("read_file")]
    for name in ("read", "read_file"):
        vocab, c = constraint_for("hermes", tools=tools)
        out, _ = drive(vocab, c, f'<tool_call>{{"name": "{name}", "arguments": {{}}}}</tool_call>')
        assert f'"name": "{name}"' in out


def test_generic_format_from_first_token_and_text_branch() -> None:
    vocab, c = constraint_for("generic")
    want = '{"response": "say \\"hi\\" ok"}'
    assert drive(vocab, c, want)[0] == want
    vocab, c = constraint_for("generic")
    out, _ = drive(vocab, c, "Sure! hello world")
    assert out.startswith('{"')  # prose is not a valid generic reply: the structure is forced


def test_generic_text_answer_is_never_empty() -> None:
    for empty in ('{"response": ""}', '{"response": "  "}'):
        vocab, c = constraint_for("generic")
        out, _ = drive(vocab, c, empty)
        assert json.loads(out)["response"].strip(), out


def test_generic_required_has_no_text_branch() -> None:
    vocab, c = constraint_for("generic", required=True)
    out, _ = drive(vocab, c, '{"response": "hi"}')
    assert out.startswith('{"tool_calls": [{"name": "')


def test_generic_strict_arguments_validate() -> None:
    vocab, c = constraint_for("generic", "strict")
    out, _ = drive(
        vocab, c, '{"tool_calls": [{"name": "run_command", "arguments": {"command": 5, "n": "x"}}]}'
    )
    data = json.loads(out)
    call = data["tool_calls"][0]
    schema = next(t.parameters for t in TOOLS if t.name == call["name"])
    jsonschema.validate(call["arguments"], schema)


def test_generic_single_call_when_not_parallel() -> None:
    vocab, c = constraint_for("generic", parallel=False)
    out, _ = drive(
        vocab,
        c,
        '{"tool_calls": [{"name": "read_file", "arguments": {}}, {"name": "read_file", "arguments": {}}]}',
    )
    assert out.count('"name"') == 1
    json.loads(out)


def test_inline_name_slot() -> None:
    vocab, c = constraint_for("llama_function")
    out, _ = drive(vocab, c, '<function=Read>{"path": "a.txt"}</function>')
    assert out.startswith("<function=read_file>") or out.startswith("<function=run_command>"), out


def test_inline_strict_json_arguments() -> None:
    vocab, c = constraint_for("llama_function", "strict")
    out, _ = drive(vocab, c, '<function=read_file>{"path": 3}</function>')
    body = out[len("<function=read_file>") :]
    jsonschema.validate(json.loads(body[: body.index("}") + 1]), TOOLS[0].parameters)


def test_markerless_format_arms_only_at_message_start() -> None:
    vocab, c = constraint_for("pythonic")
    out, _ = drive(vocab, c, '[Read(path="a.txt")]')
    assert out.startswith("[read_file(") or out.startswith("[run_command("), out
    vocab, c = constraint_for("pythonic")
    prose = "Sure! [Read(x)]"
    assert drive(vocab, c, prose)[0] == prose


def test_required_arms_from_first_token_for_marker_formats() -> None:
    vocab, c = constraint_for("hermes", required=True)
    out, _ = drive(vocab, c, "Sure! hello")
    assert re.match(r'<tool_call>\s*\{"name": "(read_file|run_command)"', out), out


def test_dead_end_ends_generation_instead_of_failing_open() -> None:
    # With no token that starts with a quote, a name can never be closed.
    vocab = TokenVocab.from_pieces([p for p in make_vocab().pieces if not p.startswith(b'"')], eos_ids=[EOS])
    tools = [ToolSpec("ls")]
    plan = build_plan(get_format("hermes"), tools, "names", RegexCompiler(vocab))
    c = ToolConstraint(plan, vocab, MaskCache(plan.automaton, vocab), prompt_len=3)
    out, _ = drive(vocab, c, '<tool_call>{"name": "ls"}</tool_call>')
    assert c.stats.dead_ends >= 1
    assert "ls" in out and out.endswith("ls")


@pytest.mark.parametrize(
    "fmt", ["hermes", "phi4", "llama3_json", "mistral_v3", "llama_function", "glm45", "generic"]
)
def test_every_json_or_inline_format_builds(fmt: str) -> None:
    _vocab, c = constraint_for(fmt)
    assert c.plan.automaton is not None


def test_forced_text_is_the_shared_prefix_of_every_branch() -> None:
    vocab = make_vocab()
    plan = build_plan(get_format("generic"), TOOLS, "names", RegexCompiler(vocab))
    a = plan.automaton
    assert forced_text(a, a.start()) == b'{"'
    after = run_bytes(a, a.start(), b'{"')
    assert forced_text(a, after) == b""  # the tool_calls / response branch
    lone = build_plan(get_format("generic"), TOOLS[:1], "names", RegexCompiler(vocab), required=True)
    state = run_bytes(lone.automaton, lone.automaton.start(), b'{"tool_calls": [{"name": "')
    assert forced_text(lone.automaton, state) == b'read_file", "arguments": {'


@pytest.mark.parametrize("canonical", [True, False])
def test_forced_text_keeps_the_longest_token(canonical: bool) -> None:
    vocab = make_vocab()
    plan = build_plan(get_format("generic"), TOOLS, "names", RegexCompiler(vocab))
    allowed = {
        vocab.pieces[t]
        for t in MaskCache(plan.automaton, vocab, canonical=canonical).allowed(plan.automaton.start())
    }
    assert b'{"' in allowed
    assert (b"{" in allowed) is not canonical


def test_a_model_preferring_short_tokens_is_walked_through_the_long_one() -> None:
    """The 'model' ranks ``{`` over ``{"``; canonical masks leave it only ``{"`` at the start."""
    vocab, c = constraint_for("generic")
    ids = np.asarray([1, 1, 1], dtype=np.intc)
    logits = np.full(vocab.size, -5.0, dtype=np.single)
    short, long = vocab.ids_for(b"{")[0], vocab.ids_for(b'{"')[0]
    logits[short], logits[long] = 3.0, 2.0
    out = c(ids, logits.copy())
    assert int(np.argmax(out)) == long
    assert not np.isfinite(out[short])
