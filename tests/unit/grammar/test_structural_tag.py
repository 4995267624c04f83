"""Layer 0 compiled for vLLM (structural tags, JSON schema, choice) and Ollama (JSON schema).

The schemas are checked with ``jsonschema``; the structural tags by building calls from their
begin/content/end and parsing them back with the format. ``test_vllm_accepts_*`` hands the
request fields to vLLM's own request models and xgrammar when a vLLM install is found
(``TETHER_VLLM_PYTHON``, default the ``vllm-venv`` beside this checkout that
scripts/check_vllm.sh makes); it is skipped without one.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tether.calls import ToolCall
from tether.grammar.formats import get_format
from tether.grammar.formats.base import ToolSpec
from tether.grammar.remote import compile_ollama, compile_vllm
from tether.grammar.remote.structural_tag import name_enum_schema, reply_schema, structural_tag
from tether.grammar.remote.tool_schema import arguments_schema
from tether.grammar.spec import JsonSpec, NameChoiceSpec, ReplySpec

WEATHER = ToolSpec(
    "get_weather",
    "Weather for a city.",
    {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
    },
)
TIME = ToolSpec("get_time", "The time.", {"type": "object", "properties": {}})
TOOLS = (WEATHER, TIME)
JSON_MARKER_FORMATS = [
    "hermes",
    "mistral",
    "mistral_v3",
    "llama3_json",
    "llama_function",
    "phi4",
    "deepseek_v3",
    "deepseek_v31",
]
OTHER_MARKER_FORMATS = ["qwen3_coder", "pythonic", "gemma", "glm45"]


def _validator(schema: dict[str, Any]) -> jsonschema.Draft202012Validator:
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _reply(mode: str = "strict", tools: tuple[ToolSpec, ...] = TOOLS, **kw: Any) -> ReplySpec:
    return ReplySpec(get_format("generic"), tools, mode, **kw)  # type: ignore[arg-type]


def _calls(*calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"tool_calls": [{"name": n, "arguments": a} for n, a in calls]}


# -- marker formats: structural tags ---------------------------------------------------


def test_hermes_tag_fixes_the_name_in_begin_and_holds_the_schema() -> None:
    tag = structural_tag(ReplySpec(get_format("hermes"), TOOLS, "strict"))
    assert tag is not None and tag["type"] == "structural_tag"
    fmt = tag["format"]
    assert fmt["type"] == "triggered_tags" and fmt["triggers"] == ["<tool_call>"]
    assert fmt["at_least_one"] is False and fmt["stop_after_first"] is False
    first = fmt["tags"][0]
    assert first["begin"] == '<tool_call>\n{"name": "get_weather", "arguments": '
    assert first["end"] == "}\n</tool_call>"
    assert first["content"] == {
        "type": "json_schema",
        "json_schema": {**WEATHER.parameters, "additionalProperties": False},
    }
    assert [t["begin"] for t in fmt["tags"]][1] == '<tool_call>\n{"name": "get_time", "arguments": '
    names = structural_tag(ReplySpec(get_format("hermes"), TOOLS, "names"))
    assert names is not None
    assert all(t["content"]["json_schema"] == {"type": "object"} for t in names["format"]["tags"])


@pytest.mark.parametrize("name", JSON_MARKER_FORMATS)
def test_a_call_built_from_a_tag_is_the_formats_own_call(name: str) -> None:
    """begin + arguments + end parses back, with the format's parser, into that tool's call."""
    fmt = get_format(name)
    tag = structural_tag(ReplySpec(fmt, TOOLS, "strict"))
    assert tag is not None
    tags = tag["format"]["tags"]
    assert len(tags) == 2
    for t, tool, args in zip(tags, TOOLS, ({"city": "Paris", "days": 2}, {}), strict=True):
        assert any(t["begin"].startswith(trigger) for trigger in tag["format"]["triggers"])
        text = t["begin"] + json.dumps(args) + t["end"]
        parsed = fmt.parse(text, TOOLS)
        assert [(c.name, dict(c.arguments)) for c in parsed.calls] == [(tool.name, args)]
        assert parsed.content.strip() == ""


@pytest.mark.parametrize("name", JSON_MARKER_FORMATS)
def test_strict_tag_content_rejects_a_wrong_type_names_mode_does_not(name: str) -> None:
    strict = structural_tag(ReplySpec(get_format(name), (WEATHER,), "strict"))
    loose = structural_tag(ReplySpec(get_format(name), (WEATHER,), "names"))
    assert strict is not None and loose is not None
    check = _validator(strict["format"]["tags"][0]["content"]["json_schema"])
    assert check.is_valid({"city": "Paris"})
    assert not check.is_valid({"city": 5})
    assert not check.is_valid({"town": "Paris"})
    assert _validator(loose["format"]["tags"][0]["content"]["json_schema"]).is_valid({"town": 5})


@pytest.mark.parametrize("name", OTHER_MARKER_FORMATS)
def test_formats_without_json_arguments_hold_the_name_only(name: str) -> None:
    fmt = get_format(name)
    tag = structural_tag(ReplySpec(fmt, TOOLS, "strict"))
    assert tag is not None
    begins = [t["begin"] for t in tag["format"]["tags"]]
    assert all(t["content"] == {"type": "const_string", "value": ""} for t in tag["format"]["tags"])
    offered = fmt.render_calls("", [ToolCall(name="get_weather", arguments={"city": "Paris"})])
    other = fmt.render_calls("", [ToolCall(name="get_news", arguments={"city": "Paris"})])
    assert any(offered.startswith(b) for b in begins)
    assert not any(other.startswith(b) for b in begins)


def test_tool_choice_and_parallel_map_to_tag_options() -> None:
    hermes = get_format("hermes")
    forced = structural_tag(ReplySpec(hermes, TOOLS, "strict", required=True, parallel=False))
    assert forced is not None
    assert forced["format"]["at_least_one"] is True and forced["format"]["stop_after_first"] is True
    assert structural_tag(ReplySpec(hermes, TOOLS, "strict", answer_only=True)) is None
    assert structural_tag(_reply()) is None  # the generic format is a whole-reply schema instead
    assert compile_ollama(ReplySpec(hermes, TOOLS, "strict")) is None


def test_vllm_gets_the_structural_tag_as_json_text() -> None:
    spec = ReplySpec(get_format("hermes"), TOOLS, "strict")
    constraint = compile_vllm(spec)
    assert constraint is not None
    fields = constraint.request_fields()
    assert list(fields) == ["structured_outputs"]
    text = fields["structured_outputs"]["structural_tag"]
    assert isinstance(text, str) and json.loads(text) == structural_tag(spec)


# -- the generic format: one schema for the whole reply ---------------------------------


def test_whole_reply_schema_strict() -> None:
    spec = _reply()
    schema = reply_schema(spec)
    assert schema is not None
    assert compile_ollama(spec) == schema
    vllm = compile_vllm(spec)
    assert vllm is not None and vllm.structured_outputs == {"json": schema}
    check = _validator(schema)
    assert check.is_valid(_calls(("get_weather", {"city": "Paris"})))
    assert check.is_valid(_calls(("get_weather", {"city": "Paris"}), ("get_time", {})))
    assert check.is_valid({"response": "Hello!"})
    assert not check.is_valid(_calls(("get_news", {"city": "Paris"})))  # not offered
    assert not check.is_valid(_calls(("get_weather", {"city": 5})))  # wrong type
    assert not check.is_valid(_calls(("get_time", {"city": "Paris"})))  # another tool's arguments
    assert not check.is_valid(_calls(("get_weather", {})))  # required argument missing
    assert not check.is_valid({**_calls(("get_time", {})), "response": "x"})
    assert not check.is_valid({"tool_calls": []})
    assert not check.is_valid({"response": ""})
    assert not check.is_valid({"tool_calls": [{"name": "get_time"}]})


def test_whole_reply_accepts_what_the_generic_format_renders() -> None:
    fmt = get_format("generic")
    schema = reply_schema(_reply())
    assert schema is not None
    calls = [ToolCall(name="get_weather", arguments={"city": "Oslo"}), ToolCall(name="get_time")]
    assert _validator(schema).is_valid(json.loads(fmt.render_calls("", calls)))
    assert _validator(schema).is_valid(json.loads(fmt.render_calls("It is sunny.", [])))


def test_whole_reply_names_mode_holds_names_not_arguments() -> None:
    schema = reply_schema(_reply("names"))
    assert schema is not None
    check = _validator(schema)
    assert check.is_valid(_calls(("get_time", {"anything": [1, 2]})))
    assert not check.is_valid(_calls(("get_news", {})))
    assert not check.is_valid({"tool_calls": [{"name": "get_time", "arguments": "now"}]})


def test_whole_reply_tool_choice_and_parallel() -> None:
    one = _calls(("get_time", {}))
    two = _calls(("get_time", {}), ("get_weather", {"city": "Rome"}))
    answer = {"response": "Hi."}
    required = _validator(reply_schema(_reply(required=True)) or {})
    assert required.is_valid(one) and not required.is_valid(answer)
    single = _validator(reply_schema(_reply(parallel=False)) or {})
    assert single.is_valid(one) and not single.is_valid(two) and single.is_valid(answer)
    answer_only = _validator(reply_schema(_reply(answer_only=True)) or {})
    assert answer_only.is_valid(answer) and not answer_only.is_valid(one)
    named = _validator(reply_schema(_reply(tools=(WEATHER,), required=True)) or {})
    assert named.is_valid(_calls(("get_weather", {"city": "Rome"})))
    assert not named.is_valid(one)


# -- real-world tool schemas -------------------------------------------------------------

PYDANTIC = ToolSpec(
    "book",
    "",
    {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$defs": {"Place": {"properties": {"city": {"type": "string"}}, "required": ["city"]}},
        "properties": {"to": {"$ref": "#/$defs/Place"}, "seats": {"type": "integer"}},
        "required": ["to"],
    },
)
DRAFT7 = ToolSpec(
    "ship",
    "",
    {
        "type": "object",
        "definitions": {"Place": {"type": "object", "properties": {"zip": {"type": "integer"}}}},
        "properties": {"to": {"$ref": "#/definitions/Place"}},
        "required": ["to"],
    },
)
TREE = ToolSpec(
    "tree",
    "",
    {
        "type": "object",
        "properties": {"label": {"type": "string"}, "kids": {"type": "array", "items": {"$ref": "#"}}},
        "required": ["label"],
    },
)
LOOSE = ToolSpec(
    "loose",
    "",
    {
        "properties": {
            "note": {"type": "string", "nullable": True},
            "unit": {"enum": ["c", "f"], "nullable": True},
            "gone": {"$ref": "#/$defs/Missing"},
            "far": {"$ref": "https://example.invalid/schema.json"},
        },
        "required": ["note"],
    },
)


@pytest.mark.parametrize("as_", ["whole_reply", "standalone"])
def test_references_survive_embedding_and_tools_do_not_collide(as_: str) -> None:
    tools = (PYDANTIC, DRAFT7, TREE)
    if as_ == "whole_reply":
        schema = reply_schema(_reply(tools=tools)) or {}

        def ok(name: str, args: dict[str, Any]) -> bool:
            return _validator(schema).is_valid(_calls((name, args)))
    else:

        def ok(name: str, args: dict[str, Any]) -> bool:
            tool = next(t for t in tools if t.name == name)
            return _validator(arguments_schema(tool.parameters, "strict")).is_valid(args)

    assert ok("book", {"to": {"city": "Lima"}, "seats": 2})
    assert not ok("book", {"to": {"city": 7}})  # checked through the reference
    assert not ok("book", {"to": {"zip": 7}})
    assert ok("ship", {"to": {"zip": 7}})  # same def name "Place", another shape
    assert not ok("ship", {"to": {"city": "Lima"}})
    assert ok("tree", {"label": "a", "kids": [{"label": "b", "kids": [{"label": "c"}]}]})
    assert not ok("tree", {"label": "a", "kids": [{"label": 1}]})


def test_loose_schemas_are_cleaned() -> None:
    schema = arguments_schema(LOOSE.parameters, "strict")
    assert schema["type"] == "object" and "$schema" not in json.dumps(schema)
    check = _validator(schema)
    assert check.is_valid({"note": None, "unit": None})
    assert check.is_valid({"note": "x", "unit": "c", "gone": [1], "far": {"a": 1}})
    assert not check.is_valid({"note": 3})
    assert not check.is_valid({"note": "x", "unit": "k"})
    assert not check.is_valid({"note": "x", "extra": 1})


@pytest.mark.parametrize(
    "parameters",
    [{}, {"type": "object"}, {"type": "object", "properties": {}}, {"properties": {}, "required": []}],
)
def test_a_tool_without_parameters_takes_an_empty_object_only(parameters: dict[str, Any]) -> None:
    check = _validator(arguments_schema(parameters, "strict"))
    assert check.is_valid({})
    assert not check.is_valid({"a": 1})


def test_objects_shaped_otherwise_are_not_parameterless() -> None:
    free = _validator(
        arguments_schema({"type": "object", "additionalProperties": {"type": "string"}}, "strict")
    )
    assert free.is_valid({"a": "b"}) and not free.is_valid({"a": 1})
    either = _validator(
        arguments_schema(
            {"anyOf": [{"properties": {"a": {"type": "string"}}, "required": ["a"]}, {"required": ["b"]}]},
            "strict",
        )
    )
    assert either.is_valid({"a": "x"}) and not either.is_valid({"a": 1})
    both = _validator(
        arguments_schema(
            {
                "allOf": [
                    {"properties": {"a": {"type": "string"}}},
                    {"properties": {"b": {"type": "integer"}}},
                ]
            },
            "strict",
        )
    )
    assert both.is_valid({"a": "x", "b": 1}) and not both.is_valid({"a": "x", "b": "y"})


# -- the guard's re-pick and argument repair ----------------------------------------------


def test_repick_is_a_choice_for_vllm_and_an_enum_for_ollama() -> None:
    spec = NameChoiceSpec(("get_weather", "get_time", "get_weather"))
    vllm = compile_vllm(spec)
    assert vllm is not None and vllm.request_fields() == {
        "structured_outputs": {"choice": ["get_weather", "get_time"]}
    }
    schema = compile_ollama(spec)
    assert schema == name_enum_schema(["get_weather", "get_time"])
    check = _validator(schema)
    assert check.is_valid(json.loads('"get_time"'))
    assert not check.is_valid("get_news")


def test_argument_repair_is_the_tools_strict_schema() -> None:
    spec = JsonSpec.of_tool(PYDANTIC)
    vllm = compile_vllm(spec)
    assert vllm is not None
    assert vllm.structured_outputs == {"json": compile_ollama(spec)}
    check = _validator(vllm.structured_outputs["json"])
    assert check.is_valid({"to": {"city": "Lima"}}) and not check.is_valid({"to": {"city": 1}})


# -- Ollama: its `format` goes through llama.cpp's JSON-schema converter ---------------------


_LLAMA_CONVERT = r"""
import json, sys
from llama_cpp.llama_grammar import json_schema_to_gbnf
print(json.dumps(["root ::=" in json_schema_to_gbnf(json.dumps(s)) for s in json.load(sys.stdin)]))
"""


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="needs llama-cpp-python")
def test_llama_cpp_converts_every_ollama_format() -> None:
    """The converter Ollama's ``format`` goes through (llama.cpp's; here llama-cpp-python's port,
    in a child: importing it leaves files open) takes every schema. It refuses a ``$ref`` of ``#``
    and misses references under a root ``$ref``, which is why neither is sent."""
    specs: list[Any] = [
        _reply(tools=(PYDANTIC, DRAFT7, TREE, LOOSE)),
        _reply("names", required=True, parallel=False),
        _reply(answer_only=True),
        NameChoiceSpec(("get_weather", "get_time")),
        *(JsonSpec.of_tool(t) for t in (PYDANTIC, DRAFT7, TREE, LOOSE, TIME)),
    ]
    schemas = [compile_ollama(spec) for spec in specs]
    run = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", _LLAMA_CONVERT],
        input=json.dumps(schemas),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == [True] * len(specs)


# -- vLLM's own request models and xgrammar -------------------------------------------------

# scripts/check_vllm.sh installs it beside the checkout.
_VLLM_PYTHON = Path(
    os.environ.get("TETHER_VLLM_PYTHON")
    or Path(__file__).resolve().parents[4] / "vllm-venv" / "bin" / "python"
)
_VLLM_CHECK = r"""
import json, sys
from vllm.entrypoints.openai.completion.protocol import CompletionRequest
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
import xgrammar as xgr
from xgrammar.testing import _is_grammar_accept_string as accepts
out = []
for case in json.load(sys.stdin):
    fields = case["fields"]
    CompletionRequest.model_validate({"prompt": [1, 2, 3], **fields})
    ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": "hi"}], **fields})
    so = fields["structured_outputs"]
    if "structural_tag" in so:
        grammar = xgr.Grammar.from_structural_tag(so["structural_tag"])
    elif "json" in so:
        grammar = xgr.Grammar.from_json_schema(json.dumps(so["json"]))
    else:
        grammar = xgr.Grammar.from_ebnf("root ::= " + " | ".join(json.dumps(c) for c in so["choice"]))
    out.append([accepts(grammar, text) for text in case["texts"]])
print(json.dumps(out))
"""


def _vllm_cases() -> list[tuple[Any, list[tuple[str, bool]]]]:
    hermes = get_format("hermes")
    wcall = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    return [
        (
            ReplySpec(hermes, TOOLS, "strict"),
            [
                ("Sure. " + wcall, True),
                ("No tool needed.", True),
                (wcall.replace("Paris", "5").replace('"5"', "5"), False),
                (wcall.replace("get_weather", "get_news"), False),
            ],
        ),
        (
            ReplySpec(hermes, TOOLS, "names", required=True),
            [(wcall.replace('"Paris"', "5"), True), ("Hi", False)],
        ),
        (
            ReplySpec(get_format("llama3_json"), TOOLS, "strict", parallel=False),
            [('<|python_tag|>{"name": "get_time", "parameters": {}}', True)],
        ),
        (ReplySpec(get_format("mistral"), TOOLS, "strict"), [('[TOOL_CALLS]get_time[ARGS]{"a": 1}', False)]),
        (
            ReplySpec(get_format("qwen3_coder"), TOOLS, "strict"),
            [("<tool_call>\n<function=get_news>", False)],
        ),
        (
            _reply(tools=(PYDANTIC, DRAFT7, TREE, LOOSE)),
            [
                ('{"tool_calls": [{"name": "book", "arguments": {"to": {"city": "Lima"}}}]}', True),
                ('{"tool_calls": [{"name": "ship", "arguments": {"to": {"city": "Lima"}}}]}', False),
                (
                    '{"tool_calls": [{"name": "tree", "arguments": {"label": "a", "kids": [{"label": "b"}]}}]}',
                    True,
                ),
                ('{"tool_calls": [{"name": "loose", "arguments": {"note": null}}]}', True),
                ('{"response": "Hello"}', True),
            ],
        ),
        (_reply("names", required=True, parallel=False), [('{"response": "Hello"}', False)]),
        (NameChoiceSpec(("get_weather", "get_time")), [("get_time", True), ("get_news", False)]),
        (
            JsonSpec.of_tool(TREE),
            [('{"label": "a", "kids": [{"label": "b"}]}', True), ('{"label": 1}', False)],
        ),
        # Structured replies: a schema ($defs and $ref, as pydantic writes them), any object, beside tools.
        (JsonSpec(PYDANTIC.parameters), [('{"to": {"city": "Lima"}}', True), ('{"to": {}}', False)]),
        (JsonSpec(None), [('{"a": [1, {"b": null}]}', True), ("[1]", False)]),
        (
            _reply(tools=(PYDANTIC,), answer=JsonSpec(TREE.parameters)),
            [
                ('{"tool_calls": [{"name": "book", "arguments": {"to": {"city": "Lima"}}}]}', True),
                ('{"response": {"label": "a", "kids": []}}', True),
                ('{"response": "Hello"}', False),
            ],
        ),
    ]


@pytest.mark.skipif(not _VLLM_PYTHON.exists(), reason="no vLLM install (scripts/check_vllm.sh makes one)")
def test_vllm_accepts_the_request_fields_and_xgrammar_holds_the_reply() -> None:
    cases = _vllm_cases()
    payload = []
    for spec, texts in cases:
        constraint = compile_vllm(spec)
        assert constraint is not None
        payload.append({"fields": constraint.request_fields(), "texts": [t for t, _ in texts]})
    run = subprocess.run(
        [str(_VLLM_PYTHON), "-c", _VLLM_CHECK],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads(run.stdout.strip().splitlines()[-1])
    for (spec, texts), got in zip(cases, results, strict=True):
        assert got == [want for _, want in texts], (spec, texts)


def _valid(schema: dict[str, Any], value: Any) -> bool:
    return not list(jsonschema.Draft202012Validator(schema).iter_errors(value))


def test_a_structured_reply_is_its_schema_for_vllm_and_ollama() -> None:
    trip = PYDANTIC.parameters  # $defs and $ref, as pydantic writes them
    vllm = compile_vllm(JsonSpec(trip))
    assert vllm is not None
    for schema in (vllm.request_fields()["structured_outputs"]["json"], compile_ollama(JsonSpec(trip))):
        assert schema is not None
        assert _valid(schema, {"to": {"city": "Lima"}}) and not _valid(schema, {"to": {}})
    assert compile_ollama(JsonSpec(None)) == {"type": "object"}


def test_beside_tools_the_whole_reply_schema_takes_the_structured_answer() -> None:
    schema = reply_schema(_reply(tools=(PYDANTIC, TREE), answer=JsonSpec(TREE.parameters)))
    assert schema is not None
    assert _valid(schema, _calls(("book", {"to": {"city": "Lima"}})))
    tree = {"label": "a", "kids": [{"label": "b"}]}
    assert _valid(schema, {"response": tree})  # the answer's value in the envelope, its $defs apart
    assert not _valid(schema, {"response": "Hello"})  # no free text beside a structured answer
    only = reply_schema(_reply(answer_only=True, answer=JsonSpec(TREE.parameters)))
    assert only is not None and _valid(only, {"response": {"label": "a"}})
    assert not _valid(only, _calls(("get_time", {})))
    hermes = ReplySpec(get_format("hermes"), TOOLS, "strict", answer=JsonSpec(TREE.parameters))
    assert compile_ollama(hermes) is not None  # a marker format: Ollama's format holds the answer
