"""Turn by turn: how close a multi-turn result file comes to BFCL's ground truth.

BFCL scores a multi-turn entry right only when every one of its turns is; this reads the calls each
turn made (``output.steps``) beside the calls BFCL's answer makes (``expected["calls per turn"]``)
and counts the turns whose calls are the answer's (the same names and arguments, in any order),
whose names are, and both split by how many calls the answer's turn makes. With a share ``p`` of
turns right, an entry of ``k`` turns comes out right about ``p**k`` of the time: the bound printed
beside the measured accuracy says what a per-turn gain buys at the entry level.

    python -m tether.evals.turns results/eval/bfcl-multi_turn_base.strict.jsonl

Exact agreement is stricter than BFCL's state checker (a read-only call more, or the same file
reached another way, can still pass), so it is a floor, not BFCL's score.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer

__all__ = ["TurnTally", "call_parts", "main", "tally"]

Key = tuple[str, tuple[str, ...], tuple[tuple[str, str], ...]]


def call_parts(text: str) -> Key:
    """``name(a, k=v)`` as (name, positional values, sorted keyword values), values re-printed so
    that ``'x'`` and ``"x"`` agree; text that is not a call is its own name."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        return (text, (), ())
    if not isinstance(node, ast.Call):
        return (text, (), ())
    args = tuple(ast.unparse(a) for a in node.args)
    kwargs = tuple(sorted((k.arg or "**", ast.unparse(k.value)) for k in node.keywords))
    return (ast.unparse(node.func), args, kwargs)


@dataclass
class TurnTally:
    """Turns and entries counted over one result file."""

    entries: int = 0
    entries_right: int = 0  # BFCL's own verdict
    entries_exact: int = 0  # every turn's calls equal the answer's
    entries_single: int = 0  # the answer makes at most one call in every turn
    turns: int = 0
    exact: int = 0
    names: int = 0
    by_size: dict[int, list[int]] = field(default_factory=dict)  # calls in the answer: [turns, exact]
    turn_counts: list[int] = field(default_factory=list)

    @property
    def per_turn(self) -> float:
        return self.exact / self.turns if self.turns else 0.0

    def bound(self, p: float) -> float:
        """Mean over the entries of ``p ** turns``: the entry accuracy a per-turn rate ``p`` gives."""
        if not self.turn_counts:
            return 0.0
        return sum(p**k for k in self.turn_counts) / len(self.turn_counts)

    def rate_for(self, target: float) -> float:
        """The per-turn rate whose :meth:`bound` reaches ``target`` (bisection)."""
        low, high = 0.0, 1.0
        for _ in range(50):
            mid = (low + high) / 2
            low, high = (mid, high) if self.bound(mid) < target else (low, mid)
        return high


def _made(steps: Sequence[Sequence[Sequence[str]]], turn: int) -> list[str]:
    return [call for step in steps[turn] for call in step] if turn < len(steps) else []


def tally(records: Iterable[Mapping[str, Any]]) -> TurnTally:
    """Count the turns of every multi-turn record (others are skipped)."""
    out = TurnTally()
    for record in records:
        expected, output = record.get("expected"), record.get("output")
        if not isinstance(expected, Mapping) or "calls per turn" not in expected:
            continue
        answer: list[list[str]] = expected["calls per turn"]
        steps = output.get("steps", []) if isinstance(output, Mapping) else []
        out.entries += 1
        out.entries_right += bool(record.get("correct"))
        out.turn_counts.append(len(answer))
        out.entries_single += all(len(calls) <= 1 for calls in answer)
        all_exact = True
        for turn, calls in enumerate(answer):
            want = sorted(map(call_parts, calls))
            got = sorted(map(call_parts, _made(steps, turn)))
            same = want == got
            out.turns += 1
            out.exact += same
            out.names += sorted(k[0] for k in want) == sorted(k[0] for k in got)
            size = out.by_size.setdefault(min(len(calls), 3), [0, 0])
            size[0] += 1
            size[1] += same
            all_exact &= same
        out.entries_exact += all_exact
    return out


def report(t: TurnTally) -> str:
    """The tally as the lines the command prints."""

    def pct(n: int, d: int) -> str:
        return f"{n} / {d} ({100 * n / d:.1f} %)" if d else "0 / 0"

    lines = [
        f"entries: {t.entries}, right by BFCL's checker {pct(t.entries_right, t.entries)}, "
        f"every turn exact {pct(t.entries_exact, t.entries)}; turns per entry {t.turns / max(1, t.entries):.2f}",
        f"entries whose answer makes at most one call in every turn: {pct(t.entries_single, t.entries)}",
        f"turns whose calls are the answer's: {pct(t.exact, t.turns)}; the same names: {pct(t.names, t.turns)}",
    ]
    for size in sorted(t.by_size):
        n, right = t.by_size[size]
        label = f"{size} call" + ("s" if size != 1 else "") + (" or more" if size == 3 else "")
        lines.append(f"  answer's turn makes {label}: {pct(right, n)} exact")
    p = t.per_turn
    lines.append(f"entry accuracy a per-turn rate of {p:.3f} gives (mean p**turns): {100 * t.bound(p):.2f} %")
    for target in (0.10, 0.036):
        lines.append(f"per-turn rate an entry accuracy of {target:.1%} needs: {t.rate_for(target):.3f}")
    return "\n".join(lines)


def main(
    path: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="A multi-turn eval JSONL file.")],
) -> None:
    """Print the turn-by-turn agreement of a multi-turn result file with BFCL's answers."""
    with path.open() as f:
        records = [json.loads(line) for line in f if line.strip()]
    t = tally(records)
    if not t.entries:
        raise typer.BadParameter(f"{path} holds no multi-turn record (expected['calls per turn'])")
    typer.echo(report(t))


if __name__ == "__main__":
    typer.run(main)
