"""Format registry (lazy built-ins, entry-point plugins) and chat-template detection."""

from __future__ import annotations

from collections.abc import Sequence
from importlib.metadata import EntryPoint

import pytest

import tether.grammar.formats as registry
from tether.errors import FormatError
from tether.grammar.formats import available_formats, describe_formats, detect_format, get_format
from tether.grammar.formats.base import ParseResult, ToolCallFormat, ToolSpec
from tether.grammar.formats.hermes import HermesFormat

BUILTINS = {
    "deepseek_v3", "deepseek_v31", "gemma", "generic", "glm45", "hermes", "llama3_json",
    "llama_function", "mistral", "mistral_v3", "phi4", "pythonic", "qwen3_coder",
}  # fmt: skip


class PluginFormat(ToolCallFormat):
    name = "plugin_fmt"
    description = "A third-party format."
    begin = ("<<call>>",)
    end = ("<</call>>",)

    def parse_region(self, region: str, tools: Sequence[ToolSpec]) -> ParseResult | None:
        return None


NOT_A_FORMAT = object()


def fake_entry_points(*eps: tuple[str, str]) -> object:
    def entry_points(*, group: str) -> list[EntryPoint]:
        assert group == "tether.formats"
        return [EntryPoint(name=n, value=v, group=group) for n, v in eps]

    return entry_points


def test_builtins_are_available_and_load() -> None:
    assert set(available_formats()) >= BUILTINS
    for name in BUILTINS:
        fmt = get_format(name)
        assert isinstance(fmt, ToolCallFormat) and fmt.name == name
    assert get_format("hermes") is get_format("hermes")
    assert isinstance(get_format("hermes"), HermesFormat)


def test_unknown_format_raises_format_error() -> None:
    with pytest.raises(FormatError, match="unknown tool-call format 'nope'") as info:
        get_format("nope")
    assert info.value.status == 400 and "hermes" in info.value.message


def test_entry_point_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        registry,
        "entry_points",
        fake_entry_points(
            ("plugin_fmt", "test_formats_registry:PluginFormat"),
            ("hermes", "test_formats_registry:PluginFormat"),  # cannot shadow a built-in
            ("broken", "test_formats_registry:NOT_A_FORMAT"),
            ("missing", "no_such_module_xyz:Thing"),
        ),
    )
    get_format.cache_clear()
    try:
        assert {"plugin_fmt", "broken", "missing"} <= set(available_formats())
        assert available_formats().count("hermes") == 1
        plugin = get_format("plugin_fmt")
        assert isinstance(plugin, PluginFormat)
        assert isinstance(get_format("hermes"), HermesFormat)
        with pytest.raises(FormatError, match="does not provide a ToolCallFormat"):
            get_format("broken")
        with pytest.raises(FormatError, match="failed to load"):
            get_format("missing")
        described = describe_formats()
        assert described["plugin_fmt"] == "A third-party format."
        assert described["broken"].startswith("(unavailable")
        assert plugin.parse("a <<call>>x<</call>> b", []) == ParseResult("a <<call>>x<</call>> b")
    finally:
        get_format.cache_clear()


def test_describe_formats_has_one_line_each() -> None:
    described = describe_formats()
    assert set(described) >= BUILTINS
    assert all(d and "\n" not in d for d in described.values())


# -- detection --------------------------------------------------------------------

QWEN25 = (
    "{%- if tools %}{{- '<|im_start|>system\\n# Tools\\n\\n<tools>' }}{%- for tool in tools %}{{ tool | tojson }}"
    "{%- endfor %}{{- '</tools>\\n\\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags' }}{%- endif %}"
)
QWEN3_CODER = QWEN25 + "{{- '<tool_call>\\n<function=' + tool_call.name + '>\\n<parameter=' + k + '>' }}"
GLM = "{% if tools %}<tools>{% endif %}{{ '<tool_call>' + tc.name }}<arg_key>{{ k }}</arg_key><arg_value>"
MISTRAL_V11 = "{% if tools %}[AVAILABLE_TOOLS]{% endif %}{{ '[TOOL_CALLS]' + name + '[ARGS]' + arguments }}"
MISTRAL_V3 = "{% if tools %}[AVAILABLE_TOOLS]{% endif %}{{ '[TOOL_CALLS][' }}{% for tc in tool_calls %}"
LLAMA31 = (
    "{%- if tools is not none %}Environment: ipython{% endif %}"
    "{{- '<|python_tag|>' + tool_call.name + '.call(' }}{{- '{\"name\": \"' + tool_call.name + '\", ' }}"
)
LLAMA32 = (
    '{%- if tools is not none %}{{- \'Respond in the format {"name": function name, "parameters": '
    "dictionary of argument name and its value}.' }}{% endif %}"
)
FUNCTIONARY = "{% for tool in tools %}{% endfor %}<|python_tag|>{{ '<function=' + name + '>' }}"
PHI4 = "{% if tools %}<|tool|>{{ tools | tojson }}<|/tool|>{% endif %}<|tool_call|>"
GRANITE3 = "{%- if tools %}respond only with <|tool_call|> followed by a JSON list of tools used.{% endif %}"
LFM2 = "{%- if tools -%}List of tools: <|tool_list_start|>[{%- for tool in tools -%}{%- endfor -%}]<|tool_list_end|>"
LLAMA_PYTHONIC = (
    "{% if tools %}you MUST put it in the format of [func_name1(params_name1=params_value1)]{% endif %}"
)
GEMMA_FN = "{% for tool in tools %}<start_function_declaration>declaration:{% endfor %}<start_function_call>"
DEEPSEEK_V3 = (
    "{% if tools %}{% endif %}{{'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + "
    "tool['function']['name'] + '\\n' + '```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```'}}"
)
DEEPSEEK_V31 = (
    "{% if tools %}{% endif %}{{'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['function']['name'] + "
    "'<｜tool▁sep｜>' + tool['function']['arguments'] + '<｜tool▁call▁end｜>'}}"
)
SMOLLM2 = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
)
R1_DISTILL = "{{'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + '```json'}}"


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        (None, "generic"),
        ("", "generic"),
        (SMOLLM2, "generic"),
        (R1_DISTILL, "generic"),  # renders calls but never offers tools
        ("{% if tools %}{{ tools | tojson }}{% endif %}", "generic"),  # tools, but no known call syntax
        (QWEN25, "hermes"),
        (QWEN3_CODER, "qwen3_coder"),
        (GLM, "glm45"),
        (MISTRAL_V11, "mistral"),
        (MISTRAL_V3, "mistral_v3"),
        (LLAMA31, "llama3_json"),
        (LLAMA32, "llama3_json"),
        (FUNCTIONARY, "llama_function"),
        (PHI4, "phi4"),
        (GRANITE3, "phi4"),
        (LFM2, "pythonic"),
        (LLAMA_PYTHONIC, "pythonic"),
        (GEMMA_FN, "gemma"),
        (DEEPSEEK_V3, "deepseek_v3"),
        (DEEPSEEK_V31, "deepseek_v31"),
    ],
)
def test_detect_format(template: str | None, expected: str) -> None:
    assert detect_format(template) == expected


def test_detected_names_are_registered() -> None:
    for template in (QWEN25, GLM, LFM2, DEEPSEEK_V31, SMOLLM2):
        get_format(detect_format(template))
