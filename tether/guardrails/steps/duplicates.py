"""Step 7, duplicates: no call twice, in one reply or (``end_loops``) across two turns.

With ``dedupe``, a call identical (name and arguments) to an earlier one of the reply is dropped,
unless it answers a fresh ask that lists what the call's one listed value belongs to ("the
resistivity of copper and aluminum", ``resistivity: "copper"`` twice): then the repeat takes the
list's next item no call of the reply has used (``duplicate_advanced``), as the model meant the
next item and copied the last call; and so on for each item left (the repeat ended the model's
list, which was short of them). Every item of the list must be of the value's kind: a number,
or a string written alike (capitals, letters or none) that is neither the schema's own words, an
offered tool's name, nor as common as "where" ("Buddhism and where" is no list of religions, "on
2025-05-02 and invite Bob" no list of dates). A repeat with no list to walk whose one boolean the
request says both ways ("the process is isothermal … what if it is not isothermal") takes the
other value.

So is a call identical to one of the previous turn whose result came back without failing
(:func:`~.context.answered_last_turn`): the result is already in the conversation, and a small
model otherwise loops on it until its turns run out (a changed world in between, such as a read
after an edit, is another turn). So is one made earlier since the user spoke when nothing new was
called after it (:func:`~.context.cycled`): ``find(a)``, ``find(b)``, ``find(a)`` does not get
``find(b)`` again. A later call whose values earlier calls of the reply hold,
spread over two or more of them, is dropped too (``duplicate_mixed``): after "the first run with
depth 10 and 100 trees, the second with 20 and 200", ``(dataset1, 20, 200)`` is the model
shuffling what it already wrote, with nothing the request adds. Not when two of its values are
items of two lists the request makes ("Lakers and Bulls in 2018 and 2020": each pairing is meant).

With ``merge_variants``, a call that only reorders an earlier one's values or differs in optional
values nobody said is merged into it (:func:`tether.guardrails.values.merge_variant`): the earlier
entry is rewritten in place, and its earlier form stays seen, so a repeat of that is dropped too.
So is a call that differs from an earlier one in one value only, which nobody said while the
earlier one's is said ("a rental", ``intent: "rent"`` then ``"buy"``), or which another of its own
parameters holds (``start_location`` one of its ``stops``): a guess beside the call the request
asked for.
"""

from __future__ import annotations

import json
import re

from tether.calls import ToolCall
from tether.grammar.formats.base import ToolSpec
from tether.grammar.spans import is_written_number, written_numbers
from tether.guardrails.interventions import Intervention
from tether.guardrails.steps.context import GuardContext, call_key, never_asks
from tether.guardrails.values import merge_variant
from tether.schema_kinds import name_words
from tether.selection.decision import request_text
from tether.selection.enumeration import listed_items
from tether.selection.grounded import echoes, is_number, said
from tether.selection.relevance import weight

__all__ = ["advanced", "call_repeated", "dedupe", "duplicates", "guessed", "merge_variants", "mixed"]

_CONTENT = 2.0  # a lowercase one-word item at least this rare is a value ("copper"), not "where"


def call_repeated(call: ToolCall, ctx: GuardContext) -> bool:
    """Whether the previous turn made ``call`` and has its result, or it failed as often as it may
    be retried (noted when so)."""
    key = call_key(call)
    if key in ctx.answered:
        detail = "this call's result is in the conversation, and nothing new was called since"
    elif key in ctx.failing:
        detail = f"this call failed in each of the last {ctx.config.failed_retries + 1} turns"
    else:
        return False
    ctx.notes.append(Intervention("call_repeated", detail, call.name))
    return True


def dedupe(call: ToolCall, ctx: GuardContext) -> bool:
    """Whether an earlier call of the reply is ``call`` exactly (noted when so)."""
    key = call_key(call)
    if key not in ctx.seen:
        return False
    detail = f"call {len(ctx.checked)} repeats call {ctx.seen[key]}"
    ctx.notes.append(Intervention("duplicate_dropped", detail, call.name))
    return True


def advanced(call: ToolCall, ctx: GuardContext) -> ToolCall | None:
    """A repeat of an earlier call of the reply with its one listed value moved on to the list's next
    item that no call of the tool in the reply has used; None when there is no such item."""
    history = ctx.history
    if call_key(call) not in ctx.seen or not history or history[-1].role != "user":
        return None
    found = [
        (key, items, i)
        for items in listed_items(history[-1].content or "")
        for key, value in call.arguments.items()
        for i, item in enumerate(items)
        if _same(value, item)
    ]
    if len(found) != 1:
        return _flipped(call, ctx)
    key, items, _ = found[0]
    value = call.arguments[key]
    tool = ctx.by_name[call.name]
    if not all(_alike(value, item, tool) and not echoes(item, *ctx.names) for item in items):
        return None  # "Buddhism and where", "2 players and strategy": no list of the value's kind
    used = [c.arguments.get(key) for c, _ in ctx.checked if c.name == call.name]
    # an item a value of the call already holds is taken ("York" of "New York" for end_location)
    taken = " | ".join(v.lower() for v in call.arguments.values() if isinstance(v, str))
    unused = [
        item
        for item in items
        if not any(_same(v, item) for v in used) and not re.search(rf"\b{re.escape(item.lower())}\b", taken)
    ]
    if not unused:
        return None
    ctx.lone = False  # the reply makes several calls now
    if len(unused) > 1:
        ctx.again.append(call)  # the repeat once more: it takes the item after this one
    after = json.loads(unused[0]) if is_number(value) else unused[0]
    if isinstance(value, int) and isinstance(after, float) and after.is_integer():
        after = int(after)
    moved = call.with_repairs("duplicate_advanced", arguments={**call.arguments, key: after})
    if call_key(moved) in ctx.seen:
        return None
    detail = (
        f"call {len(ctx.checked)} repeats call {ctx.seen[call_key(call)]}: {key}={after!r}, the list's next"
    )
    ctx.notes.append(
        Intervention("duplicate_advanced", detail, call.name, dict(call.arguments), moved.arguments)
    )
    return moved


_NEGATION = r"(?:(?:not|no|without|isn['’]t|aren['’]t|doesn['’]t|don['’]t)\s+(?:\w+\s+)?|non-?\s*)"
_CONTRAST = re.compile(r"\b(?:what if|versus|vs|compared?|both|instead|again|as well)\b", re.I)


def _flipped(call: ToolCall, ctx: GuardContext) -> ToolCall | None:
    """A repeat with its one boolean the request says both ways ("the process is isothermal … what
    if it is not isothermal") set the other way; None when there is no such flag."""
    request = (ctx.history[-1].content or "").lower()
    if not _CONTRAST.search(request):
        return None  # "not counting weekends" asks once, for one of the two
    flags = [
        key
        for key, value in call.arguments.items()
        if isinstance(value, bool) and any(_both_ways(w, request) for w in name_words(key))
    ]
    if len(flags) != 1:
        return None
    key = flags[0]
    moved = call.with_repairs(
        "duplicate_advanced", arguments={**call.arguments, key: not call.arguments[key]}
    )
    if call_key(moved) in ctx.seen:
        return None
    at = ctx.seen[call_key(call)]
    detail = f"call {len(ctx.checked)} repeats call {at}: {key} the other way, as the request says it"
    ctx.notes.append(
        Intervention("duplicate_advanced", detail, call.name, dict(call.arguments), moved.arguments)
    )
    ctx.lone = False
    return moved


def _both_ways(word: str, text: str) -> bool:
    """Whether ``text`` says ``word`` (a flag's name word) both plainly and negated."""
    negated = len(re.findall(rf"\b{_NEGATION}{re.escape(word)}\b", text))
    return negated > 0 and len(re.findall(rf"\b{re.escape(word)}\b", text)) > negated


def _alike(value: object, item: str, tool: ToolSpec) -> bool:
    """Whether ``item`` is a value of the kind ``value`` is: a number for a number; for a string,
    written alike (``USA`` is no city like ``Miami``, "invite" no date like ``2025-05-02``), not the schema's own words, and (a lowercase word) not as common as "where"."""
    if is_number(value):
        return is_written_number(item)
    if not isinstance(value, str) or _case(value) != _case(item):
        return False
    props = tool.parameters.get("properties") or {}
    if echoes(item, tool.name, *props):
        return False
    return item[:1].isupper() or " " in item.strip() or weight(item.strip()) >= _CONTENT


def _case(text: str) -> str:
    """How ``text`` is written: "none" (no letters: ``2025-05-02``), "upper" (``USA``), "title"
    (``Miami``) or "lower"."""
    if not any(c.isalpha() for c in text):
        return "none"
    return "upper" if len(text) > 1 and text.isupper() else "title" if text[:1].isupper() else "lower"


def _same(value: object, item: str) -> bool:
    """Whether ``value`` is the list item ``item`` (a string, case aside, or a number)."""
    if isinstance(value, str):
        return value.strip().lower() == item.lower()
    if is_number(value) and is_written_number(item):
        return float(value) == float(item)  # type: ignore[arg-type]
    return False


def mixed(call: ToolCall, ctx: GuardContext) -> bool:
    """Whether ``call`` only combines anew values earlier calls of the reply hold (noted when
    so; see the module doc)."""
    history = ctx.history
    earlier = [c.arguments for c, _ in ctx.checked if c.name == call.name]
    if len(earlier) < 2 or not call.arguments or not history or history[-1].role != "user":
        return False
    props = ctx.by_name[call.name].parameters.get("properties") or {}
    held = [{json.dumps(v, sort_keys=True) for v in e.values()} for e in earlier]
    sources: list[set[int]] = []
    for key, value in call.arguments.items():
        holders = {i for i, values in enumerate(held) if json.dumps(value, sort_keys=True) in values}
        if not holders:
            return False  # a value no earlier call has: the request may well say it
        schema = props.get(key)
        choice = isinstance(value, bool) or (isinstance(schema, dict) and "enum" in schema)
        if (is_number(value) or isinstance(value, str)) and not choice:
            sources.append(holders)
    if len(sources) < 2 or set.intersection(*sources):
        return False  # one earlier call holds them all: a repeat or a variant, not a mix
    request = history[-1].content or ""
    for value in call.arguments.values():
        holding = sum(json.dumps(value, sort_keys=True) in values for values in held)
        if _times_written(value, request) > holding:
            return False  # "5 by 10, 3 by 4 and 10 by 3": the request says it again
    tool = ctx.by_name[call.name]
    walked = [  # the parameters whose values walk each list of items alike ("2018 and 2020")
        {k for k, v in call.arguments.items() if any(_same(v, x) for x in items)}
        for items in listed_items(history[-1].content or "")
        if all(
            _alike(v, x, tool)
            for v in call.arguments.values()
            if any(_same(v, y) for y in items)
            for x in items
        )
    ]
    if sum(len(keys) == 1 for keys in walked) >= 2:
        return False  # a pairing of two lists' items, each list one parameter's
    detail = f"call {len(ctx.checked)} only combines values earlier calls of the reply hold"
    ctx.notes.append(Intervention("duplicate_mixed", detail, call.name, dict(call.arguments)))
    return True


def _times_written(value: object, request: str) -> int:
    """How often ``request`` writes ``value`` (a number or a string; 0 for others)."""
    if is_number(value):
        return written_numbers(request).count(float(value))  # type: ignore[arg-type]
    if isinstance(value, str) and value.strip():
        return len(re.findall(rf"(?<![^\W_]){re.escape(value.strip())}(?![^\W_])", request, re.I))
    return 0


def guessed(call: ToolCall, ctx: GuardContext) -> bool:
    """Whether ``call`` differs from an earlier call of its tool in the reply in one value only,
    which nobody said while the earlier one's is said, or which another of its own parameters holds
    (noted when so): a guess beside the call the request asked for."""
    for at, (other, _) in enumerate(ctx.checked):
        if other.name != call.name or set(other.arguments) != set(call.arguments):
            continue
        diff = [k for k, v in call.arguments.items() if other.arguments[k] != v]
        if len(diff) != 1:
            continue
        key = diff[0]
        mine, theirs = call.arguments[key], other.arguments[key]
        if isinstance(mine, bool | dict | list) or isinstance(theirs, bool | dict | list):
            continue
        rest = [v for k, v in call.arguments.items() if k != key]
        # a list the request makes holds the earlier value: the later one may be its next item,
        # written the model's way ("to EUR and to Japanese yen" → "JPY")
        listed = any(_same(theirs, x) for items in listed_items(request_text(ctx.history)) for x in items)
        unsaid = not listed and not said(mine, ctx.spoken) and said(theirs, ctx.spoken)
        held = isinstance(mine, str) and any(mine == v or (isinstance(v, list) and mine in v) for v in rest)
        if unsaid or held:
            detail = f"call {len(ctx.checked)} differs from call {at} only in {key}, a guess"
            ctx.notes.append(Intervention("variant_merged", detail, call.name, dict(call.arguments)))
            return True
    return False


def merge_variants(call: ToolCall, ctx: GuardContext) -> bool:
    """Whether ``call`` merged into an earlier call of the reply (rewritten in ``checked``)."""
    if not ctx.checked:
        return False
    earlier = [c for c, _ in ctx.checked]
    merged = merge_variant(call, earlier, ctx.by_name[call.name], ctx.spoken, request_text(ctx.history))
    if merged is None:
        return False
    at, kept, detail = merged
    ctx.notes.append(
        Intervention("variant_merged", detail, call.name, dict(call.arguments), dict(kept.arguments))
    )
    ctx.seen[call_key(kept)] = at  # the merged call's earlier form stays seen: a repeat of it is dropped
    ctx.checked[at] = (kept, ctx.checked[at][1])
    return True


@never_asks
def duplicates(call: ToolCall, ctx: GuardContext) -> ToolCall | None:
    """Drop a repeated or merged call; a call kept is seen from here on (``dedupe``)."""
    config = ctx.config
    if config.dedupe and (moved := advanced(call, ctx)) is not None:
        call = moved
    if config.dedupe and (call_repeated(call, ctx) or dedupe(call, ctx) or mixed(call, ctx)):
        return None
    if config.merge_variants and (merge_variants(call, ctx) or guessed(call, ctx)):
        return None
    if config.dedupe:
        ctx.seen[call_key(call)] = len(ctx.checked)
    return call
