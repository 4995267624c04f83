"""Context compaction: shrink a conversation until its prompt fits a token budget.

One compaction for the proxy (a stage of the turn pipeline), the workflow runner and the
evals; only the token counter differs (the engine's tokenizer, or a character count).

Tiers, applied in order and stopping as soon as the prompt fits:

1. ``truncate``: old tool results keep their first ``tool_result_chars`` characters
   plus ``[truncated N chars]`` (oldest first; ``tool_call_id`` and ``name`` kept);
2. ``drop``: old nudges (user turns the guardrails or the runner added) are removed
   and ``<think>`` reasoning is stripped from old assistant turns;
3. ``elide``: the oldest turns are replaced, one unit at a time, by one marker message.

The system prompt(s) at the start, the first user message and the last ``keep_last``
units are never touched. A unit is a single message, or an assistant turn with
``tool_calls`` together with its tool results: units are kept or elided whole, so an
assistant tool call is never separated from its result. Deterministic; token counts
come from the caller's ``count_tokens`` (the engine's tokenizer).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import structlog

from tether.chat import NUDGE_PREFIXES, Message, elision_marker
from tether.grammar.formats.base import ToolSpec
from tether.turns.core import ChatCore
from tether.turns.events import ChatJob, offered_tools

__all__ = [
    "NUDGE_PREFIXES",
    "CompactionPolicy",
    "CompactionResult",
    "TokenCounter",
    "compact",
    "compact_job",
    "core_token_counter",
]

log = structlog.get_logger(__name__)

TokenCounter = Callable[[Sequence[Message]], int]

_THINK = re.compile(r"<(think|thinking|reasoning)>.*?</\1>\s*", re.DOTALL)
_TRUNCATED = re.compile(r"\n\[truncated \d+ chars\]\Z")


@dataclass(frozen=True)
class CompactionPolicy:
    """``keep_last``: recent units left intact; ``tool_result_chars``: what a truncated result keeps."""

    keep_last: int = 4
    tool_result_chars: int = 300
    nudge_prefixes: tuple[str, ...] = NUDGE_PREFIXES


@dataclass(frozen=True)
class CompactionResult:
    """The compacted messages and what was done to them."""

    messages: tuple[Message, ...]
    tokens_before: int
    tokens: int
    budget: int
    tiers: tuple[str, ...] = ()
    truncated: int = 0
    dropped: int = 0
    elided: int = 0

    @property
    def fits(self) -> bool:
        return self.tokens <= self.budget

    @property
    def changed(self) -> bool:
        return bool(self.tiers)


def _units(messages: Sequence[Message]) -> list[list[int]]:
    """Indices grouped so that an assistant turn with tool calls travels with its results."""
    units: list[list[int]] = []
    i = 0
    while i < len(messages):
        msg = messages[i]
        unit = [i]
        if msg.role == "assistant" and msg.tool_calls:
            ids = {c.id for c in msg.tool_calls}
            j = i + 1
            while j < len(messages) and messages[j].role == "tool" and messages[j].tool_call_id in ids:
                unit.append(j)
                j += 1
            i = j
        else:
            i += 1
        units.append(unit)
    return units


def _protected(messages: Sequence[Message], units: list[list[int]], keep_last: int) -> set[int]:
    """Unit numbers never changed: leading system turns, the first user turn, the tail."""
    keep: set[int] = set()
    for u, unit in enumerate(units):
        if messages[unit[0]].role != "system":
            break
        keep.add(u)
    first_user = next((u for u, unit in enumerate(units) if messages[unit[0]].role == "user"), None)
    if first_user is not None:
        keep.add(first_user)
    keep.update(range(max(len(units) - keep_last, 0), len(units)))
    return keep


def _assemble(
    messages: Sequence[Message], units: list[list[int]], elided: set[int], note: str
) -> tuple[Message, ...]:
    out: list[Message] = []
    run: list[Message] = []
    for u, unit in enumerate(units):
        if u in elided:
            run.extend(messages[i] for i in unit)
            continue
        if run:
            out.append(elision_marker(run, note))
            run = []
        out.extend(messages[i] for i in unit)
    if run:
        out.append(elision_marker(run, note))
    return tuple(out)


def _truncated(m: Message, keep: int) -> Message | None:
    extra = len(m.content) - keep
    if m.role != "tool" or extra <= 0 or _TRUNCATED.search(m.content):
        return None
    return replace(m, content=f"{m.content[:keep]}\n[truncated {extra} chars]")


class _Compactor:
    """One compaction: the current messages, what was done, and the smallest form seen."""

    def __init__(self, messages: Sequence[Message], budget: int, count: TokenCounter) -> None:
        self.msgs = list(messages)
        self.budget = budget
        self.count = count
        self.before = self.tokens = count(self.msgs)
        self.tiers: list[str] = []
        self.counts = {"truncated": 0, "dropped": 0, "elided": 0}
        self.best = self.snapshot()

    def snapshot(self) -> CompactionResult:
        return CompactionResult(
            tuple(self.msgs), self.before, self.tokens, self.budget, tuple(self.tiers), **self.counts
        )

    def measure(self, tier: str) -> bool:
        """Count the current form; True once it fits."""
        if tier not in self.tiers:
            self.tiers.append(tier)
        self.tokens = self.count(self.msgs)
        if self.tokens < self.best.tokens:
            self.best = self.snapshot()
        return self.tokens <= self.budget

    def truncate(self, indices: Sequence[int], keep: int) -> bool:
        for i in indices:
            short = _truncated(self.msgs[i], keep)
            if short is None:
                continue
            self.msgs[i] = short
            self.counts["truncated"] += 1
            if self.measure("truncate"):
                return True
        return False

    def drop(self, units: list[list[int]], old: list[int], prefixes: tuple[str, ...]) -> list[int]:
        """Remove old nudges, strip old reasoning; returns ``old`` renumbered (``units`` rebuilt in place)."""
        dropped: set[int] = set()
        for u in old:
            m = self.msgs[units[u][0]]
            if len(units[u]) == 1 and m.role == "user" and m.content.lstrip().startswith(prefixes):
                dropped.add(u)
            elif m.role == "assistant" and _THINK.search(m.content):
                self.msgs[units[u][0]] = replace(m, content=_THINK.sub("", m.content))
                self.counts["dropped"] += 1
        msgs: list[Message] = []
        remap: dict[int, int] = {}
        rebuilt: list[list[int]] = []
        for u, unit in enumerate(units):
            if u in dropped:
                continue
            remap[u] = len(rebuilt)
            rebuilt.append(list(range(len(msgs), len(msgs) + len(unit))))
            msgs.extend(self.msgs[i] for i in unit)
        self.counts["dropped"] += len(dropped)
        self.msgs = msgs
        units[:] = rebuilt
        return [remap[u] for u in old if u in remap]


def compact(
    messages: Sequence[Message],
    budget: int,
    count_tokens: TokenCounter,
    *,
    policy: CompactionPolicy | None = None,
    note: str = "",
) -> CompactionResult:
    """Compact ``messages`` until ``count_tokens`` says they fit ``budget``.

    ``note`` (e.g. the workflow's progress) is added to elision markers. As a last resort
    (tier 4, ``truncate`` again) tool results in the protected tail are truncated too, all
    but the newest unit's. When nothing fits, the smallest form seen is returned
    (``fits`` False). The sequence of forms tried does not depend on ``budget``.
    """
    pol = policy or CompactionPolicy()
    c = _Compactor(messages, budget, count_tokens)
    done = c.tokens <= budget
    if not done:
        units = _units(c.msgs)
        keep = _protected(c.msgs, units, pol.keep_last)
        old = [u for u in range(len(units)) if u not in keep]
        # Tier 1: truncate old tool results, oldest first.
        done = c.truncate([i for u in old for i in units[u]], pol.tool_result_chars)
        # Tier 2: drop old nudges and old reasoning (the whole tier at once).
        if not done:
            before = (len(c.msgs), c.counts["dropped"])
            old = c.drop(units, old, pol.nudge_prefixes)
            done = (len(c.msgs), c.counts["dropped"]) != before and c.measure("drop")
        # Tier 3: elide the oldest units into marker messages, one more unit per round.
        base = list(c.msgs)
        for k in range(1, len(old) + 1) if not done else ():
            c.msgs = list(_assemble(base, units, set(old[:k]), note))
            c.counts["elided"] = sum(len(units[u]) for u in old[:k])
            if c.measure("elide"):
                done = True
                break
        # Tier 4: truncate the tail's tool results too, except the newest unit's.
        if not done:
            last = _units(c.msgs)[-1][0] if c.msgs else 0
            done = c.truncate(range(last), pol.tool_result_chars)
    result = c.snapshot() if done or c.tokens < c.best.tokens else c.best
    if result.tiers:
        log.info(
            "context_compacted",
            tokens_before=result.tokens_before,
            tokens=result.tokens,
            budget=budget,
            fits=result.fits,
            tiers=list(result.tiers),
            truncated=result.truncated,
            dropped=result.dropped,
            elided=result.elided,
        )
    return result


def core_token_counter(core: ChatCore, tools: Sequence[ToolSpec] = ()) -> TokenCounter:
    """``count_tokens`` by the core: the real prompt by the engine's tokenizer (a chat backend's core
    estimates it: :mod:`tether.turns.chat_core`)."""
    offered = tuple(tools)
    return lambda messages: core.prompt_length(tuple(messages), offered)


def compact_job(
    core: ChatCore,
    job: ChatJob,
    *,
    budget: int | None = None,
    reserve_tokens: int | None = None,
    policy: CompactionPolicy | None = None,
) -> tuple[ChatJob, CompactionResult]:
    """``job`` with its messages compacted to fit ``budget`` prompt tokens (default ``n_ctx - reserve``;
    ``reserve`` defaults to the requested ``max_tokens``, else the server default, capped at a quarter of
    the context). Unchanged when it already fits."""
    n_ctx = core.info.n_ctx
    if budget is None:
        wanted = reserve_tokens if reserve_tokens is not None else job.max_tokens_requested
        budget = n_ctx - min(wanted or core.default_max_tokens or n_ctx, n_ctx // 4)
    result = compact(job.messages, budget, core_token_counter(core, offered_tools(job)), policy=policy)
    if not result.changed:
        return job, result
    return replace(job, messages=result.messages), result
