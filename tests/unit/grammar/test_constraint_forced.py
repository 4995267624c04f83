"""Jump-forward through layer 0 (``ToolConstraint.forced_next`` and ``armed``) on the synthetic vocabulary.

``forced_next`` may answer only where the step's mask leaves exactly one token, and answering must
stand for that step's call: a constraint that skips forced steps this way sees, at every step it is
still called for, the same row as one called at every step. That is what makes appending a forced
token without a decode step exact.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from tests.unit.grammar.test_constraint import EOS, TOOLS, constraint_for, make_vocab
from tether.grammar.constraint import ToolConstraint
from tether.grammar.formats import get_format
from tether.grammar.masks import MaskCache
from tether.grammar.plan import Mode, build_plan
from tether.grammar.regex import RegexCompiler
from tether.grammar.steering import Steering
from tether.grammar.vocab import TokenVocab

PROMPT = [1, 1, 1]  # constraint_for's prompt_len
READ_CALL = '{"name": "read_file", "arguments": {"path": "a.txt"}}'


def as_ids(tokens: list[int]) -> npt.NDArray[np.intc]:
    return np.asarray(tokens, dtype=np.intc)


def tok(vocab: TokenVocab, piece: str) -> int:
    return int(vocab.ids_for(piece.encode())[0])


def wanting(vocab: TokenVocab, want: bytes, out: bytes) -> npt.NDArray[np.single]:
    """The row of a 'model' writing ``want``: the longest token continuing it, EOS once it is written."""
    rest = want[len(out) :] if want.startswith(out) else b""
    logits = np.full(vocab.size, -5.0, dtype=np.single)
    for tid, piece in enumerate(vocab.pieces):
        if tid != EOS and rest.startswith(piece):
            logits[tid] = float(len(piece))
    logits[EOS] = -1.0 if rest else 0.5
    return logits


def finite(row: npt.NDArray[np.single]) -> set[int]:
    return {int(t) for t in np.flatnonzero(np.isfinite(row))}


def test_idle_prose_forces_nothing_and_is_not_armed() -> None:
    vocab, c = constraint_for("hermes", tools=TOOLS[:1])
    ids = list(PROMPT)
    for piece in ("Sure", "!", " world"):
        assert c.forced_next(as_ids(ids)) is None
        assert not c.armed
        ids.append(tok(vocab, piece))
    assert c.forced_next(as_ids(ids)) is None
    assert c.stats.masked_steps == 0


def test_a_marker_arms_and_a_choice_of_tokens_forces_nothing() -> None:
    vocab, c = constraint_for("hermes", tools=TOOLS[:1])
    ids = [*PROMPT, tok(vocab, "Sure"), tok(vocab, "<tool"), tok(vocab, "_call")]
    assert c.forced_next(as_ids(ids)) is None and not c.armed
    ids.append(tok(vocab, ">"))
    assert c.forced_next(as_ids(ids)) is None  # whitespace or the object may follow the marker
    assert c.armed
    assert len(c.masks.allowed(c.state)) > 1


def test_a_lone_tool_name_is_forced_as_its_one_token() -> None:
    vocab, c = constraint_for("hermes", tools=TOOLS[:1])
    ids = [*PROMPT, tok(vocab, "<tool_call>"), tok(vocab, "\n"), tok(vocab, '{"name": "')]
    assert c.forced_next(as_ids(ids)) == tok(vocab, "read_file")
    _, other = constraint_for("hermes", tools=TOOLS)
    assert other.forced_next(as_ids(ids)) is None  # two names fit: the model chooses


def test_forced_json_structure_from_the_first_token() -> None:
    vocab, c = constraint_for("generic", tools=TOOLS[:1], required=True)
    assert c.armed  # the generic format is constrained from its first token
    ids = list(PROMPT)
    while (token := c.forced_next(as_ids(ids))) is not None:
        ids.append(token)
    text = b"".join(vocab.pieces[t] for t in ids[len(PROMPT) :])
    # The canonical mask keeps only the model's own long tokens: ``{"`` rather than ``{`` + ``"``.
    assert text == b'{"tool_calls": [{"name": "read_file", "arguments": '
    assert ids[len(PROMPT)] == tok(vocab, '{"')


def test_forced_next_stops_where_the_generic_reply_branches() -> None:
    vocab, c = constraint_for("generic", tools=TOOLS)
    first = c.forced_next(as_ids(PROMPT))
    assert first == tok(vocab, '{"')
    assert c.forced_next(as_ids([*PROMPT, first])) is None  # "tool_calls" or "response"


def steered(fmt: str, mode: Mode, *, required: bool, steering: Steering) -> tuple[TokenVocab, ToolConstraint]:
    """A constraint for the lone ``read_file`` tool, with ``steering`` (``constraint_for`` takes none)."""
    vocab = make_vocab()
    plan = build_plan(get_format(fmt), TOOLS[:1], mode, RegexCompiler(vocab), required=required)
    return vocab, ToolConstraint(
        plan, vocab, MaskCache(plan.automaton, vocab), prompt_len=len(PROMPT), steering=steering
    )


CASES: dict[str, tuple[str, Mode, bool, Steering, str]] = {
    "hermes": ("hermes", "names", False, Steering(), f"Sure!<tool_call>\n{READ_CALL}\n</tool_call>"),
    "generic_required": ("generic", "names", True, Steering(), f'{{"tool_calls": [{READ_CALL}]}}'),
    "generic_strict": ("generic", "strict", True, Steering(), f'{{"tool_calls": [{READ_CALL}]}}'),
    "generic_steered": (
        "generic",
        "names",
        False,
        Steering(decide=True, call_prior=1.0, name_prior={"read_file": 1.0}, max_calls=1, end_repeats=True),
        f'{{"tool_calls": [{READ_CALL}]}}',
    ),
    "inline_strict": (
        "llama_function",
        "strict",
        False,
        Steering(),
        '<function=read_file>{"path": "a.txt"}</function>',
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_skipping_forced_steps_leaves_every_later_row_unchanged(case: str) -> None:
    fmt, mode, required, steering, want = CASES[case]
    vocab, jumper = steered(fmt, mode, required=required, steering=steering)
    _, plain = steered(fmt, mode, required=required, steering=steering)
    ids, out, forced_steps, sampled_steps = list(PROMPT), b"", 0, 0
    for _ in range(200):
        arr = as_ids(ids)
        logits = wanting(vocab, want.encode(), out)
        forced = jumper.forced_next(arr)
        row = plain(arr, logits.copy())  # the reference: called at every step
        if forced is not None:
            assert finite(row) == {forced}, (out, vocab.pieces[forced])
            token, forced_steps = forced, forced_steps + 1
        else:
            np.testing.assert_array_equal(jumper(arr, logits.copy()), row, err_msg=repr(out))
            token, sampled_steps = int(np.argmax(row)), sampled_steps + 1
        if token == EOS:
            break
        ids.append(token)
        out += vocab.pieces[token]
    assert out == want.encode()
    assert forced_steps > 0 and sampled_steps > 0
    assert jumper.stats == plain.stats
    assert jumper.decision == plain.decision
    assert jumper.armed == plain.armed


def test_copying_holds_only_inside_an_argument_string() -> None:
    """Drafts are verified only where the grammar leaves the model free text: an argument's value."""
    vocab, c = constraint_for("generic", "strict", required=True)
    text = b'{"tool_calls": [{"name": "read_file", "arguments": {"path": "src'
    ids = [*PROMPT, *(tok(vocab, bytes((b,)).decode()) for b in text)]
    assert not c.copying(as_ids(ids[: len(PROMPT) + 3]))  # structure: the grammar dictates it
    assert c.copying(as_ids(ids))
    done = [*ids, *(tok(vocab, ch) for ch in '"}}]}')]
    assert not c.copying(as_ids(done))


def test_a_closed_call_list_forces_an_end_of_reply_token_among_several() -> None:
    """Models have several end tokens (``<|endoftext|>``, ``<|im_end|>``); once the call list is
    closed they are all the mask leaves, and whichever is taken the reply ends with the same text."""
    base = make_vocab()
    vocab = TokenVocab.from_pieces([*base.pieces, b"<|im_end|>"], eos_ids=[EOS, base.size], excluded=[])
    _, c = constraint_for("generic", "strict", tools=TOOLS[:1], vocab=vocab, required=True, parallel=False)
    text = f'{{"tool_calls": [{READ_CALL}]}}'.encode()
    ids = [*PROMPT, *(tok(vocab, bytes((b,)).decode()) for b in text)]
    _, plain = constraint_for(
        "generic", "strict", tools=TOOLS[:1], vocab=vocab, required=True, parallel=False
    )
    row = plain(as_ids(ids), np.zeros(vocab.size, dtype=np.single))
    assert finite(row) == {EOS, base.size}
    assert c.forced_next(as_ids(ids)) == EOS
    assert c.stats == plain.stats
    _, early = constraint_for(
        "generic", "strict", tools=TOOLS[:1], vocab=vocab, required=True, parallel=False
    )
    assert early.forced_next(as_ids(ids[:-1])) == tok(vocab, "}")  # before the last `}`: that one
