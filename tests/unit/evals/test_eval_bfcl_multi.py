"""BFCL multi-turn: its entries, its backends and its checker, driven the way BFCL's inference loop drives them."""

from __future__ import annotations

import ast
import json
from collections.abc import Callable, Sequence

import pytest

pytest.importorskip("bfcl_eval", reason="bfcl-eval is installed by scripts/install_bfcl.sh")
pytest.importorskip("mpmath", reason="the MathAPI backend's dependency, installed by scripts/install_bfcl.sh")

from tether.engine.scripted import ScriptedEngine
from tether.evals import bfcl
from tether.evals.bfcl_deps import multi_turn_modules
from tether.evals.bfcl_multi import (
    Backends,
    MultiTurnItem,
    decode_calls,
    load_multi_turn_items,
    replay_ground_truth,
    run_multi_turn,
    score_multi_turn,
)
from tether.evals.client import ChatClient
from tether.evals.suites import load_items

ClientFactory = Callable[..., tuple[ChatClient, ScriptedEngine]]
WINDOW = 1 << 17  # the scripted engine counts bytes: BFCL's ~30 tool docs fit


@pytest.fixture(scope="module")
def items() -> dict[str, list[MultiTurnItem]]:
    return {c: load_multi_turn_items(c) for c in bfcl.MULTI_TURN_CATEGORIES}


def _score(item: MultiTurnItem, steps: list[list[list[str]]]) -> bfcl.BfclScore:
    backends = Backends(item)
    try:
        return score_multi_turn(item, steps, backends.name)
    finally:
        backends.close()


def _leftover() -> list[str]:
    return [k for k in multi_turn_modules().executor_state if k.startswith("tether_")]


@pytest.mark.parametrize("category", bfcl.MULTI_TURN_CATEGORIES)
def test_replaying_the_ground_truth_scores_100_percent(
    items: dict[str, list[MultiTurnItem]], category: str
) -> None:
    entries = items[category]
    assert len(entries) == 200
    wrong = [i.id for i in entries if not _score(i, replay_ground_truth(i)).correct]
    assert wrong == []
    assert _leftover() == []  # every run's backend instances are gone once scored


def test_wrong_missing_and_unfinished_runs_fail(items: dict[str, list[MultiTurnItem]]) -> None:
    item = items["multi_turn_base"][0]  # cd, mkdir, mv; then grep; sort; diff
    steps = replay_ground_truth(item)
    wrong = [[list(s) for s in turn] for turn in steps]
    wrong[2] = [["sort(file_name='previous_report.pdf')"]]
    assert _score(item, wrong).error_type == "multi_turn:execution_response_mismatch"
    moved = [[list(s) for s in turn] for turn in steps]
    moved[0] = [["cd(folder='document')", "mkdir(dir_name='other')"]]
    assert _score(item, moved).error_type == "multi_turn:instance_state_mismatch"
    silent = [*steps[:-1], []]
    assert _score(item, silent).error_type == "multi_turn:empty_turn_model_response"
    assert _score(item, steps[:2]).error_type == "multi_turn:force_terminated"


def test_calls_decode_as_bfcl_writes_them() -> None:
    def message(*calls: tuple[str, str]) -> dict[str, object]:
        return {"tool_calls": [{"function": {"name": n, "arguments": a}} for n, a in calls]}

    both = message(("mv", '{"source": "a.txt", "destination": "b"}'), ("ls", "{}"))
    assert decode_calls(both) == ["mv(source='a.txt',destination='b')", "ls()"]
    assert decode_calls({"content": "Done."}) == []
    with pytest.raises(ValueError):
        decode_calls(message(("mv", '{"source": ')))
    with pytest.raises(ValueError):
        decode_calls(message(("mv", "[1, 2]")))


def test_each_run_has_its_own_backends(items: dict[str, list[MultiTurnItem]]) -> None:
    item = items["multi_turn_base"][1]
    first, second = Backends(item), Backends(item)
    try:
        assert first.execute(["mkdir(dir_name='only_in_first')"]) == ["None"]
        assert "only_in_first" in first.execute(["ls()"])[0]
        assert "only_in_first" not in second.execute(["ls()"])[0]
    finally:
        first.close()
        second.close()
    assert _leftover() == []


def _keyword_calls(calls: Sequence[str]) -> str:
    """A scripted reply making ``calls`` (BFCL call strings, keyword arguments only) at once."""
    out = []
    for text in calls:
        node = ast.parse(text).body[0].value  # type: ignore[attr-defined]
        assert not node.args
        args = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords}
        out.append({"name": node.func.id, "arguments": args})
    return json.dumps({"tool_calls": out})


def _perfect(item: MultiTurnItem) -> list[str]:
    """A model that makes each turn's calls in one step, then says it is done."""
    replies: list[str] = []
    for calls in item.answer:
        if calls:
            replies.append(_keyword_calls(calls))
        replies.append(json.dumps({"response": "Done."}))
    return replies


@pytest.mark.parametrize("entry", ["multi_turn_base_3", "multi_turn_miss_func_3"])
async def test_a_perfect_model_through_the_proxy_scores(
    items: dict[str, list[MultiTurnItem]], scripted_client: ClientFactory, entry: str
) -> None:
    category = entry.rsplit("_", 1)[0]
    item = next(i for i in items[category] if i.id == entry)
    client, engine = scripted_client(_perfect(item), n_ctx=WINDOW)
    backends = Backends(item)
    try:
        result = await run_multi_turn(client, item, "bare", backends)
        score = score_multi_turn(item, result.steps, backends.name)
    finally:
        backends.close()
    assert score.correct, score.error
    assert result.turns == len(engine.prompts) == sum(2 if calls else 1 for calls in item.answer)
    assert result.tool_calls == sum(len(calls) for calls in item.answer) and not result.force_terminated
    fresh = Backends(item)
    try:  # the backend's result went back to the model
        first = next(calls for calls in item.answer if calls)
        assert fresh.execute(first[:1])[0] in "".join(engine.prompts)
    finally:
        fresh.close()
    for turn, held in item.held_out.items():
        asked = sum(2 if calls else 1 for calls in item.answer[:turn])
        added = held[0]["name"]
        assert added not in engine.prompts[asked - 1] and added in engine.prompts[asked]
        assert multi_turn_modules().added_functions_prompt in engine.prompts[asked]


async def test_a_turn_past_the_step_limit_ends_the_entry(
    items: dict[str, list[MultiTurnItem]], scripted_client: ClientFactory
) -> None:
    item = items["multi_turn_base"][3]
    client, _ = scripted_client([_keyword_calls(["ls()"])], n_ctx=WINDOW)  # calls forever
    backends = Backends(item)
    try:
        result = await run_multi_turn(client, item, "bare", backends)
        score = score_multi_turn(item, result.steps, backends.name, finished=not result.force_terminated)
    finally:
        backends.close()
    limit = multi_turn_modules().step_limit
    assert (
        result.force_terminated and result.turns == limit + 1 and result.steps == [[["ls()"]] * (limit + 1)]
    )
    assert score.error_type == "multi_turn:force_terminated"


def test_the_suite_selects_multi_turn_items_by_split_and_seed() -> None:
    assert bfcl.parse_categories("multi_turn") == bfcl.MULTI_TURN_CATEGORIES
    picked = load_items("bfcl:multi_turn_base,simple", limit=3, seed=0, split="test")
    assert [i.category for i in picked] == ["multi_turn_base", "simple_python"] * 3
    again = load_items("bfcl:multi_turn_base", limit=3, seed=0, split="test")
    assert [i.item_id for i in again] == [i.item_id for i in picked if i.category == "multi_turn_base"]
    dev = {i.item_id for i in load_items("bfcl:multi_turn_base", split="dev")}
    assert len(dev) == 100 and not dev & {i.item_id for i in again}
