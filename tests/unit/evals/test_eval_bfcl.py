"""BFCL: its data, its tool conversion and its AST checker, driven the way BFCL drives them."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

pytest.importorskip("bfcl_eval", reason="bfcl-eval is installed by scripts/install_bfcl.sh")

from tether.errors import ConfigError
from tether.evals import bfcl


@pytest.fixture(scope="module")
def items() -> dict[str, list[bfcl.BfclItem]]:
    cats = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance")
    return {c: bfcl.load_items(c) for c in cats}


@pytest.mark.parametrize(
    "category", ["simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance"]
)
def test_replaying_the_ground_truth_scores_100_percent(
    items: dict[str, list[bfcl.BfclItem]], category: str
) -> None:
    entries = items[category]
    assert len(entries) >= 200
    wrong = [i.id for i in entries if not bfcl.score_message(i, bfcl.ground_truth_message(i)).correct]
    assert wrong == []


def _mutate(message: dict[str, Any], fn: Any) -> dict[str, Any]:
    out = copy.deepcopy(message)
    call = out["tool_calls"][0]["function"]
    args = json.loads(call["arguments"])
    fn(call, args)
    call["arguments"] = json.dumps(args)
    return out


def test_wrong_answers_fail(items: dict[str, list[bfcl.BfclItem]]) -> None:
    item = items["simple_python"][0]  # calculate_triangle_area(base=10, height=5)
    good = bfcl.ground_truth_message(item)
    assert bfcl.score_message(item, good).correct

    def wrong_value(_: Any, args: dict[str, Any]) -> None:
        args["base"] = 11

    def wrong_type(_: Any, args: dict[str, Any]) -> None:
        args["base"] = "10"

    def wrong_name(call: dict[str, Any], _: Any) -> None:
        call["name"] = "triangle_area"

    for fn, kind in (
        (wrong_value, "value_error"),
        (wrong_type, "type_error"),
        (wrong_name, "wrong_func_name"),
    ):
        score = bfcl.score_message(item, _mutate(good, fn))
        assert not score.correct and kind in score.error_type
    text = bfcl.score_message(item, {"role": "assistant", "content": "The area is 25."})
    assert not text.correct and text.error_type == "ast_decoder:decoder_failed"
    two = copy.deepcopy(good)
    two["tool_calls"] = two["tool_calls"] * 2
    assert not bfcl.score_message(item, two).correct


def test_irrelevance_is_correct_only_without_a_call(items: dict[str, list[bfcl.BfclItem]]) -> None:
    item = items["irrelevance"][0]
    assert bfcl.score_message(item, {"role": "assistant", "content": "I cannot do that."}).correct
    assert bfcl.score_message(item, {"role": "assistant", "content": ""}).correct
    name = item.tools[0]["function"]["name"]
    call = {"id": "c", "type": "function", "function": {"name": name, "arguments": "{}"}}
    score = bfcl.score_message(item, {"role": "assistant", "content": None, "tool_calls": [call]})
    assert not score.correct and score.error_type == "irrelevance_error:decoder_success"


def test_requests_use_bfcls_own_tool_conversion(items: dict[str, list[bfcl.BfclItem]]) -> None:
    dotted = next(i for c in items.values() for i in c if any("." in f["name"] for f in i.functions))
    names = [t["function"]["name"] for t in dotted.tools]
    assert all("." not in n for n in names)
    assert {f["name"].replace(".", "_") for f in dotted.functions} == set(names)
    for item in items["simple_python"][:50]:
        for tool in item.tools:
            params = tool["function"]["parameters"]
            assert tool["type"] == "function" and params["type"] == "object"
            for prop in params["properties"].values():
                assert prop["type"] in {"string", "integer", "number", "boolean", "array", "object"}
            assert tool["function"]["description"].endswith(
                "Note that the provided function is in Python 3 syntax."
            )
    floats = [
        p
        for i in items["simple_python"]
        for f, t in zip(i.functions, i.tools, strict=True)
        for k, p in t["function"]["parameters"]["properties"].items()
        if f["parameters"]["properties"][k]["type"] == "float"
    ]
    assert floats and all(p["type"] == "number" and p.get("format") == "float" for p in floats)


def test_categories_and_subsets() -> None:
    assert bfcl.parse_categories("simple,multiple") == ("simple_python", "multiple")
    assert "live_simple" in bfcl.parse_categories("live")
    for refused in ("web_search", "memory_kv", "exec_simple", "simple_java"):
        with pytest.raises(ConfigError):
            bfcl.parse_categories(refused)
    with pytest.raises(ConfigError):
        bfcl.parse_categories("nonsense")
    entries = bfcl.load_items("parallel")
    a, b = bfcl.select(entries, 20, 7), bfcl.select(entries, 20, 7)
    assert [i.id for i in a] == [i.id for i in b] and len(a) == 20
    assert [i.id for i in bfcl.select(entries, 20, 8)] != [i.id for i in a]
    order = [entries.index(i) for i in a]
    assert order == sorted(order)


def test_the_checker_stand_in_does_not_leak() -> None:
    import sys

    from tether.evals.bfcl_deps import bfcl_modules

    mods = bfcl_modules()
    assert mods.version == "2026.3.23"
    assert "bfcl_eval.constants.model_config" not in sys.modules
    heavy = ("boto3", "cohere", "mistralai", "google.genai", "torch", "sentence_transformers")
    assert not [m for m in heavy if m in sys.modules]


async def test_a_record_keeps_the_prompt_and_what_a_right_answer_does(
    items: dict[str, list[bfcl.BfclItem]], scripted_client: Any
) -> None:
    from tether.evals.suites import PROMPT_CHARS, BfclEvalItem, RunOptions, excerpt

    item = items["simple_python"][0]
    client, _ = scripted_client([json.dumps({"response": "No idea."})])
    record = await BfclEvalItem(item).evaluate(client, "bare", 0, RunOptions())
    asked = item.messages[-1]["content"]
    assert record.prompt == excerpt(asked) and asked.split()[0] in record.prompt
    long = excerpt("word " * 200)
    assert len(long) == PROMPT_CHARS and long.endswith("…")
    assert record.expected == list(item.answer or ())
    assert not record.correct and record.output == {"content": "No idea.", "tool_calls": []}
    none = items["irrelevance"][0]
    client, _ = scripted_client([json.dumps({"response": "No idea."})])
    assert (await BfclEvalItem(none).evaluate(client, "bare", 0, RunOptions())).expected == "no call"
