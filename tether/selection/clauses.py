"""The parts of a request, each of which can ask for a tool, in the order the request says them.

"Read README.md for background, then read logs/server.log, find the single ERROR line and file a
ticket" asks for three calls in one sentence. A sentence-embedding model reads the whole request as
one topic, and a short command with a long payload ("Save a note for me: buy oat milk") as the
payload's topic; each part alone says which tool it wants. Parts are split at sentence and clause
punctuation and at ``then`` / ``and``; a piece with fewer than two words ("London" of "Paris and
London") is no part. A request of one part has no parts beyond itself.

:func:`request_steps` orders the offered tools the parts ask for, first to last: the next step after
a tool result (:mod:`tether.selection.next_step`) is the first part whose tool has not answered, and a
fresh ask with several steps prefers the first one's tool. A request that has each item go through
its steps in turn ("For each of a.txt, b.txt and c.txt: read it, then record its total") interleaves
them: read, record, read, record, read, record.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tether.grammar.file_names import folder_mentions
from tether.grammar.formats.base import ToolSpec
from tether.schema_kinds import name_words, names_a_file
from tether.selection.relevance import ToolRelevance, rank_tools

if TYPE_CHECKING:
    from tether.selection.decision import DecisionModel
    from tether.selection.semantic import SemanticRelevance

__all__ = [
    "clauses",
    "command_mentions",
    "command_runner",
    "declines_action",
    "file_mentions",
    "leading_run",
    "names_a_file_for",
    "request_steps",
    "takes_command",
]

_SPLIT = re.compile(r"(?<=[.!?;:,])\s+|\n+|\s+(?:and\s+then|then|and)\s+", re.IGNORECASE)
_LEAD = re.compile(r"^(?:and\s+then|then|and)\s+", re.IGNORECASE)  # ", then read …" begins at "read"
_WORD = re.compile(r"[A-Za-z]{2,}")
# What a part says as a value: a token with a digit, a dot or a slash in it, or a quoted text.
_VALUE = re.compile(r"\"[^\"]+\"|'[^']+'|[\w/.-]*\d[\w/.-]*\w|\d|\w[\w-]*[./][\w/.-]*\w")
# "For each of …: read it, then …", "After reading each one, append …": every item goes through the
# steps in turn, not every item through the first step first.
_EACH = re.compile(r"\beach\b", re.IGNORECASE)
_ORDER = re.compile(r"\b(?:then|after|before|next)\b", re.IGNORECASE)


# "don't do it", "do not actually run that": the user asks about an action and forbids it.
_DECLINED = re.compile(
    r"\b(?:don'?t|do not|never)\s+(?:actually\s+|really\s+)?(?:do|run|call|execute|perform|make|use)"
    r"\s+(?:it|that|this|them|anything)\b",
    re.IGNORECASE,
)


# A file the request names: a stem of two characters or more and an extension that starts with a
# letter (``VERSION.txt``, ``src/app.py``; not "e.g.", "3.14" or "v1.2"), not inside an address.
_FILE_MENTION = re.compile(r"(?<![\w@/.-])(?:[\w.-]+/)*[\w-]{2,}\.[A-Za-z][A-Za-z0-9]{0,7}(?![\w@/(-])")


# A command the request gives: "Run the command ls -la", "run `npm test`".
_COMMAND_MENTION = re.compile(
    r"`([^`\n]+)`|\bthe\s+(?:shell\s+)?command:?\s+(?!(?:line|prompt|palette)\b)(\S[^\n]*?)(?=\s+and\s|[.?!]?$|[.?!]\s)"
)
_COMMAND_WORDS = frozenset({"command", "cmd"})


def file_mentions(text: str) -> list[str]:
    """The file names ``text`` writes, in order, once each."""
    return list(dict.fromkeys(_FILE_MENTION.findall(text)))


def command_mentions(text: str) -> list[str]:
    """The shell commands ``text`` gives to run: in backticks, or after "the command"."""
    return list(
        dict.fromkeys(c.strip() for pair in _COMMAND_MENTION.findall(text) for c in pair if c.strip())
    )


def takes_command(key: str) -> bool:
    """Whether a parameter named ``key`` takes a shell command (``command``, ``cmd``)."""
    return bool(_COMMAND_WORDS & name_words(key))


def command_runner(request: str, tools: Sequence[ToolSpec]) -> str | None:
    """The one offered tool that takes a command, where the request gives one to run; else None."""
    if not command_mentions(request):
        return None
    runners = [t.name for t in tools if any(takes_command(k) for k in t.parameters.get("properties") or ())]
    return runners[0] if len(runners) == 1 else None


def names_a_file_for(request: str, tools: Sequence[ToolSpec]) -> bool:
    """Does the request name a file or a folder while an offered tool takes one (a ``path``,
    ``filePath``), or give a command to run while one takes a ``command``? Agents' tools come with
    long descriptions that match a short request poorly in meaning, and a file name or a command line
    says little to the embedding model: such a request is the model's to decide."""
    keys = [key for tool in tools for key in tool.parameters.get("properties") or ()]
    if (file_mentions(request) or folder_mentions(request)) and any(names_a_file(k) for k in keys):
        return True
    return bool(command_mentions(request)) and any(takes_command(k) for k in keys)


def declines_action(request: str) -> bool:
    """Does the request forbid the action it talks about ("What does deleting my account do? Just
    explain, don't do it.")? Such a request is answered, however well a tool fits its words."""
    return bool(_DECLINED.search(request.replace("’", "'")))


def clauses(request: str) -> list[str]:
    """The request's parts in order (see the module doc); empty when it has only one."""
    parts = [_LEAD.sub("", p.strip()) for p in _SPLIT.split(request) if p and p.strip()]
    parts = [p for p in parts if len(_WORD.findall(p)) >= 2]
    return parts if len(parts) > 1 else []


def part_relevance(
    request: str, tools: Sequence[ToolSpec], semantic: SemanticRelevance | None
) -> list[tuple[str, list[ToolRelevance]]]:
    """Each part, with its relevance to every offered tool (lexical, and in meaning with ``semantic``)."""
    parts = clauses(request)
    if not parts:
        return []
    sims = semantic.part_scores(parts, tools) if semantic is not None else None
    return [
        (part, rank_tools(part, tools, None if sims is None else sims[i])) for i, part in enumerate(parts)
    ]


def request_steps(
    request: str, tools: Sequence[ToolSpec], model: DecisionModel, semantic: SemanticRelevance | None
) -> list[str]:
    """The tools the request's parts ask for, in the request's order: per part, the best-fitting tool
    when the part uses its words and its fit is above ``model.part_prior``. A part that asks for the
    tool the part before it asked for is another call only when it says a value of its own ("read
    a.txt, then read b.txt"; not "I drank 3 glasses, please log them")."""
    steps: list[str] = []
    said: set[str] = set()
    for part, ranked in part_relevance(request, tools, semantic):
        best = max(ranked, key=model.evidence)
        # A part is short: it asks for a tool whose words it uses, with a fit below a whole request's.
        if model.prior([best]) <= model.part_prior or not (best.coverage or best.name):
            continue
        values = set(_VALUE.findall(part))
        if not (steps and steps[-1] == best.tool and values <= said):
            steps.append(best.tool)
        said = values
    return _per_item(request, steps)


def _per_item(request: str, steps: list[str]) -> list[str]:
    """``steps`` with the later ones after each of the first step's repeats, where the request has
    each item go through them in turn (``_EACH`` and ``_ORDER``): [read, read, record] becomes
    [read, record, read, record]."""
    n = leading_run(steps)
    if n < 2 or n == len(steps) or not (_EACH.search(request) and _ORDER.search(request)):
        return steps
    return [steps[0], *steps[n:]] * n


def leading_run(steps: Sequence[str]) -> int:
    """How many of ``steps`` ask for the first one's tool before another tool comes."""
    n = 0
    while n < len(steps) and steps[n] == steps[0]:
        n += 1
    return n
