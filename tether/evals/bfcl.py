"""The BFCL suite: BFCL's own data, request building and AST checker, one item per request.

Items come from the ``bfcl-eval`` package (:mod:`tether.evals.bfcl_deps`). Each is
sent the way BFCL's function-calling mode sends it to an OpenAI-compatible model
(``OpenAICompletionsHandler``): the first turn's messages, and the functions
converted with BFCL's ``convert_to_tool(functions, GORILLA_TO_OPENAPI,
OPENAI_COMPLETIONS)`` — BFCL types such as ``dict``/``float``/``tuple`` become JSON
schema types, ``.`` in names becomes ``_``, and the language hint is appended to
descriptions. The reply is decoded as that handler decodes it (tool calls, else
the text) and judged as BFCL's ``eval_runner`` judges it: the AST checker for
simple/multiple/parallel categories, "no function call" for irrelevance and "a
function call" for relevance.

The multi-turn categories run on BFCL's executable backends
(:mod:`tether.evals.bfcl_multi`). Categories that need the network or embedding
models (``memory_*``, ``web_search_*``; the old ``exec_*``/``rest``/``sql`` are not
in BFCL v4) are refused.
"""

from __future__ import annotations

import copy
import json
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from tether.errors import ConfigError
from tether.evals.bfcl_deps import CHECKER_MODEL, bfcl_modules

__all__ = [
    "AST_CATEGORIES",
    "CATEGORIES",
    "MULTI_TURN_CATEGORIES",
    "RELEVANCE_CATEGORIES",
    "SINGLE_TURN_CATEGORIES",
    "SPLITS",
    "BfclItem",
    "BfclScore",
    "decode_message",
    "ground_truth_message",
    "load_items",
    "parse_categories",
    "score_message",
    "select",
]

AST_CATEGORIES = (
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
)
RELEVANCE_CATEGORIES = ("irrelevance", "live_irrelevance", "live_relevance")
SINGLE_TURN_CATEGORIES = AST_CATEGORIES + RELEVANCE_CATEGORIES
MULTI_TURN_CATEGORIES = (
    "multi_turn_base",
    "multi_turn_miss_func",
    "multi_turn_miss_param",
    "multi_turn_long_context",
)
CATEGORIES = SINGLE_TURN_CATEGORIES + MULTI_TURN_CATEGORIES
_GROUPS: dict[str, tuple[str, ...]] = {
    "simple": ("simple_python",),
    "python": ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance"),
    "non_live": tuple(c for c in SINGLE_TURN_CATEGORIES if not c.startswith("live_")),
    "live": tuple(c for c in SINGLE_TURN_CATEGORIES if c.startswith("live_")),
    "multi_turn": MULTI_TURN_CATEGORIES,
    "all": CATEGORIES,
}
_REFUSED = {
    "memory": "needs BFCL's memory backends (embedding models)",
    "web_search": "needs the network (live web search)",
    "exec": "needs the network (executable REST/function backends); not in BFCL v4",
    "rest": "needs the network (REST APIs); not in BFCL v4",
    "sql": "not in BFCL v4",
    "chatable": "not in BFCL v4",
    "format_sensitivity": "is not a scoring category",
    "simple_java": "is not included (its answers are Java literals in strings)",
    "simple_javascript": "is not included (its answers are JavaScript literals in strings)",
}


def parse_categories(spec: str) -> tuple[str, ...]:
    """``simple,multiple`` → ``("simple_python", "multiple")``; groups: simple, python, non_live,
    live, multi_turn, all."""
    out: list[str] = []
    for raw in (p.strip() for p in spec.split(",")):
        if not raw:
            continue
        if raw in _GROUPS:
            out.extend(_GROUPS[raw])
        elif raw in CATEGORIES:
            out.append(raw)
        else:
            why = next((w for prefix, w in _REFUSED.items() if raw.startswith(prefix)), None)
            if why:
                raise ConfigError(f"BFCL category {raw!r} {why}; it is not supported offline")
            known = ", ".join((*_GROUPS, *CATEGORIES))
            raise ConfigError(f"unknown BFCL category {raw!r}; known: {known}")
    if not out:
        raise ConfigError("no BFCL category given (e.g. bfcl:simple,multiple)")
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class BfclItem:
    """One BFCL entry: what is sent (``messages``, ``tools``) and what it is checked against."""

    id: str
    category: str
    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...]
    functions: tuple[dict[str, Any], ...]
    answer: tuple[dict[str, Any], ...] | None


@dataclass(frozen=True)
class BfclScore:
    correct: bool
    error: str = ""
    error_type: str = ""
    decoded: Any = None


def load_items(category: str) -> list[BfclItem]:
    """All entries of one single-turn category, in BFCL's order."""
    if category not in SINGLE_TURN_CATEGORIES:
        raise ConfigError(f"unknown BFCL category {category!r}")
    mods = bfcl_modules()
    prompts = mods.load_dataset_entry(category)
    plain = {
        e["id"]: e
        for e in mods.load_dataset_entry(category, include_prereq=False, include_language_specific_hint=False)
    }
    answers: dict[str, Any] = {}
    if category in AST_CATEGORIES:
        answers = {e["id"]: e["ground_truth"] for e in mods.load_ground_truth_entry(category)}
    items: list[BfclItem] = []
    for entry in prompts:
        tools = mods.convert_to_tool(entry["function"], mods.gorilla_to_openapi, mods.openai_style)
        answer = answers.get(entry["id"])
        items.append(
            BfclItem(
                id=entry["id"],
                category=category,
                messages=tuple(entry["question"][0]),
                tools=tuple(tools),
                functions=tuple(plain[entry["id"]]["function"]),
                answer=tuple(answer) if answer is not None else None,
            )
        )
    return items


# The published set: 100 items per category drawn with seed 0. Development (tuning) uses the rest.
TEST_SIZE, TEST_SEED = 100, 0
SPLITS = ("all", "test", "dev")


class _Entry(Protocol):
    @property
    def id(self) -> str: ...


E = TypeVar("E", bound=_Entry)


def _sample(items: Sequence[E], limit: int | None, seed: int) -> list[E]:
    if limit is None or limit >= len(items):
        return list(items)
    picked = sorted(random.Random(seed).sample(range(len(items)), limit))
    return [items[i] for i in picked]


def select(items: Sequence[E], limit: int | None, seed: int, split: str = "all") -> list[E]:
    """A fixed seeded subset of ``limit`` items (BFCL order kept) of ``split``.

    ``test`` is the published set (``TEST_SIZE`` items per category drawn with ``TEST_SEED``),
    ``dev`` every other item (what tuning may look at), ``all`` both.
    """
    if split not in SPLITS:
        raise ConfigError(f"unknown split {split!r}; splits: {', '.join(SPLITS)}")
    if split != "all":
        test = {i.id for i in _sample(items, TEST_SIZE, TEST_SEED)}
        items = [i for i in items if (i.id in test) == (split == "test")]
    return _sample(items, limit, seed)


def decode_message(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """BFCL's function-calling decode: ``[{name: arguments}]`` from ``tool_calls``; text raises.

    Mirrors ``OpenAICompletionsHandler._parse_query_response_FC`` + ``decode_ast``: tool calls
    become ``{name: json.loads(arguments)}``; without tool calls the reply is its text, which
    decodes to ``[]`` when empty and fails to decode otherwise.
    """
    calls = message.get("tool_calls")
    if calls is None:
        content = message.get("content") or ""
        if content:
            raise ValueError("the reply is text, not function calls")
        return []
    decoded: list[dict[str, Any]] = []
    for call in calls:
        fn = call["function"]
        args = fn.get("arguments") or ""
        decoded.append({fn["name"]: json.loads(args) if isinstance(args, str) else args})
    return decoded


def score_message(item: BfclItem, message: Mapping[str, Any]) -> BfclScore:
    """Judge one reply exactly as BFCL's ``eval_runner`` does for the item's category."""
    mods = bfcl_modules()
    try:
        decoded: Any = decode_message(message)
    except (ValueError, KeyError, TypeError) as exc:
        if item.category in RELEVANCE_CATEGORIES:
            ok = item.category != "live_relevance"
            return BfclScore(ok, "" if ok else f"no function call: {exc}", "" if ok else "relevance_error")
        return BfclScore(False, f"Invalid syntax. Failed to decode AST. {exc}", "ast_decoder:decoder_failed")
    if item.category in RELEVANCE_CATEGORIES:
        has_call = not mods.is_empty_output(decoded)
        if item.category == "live_relevance":
            return BfclScore(has_call, "" if has_call else "no function call", "relevance_error", decoded)
        return BfclScore(
            not has_call,
            "function call produced" if has_call else "",
            "irrelevance_error:decoder_success" if has_call else "",
            decoded,
        )
    if not mods.is_function_calling_format_output(decoded):
        return BfclScore(
            False, "Did not output in the specified format.", "ast_decoder:wrong_format", decoded
        )
    assert item.answer is not None
    result = mods.ast_checker(
        copy.deepcopy(list(item.functions)),
        decoded,
        copy.deepcopy(list(item.answer)),
        mods.language.PYTHON,
        item.category,
        CHECKER_MODEL,
    )
    if result["valid"]:
        return BfclScore(True, decoded=decoded)
    return BfclScore(False, _short(result.get("error")), str(result.get("error_type", "")), decoded)


def _short(error: Any) -> str:
    text = error if isinstance(error, str) else json.dumps(error, default=str)
    return text[:500]


def _first(options: Any, required: bool = False) -> tuple[bool, Any]:
    """(present, value): an optional parameter is omitted when ``""`` ("may be omitted") is allowed;
    otherwise the first possibility that is not ``""``."""
    if not required and "" in options:
        return False, None
    for value in options:
        if value != "":
            return True, _resolve(value)
    return False, None


def _resolve(value: Any) -> Any:
    """Ground-truth dict values are lists of possibilities too (``dict_checker``); pick the first."""
    if isinstance(value, dict):
        out = {}
        for key, options in value.items():
            present, picked = _first(options) if isinstance(options, list) else (True, options)
            if present:
                out[key] = picked
        return out
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return [_resolve(v) for v in value]
    return value


def ground_truth_message(item: BfclItem) -> dict[str, Any]:
    """The assistant message a perfect model would send: BFCL's first possible answer per parameter."""
    if item.category == "live_relevance":  # any function call is right; BFCL ships no answer
        first = item.tools[0]["function"]["name"]
        any_call = {"id": "call_0", "type": "function", "function": {"name": first, "arguments": "{}"}}
        return {"role": "assistant", "content": None, "tool_calls": [any_call]}
    if item.answer is None:
        return {"role": "assistant", "content": "I cannot help with that using the available functions."}
    required = {f["name"]: set(f["parameters"].get("required", ())) for f in item.functions}
    calls: list[dict[str, Any]] = []
    for i, expected in enumerate(item.answer):
        ((name, params),) = expected.items()
        args: dict[str, Any] = {}
        for key, options in params.items():
            present, picked = _first(options, key in required.get(name, ()))
            if present:
                args[key] = picked
        calls.append(
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": re.sub(r"\.", "_", name), "arguments": json.dumps(args)},
            }
        )
    return {"role": "assistant", "content": None, "tool_calls": calls}
