"""BFCL's multi-turn categories: user turns in order, calls run on BFCL's backends, BFCL's checker.

Each entry is run the way BFCL's function-calling mode runs it
(``BaseHandler.inference_multi_turn_FC``), against any server :class:`ChatClient` talks to:

* the tools are the entry's backend classes' function docs, converted like the single-turn items
  (:mod:`tether.evals.bfcl`); functions BFCL holds out (``multi_turn_miss_func``) join at their
  turn, whose user message is BFCL's "I have updated some more functions…";
* within a turn the model is asked again after each step, with one ``tool`` message per call holding
  what the backend returned, until it replies without a call, a call does not decode, or the turn
  passes BFCL's step limit — then the entry stops there and is scored as force-terminated;
* a call is decoded as BFCL decodes it (``name(key=repr(value), …)``) and executed by BFCL's
  ``execute_multi_turn_func_call`` from the entry's ``initial_config`` (with the long-context
  padding for ``multi_turn_long_context``);
* the calls, by turn and step, are judged by ``multi_turn_checker`` (state and response checks per
  turn), after the eval runner's own check that every turn has a result.

BFCL keeps backend instances in its executor module, keyed by a model name: each run takes a name of
its own and drops its instances once scored, so runs and presets never share a file system or a
trading account.
"""

from __future__ import annotations

import copy
import json
import re
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.errors import ConfigError
from tether.evals.bfcl import MULTI_TURN_CATEGORIES, BfclScore
from tether.evals.bfcl_deps import bfcl_modules, multi_turn_modules
from tether.evals.client import ChatClient, Reply

__all__ = [
    "Backends",
    "MultiTurnItem",
    "MultiTurnResult",
    "decode_calls",
    "load_multi_turn_items",
    "replay_ground_truth",
    "run_multi_turn",
    "score_multi_turn",
]


@dataclass(frozen=True)
class MultiTurnItem:
    """One multi-turn entry: the user's turns, the functions offered, the backends' start, the answer."""

    id: str
    category: str
    turns: tuple[tuple[dict[str, Any], ...], ...]
    functions: tuple[dict[str, Any], ...]
    held_out: Mapping[int, tuple[dict[str, Any], ...]]
    initial_config: Mapping[str, Any]
    involved_classes: tuple[str, ...]
    answer: tuple[tuple[str, ...], ...]

    @property
    def long_context(self) -> bool:
        return "long_context" in self.category

    def entry(self) -> dict[str, Any]:
        """The fields of BFCL's entry its checker reads (a fresh copy: the checker may mutate it)."""
        return {
            "id": self.id,
            "initial_config": copy.deepcopy(dict(self.initial_config)),
            "involved_classes": list(self.involved_classes),
        }


def load_multi_turn_items(category: str) -> list[MultiTurnItem]:
    """All entries of one multi-turn category, in BFCL's order."""
    if category not in MULTI_TURN_CATEGORIES:
        raise ConfigError(f"unknown BFCL multi-turn category {category!r}")
    mods = bfcl_modules()
    multi_turn_modules()  # the backends' own imports fail here, not mid-run
    answers = {e["id"]: e["ground_truth"] for e in mods.load_ground_truth_entry(category)}
    items: list[MultiTurnItem] = []
    for entry in mods.load_dataset_entry(category):
        held = {int(k): tuple(v) for k, v in (entry.get("missed_function") or {}).items()}
        items.append(
            MultiTurnItem(
                id=entry["id"],
                category=category,
                turns=tuple(tuple(turn) for turn in entry["question"]),
                functions=tuple(entry["function"]),
                held_out=held,
                initial_config=entry["initial_config"],
                involved_classes=tuple(entry["involved_classes"]),
                answer=tuple(tuple(calls) for calls in answers[entry["id"]]),
            )
        )
    return items


class Backends:
    """One run's instances of BFCL's backend classes for one entry, removed by :meth:`close`."""

    def __init__(self, item: MultiTurnItem) -> None:
        self.item = item
        self.name = f"tether_{uuid.uuid4().hex}"

    def execute(self, calls: Sequence[str]) -> list[str]:
        """Run ``calls`` in order on the entry's backends; one result string per call."""
        results, _ = multi_turn_modules().execute(
            list(calls),
            copy.deepcopy(dict(self.item.initial_config)),
            list(self.item.involved_classes),
            self.name,
            self.item.id,
            long_context=self.item.long_context,
            is_evaL_run=False,
        )
        return [str(r) for r in results]

    def close(self) -> None:
        state = multi_turn_modules().executor_state
        prefix = re.sub(r"[-./:]", "_", self.name)
        for key in [k for k in state if k.startswith(prefix)]:
            del state[key]


def decode_calls(message: Mapping[str, Any]) -> list[str]:
    """BFCL's decode of one reply: a call string per tool call (``mv(source='a',destination='b')``).

    Empty when the reply has no calls; raises ``ValueError`` when a call's arguments are not a JSON
    object (BFCL ends the turn on either).
    """
    calls = message.get("tool_calls") or []
    decoded: list[dict[str, Any]] = []
    for call in calls:
        fn = call.get("function") or {}
        raw = fn.get("arguments") or "{}"
        try:
            args = json.loads(raw) if isinstance(raw, str) else raw
        except json.JSONDecodeError as exc:
            raise ValueError(f"arguments are not JSON: {exc}") from exc
        if not isinstance(args, dict):
            raise ValueError("arguments are not a JSON object")
        decoded.append({str(fn.get("name")): args})
    return list(multi_turn_modules().convert_to_function_call(decoded)) if decoded else []


@dataclass
class MultiTurnResult:
    """The calls made, by turn and step (the last turn cut short when ``force_terminated``), and
    what the run cost."""

    steps: list[list[list[str]]] = field(default_factory=list)
    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    model_calls: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    latency_s: float = 0.0
    interventions: Counter[str] = field(default_factory=Counter)
    force_terminated: bool = False
    error: str = ""

    def add(self, reply: Reply) -> None:
        self.turns += 1
        self.model_calls += reply.model_calls
        self.retries += reply.retries
        self.prompt_tokens += reply.prompt_tokens
        self.completion_tokens += reply.completion_tokens
        self.cached_tokens += reply.cached_tokens
        self.latency_s += reply.latency_s
        self.interventions.update(str(n.get("kind")) for n in reply.interventions)


def _tools(functions: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    mods = bfcl_modules()
    return list(
        mods.convert_to_tool(copy.deepcopy(list(functions)), mods.gorilla_to_openapi, mods.openai_style)
    )


async def run_multi_turn(
    client: ChatClient,
    item: MultiTurnItem,
    preset: str,
    backends: Backends,
    *,
    temperature: float = 0.0,
    seed: int | None = None,
    max_tokens: int | None = None,
) -> MultiTurnResult:
    """Run every turn of ``item`` as BFCL's function-calling inference loop does."""
    mt = multi_turn_modules()
    functions = list(item.functions)
    tools = _tools(functions)
    messages: list[dict[str, Any]] = []
    result = MultiTurnResult()
    for index, turn in enumerate(item.turns):
        asked: list[dict[str, Any]] = [dict(m) for m in turn]
        if index in item.held_out:
            functions += item.held_out[index]
            tools = _tools(functions)
            asked = [{"role": "user", "content": mt.added_functions_prompt}]
        messages += asked
        steps: list[list[str]] = []
        for _ in range(mt.step_limit + 1):
            reply = await client.chat(
                messages, tools, preset, temperature=temperature, seed=seed, max_tokens=max_tokens
            )
            result.add(reply)
            if reply.error:
                result.error = reply.error
                return result
            message = {k: v for k, v in reply.message.items() if k in ("role", "content", "tool_calls")}
            messages.append(message)
            try:
                calls = decode_calls(message)
            except ValueError:
                break
            if not calls:
                break
            steps.append(calls)
            outputs = backends.execute(calls)
            result.tool_calls += len(calls)
            result.tool_errors += sum(o.startswith("Error during execution") for o in outputs)
            for n, (call, output) in enumerate(zip(reply.tool_calls, outputs, strict=True)):
                call_id = str(call.get("id") or f"call_{len(messages)}_{n}")
                messages.append({"role": "tool", "tool_call_id": call_id, "content": output})
        else:
            result.steps.append(steps)  # kept to read; the entry is scored as force-terminated
            result.force_terminated = True
            return result
        result.steps.append(steps)
    return result


def score_multi_turn(
    item: MultiTurnItem, steps: Sequence[Sequence[Sequence[str]]], name: str, *, finished: bool = True
) -> BfclScore:
    """Judge the calls of every turn as BFCL's eval runner and ``multi_turn_checker`` do; a run that
    did not finish (a turn past the step limit) fails as BFCL's force-terminated entries do."""
    if not finished or len(steps) != len(item.answer):
        return BfclScore(
            False,
            f"Model was force-terminated during inference phase: {len(steps)} turns of "
            f"{len(item.answer)} have a result.",
            "multi_turn:force_terminated",
        )
    decoded = [[list(calls) for calls in turn if calls] for turn in steps]
    answer = [list(calls) for calls in item.answer]
    outcome = multi_turn_modules().checker(decoded, answer, item.entry(), item.category, name)
    if outcome.get("valid"):
        return BfclScore(True, decoded=decoded)
    message = outcome.get("error_message") or outcome.get("error") or ""
    text = message if isinstance(message, str) else json.dumps(message, default=str)
    return BfclScore(False, text[:500], str(outcome.get("error_type", "")), decoded)


def replay_ground_truth(item: MultiTurnItem) -> list[list[list[str]]]:
    """The steps a perfect model takes: each turn's answer as one step (none where BFCL expects none)."""
    return [[list(calls)] if calls else [] for calls in item.answer]
