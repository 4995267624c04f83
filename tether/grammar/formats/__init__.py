"""Tool-call formats: one module per model family, looked up by name.

``get_format("hermes")`` imports only the module it needs. Third-party packages
add formats through the ``tether.formats`` entry-point group; an entry point names
a ``ToolCallFormat`` subclass (or instance) and its name is the registry key. A
built-in name always wins over a plugin of the same name.

``detect_format(template)`` asks every format's own ``detection`` (see
``TemplateMatch``): a template that never mentions ``tools`` is ``generic`` (SmolLM2,
Phi-3.5, Gemma 2, …); otherwise the first match by rank wins, and ``generic`` when none does.
"""

from __future__ import annotations

import importlib
import re
from functools import cache
from importlib.metadata import EntryPoint, entry_points

from tether.errors import FormatError
from tether.grammar.formats.base import ToolCallFormat

__all__ = [
    "BUILTIN_FORMATS",
    "ENTRY_POINT_GROUP",
    "available_formats",
    "describe_formats",
    "detect_format",
    "get_format",
]

ENTRY_POINT_GROUP = "tether.formats"

#: registry name -> "module:Class"
BUILTIN_FORMATS: dict[str, str] = {
    "hermes": "tether.grammar.formats.hermes:HermesFormat",
    "qwen3_coder": "tether.grammar.formats.qwen3_coder:Qwen3CoderFormat",
    "mistral": "tether.grammar.formats.mistral:MistralFormat",
    "mistral_v3": "tether.grammar.formats.mistral:MistralV3Format",
    "llama3_json": "tether.grammar.formats.llama3_json:Llama3JsonFormat",
    "llama_function": "tether.grammar.formats.llama_function:LlamaFunctionFormat",
    "pythonic": "tether.grammar.formats.pythonic:PythonicFormat",
    "phi4": "tether.grammar.formats.phi4:Phi4Format",
    "gemma": "tether.grammar.formats.gemma:FunctionGemmaFormat",
    "deepseek_v3": "tether.grammar.formats.deepseek:DeepSeekV3Format",
    "deepseek_v31": "tether.grammar.formats.deepseek:DeepSeekV31Format",
    "glm45": "tether.grammar.formats.glm45:Glm45Format",
    "generic": "tether.grammar.formats.generic:GenericFormat",
}


def _plugins() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name not in BUILTIN_FORMATS}


def available_formats() -> list[str]:
    """Every format name: built-ins and installed plugins, sorted."""
    return sorted({*BUILTIN_FORMATS, *_plugins()})


def _instance(obj: object, name: str) -> ToolCallFormat:
    if isinstance(obj, type) and issubclass(obj, ToolCallFormat):
        obj = obj()
    if not isinstance(obj, ToolCallFormat):
        raise FormatError(f"tool-call format {name!r} does not provide a ToolCallFormat")
    return obj


@cache
def get_format(name: str) -> ToolCallFormat:
    """The format registered as ``name``; ``FormatError`` when there is none."""
    target = BUILTIN_FORMATS.get(name)
    if target is not None:
        module, _, attr = target.partition(":")
        return _instance(getattr(importlib.import_module(module), attr), name)
    plugin = _plugins().get(name)
    if plugin is None:
        known = ", ".join(available_formats())
        raise FormatError(f"unknown tool-call format {name!r}; available: {known}", param="format")
    try:
        loaded = plugin.load()
    except Exception as exc:
        raise FormatError(f"tool-call format plugin {name!r} failed to load: {exc}") from exc
    return _instance(loaded, name)


def describe_formats() -> dict[str, str]:
    """name -> one-line description, for every available format (imports them all)."""
    out: dict[str, str] = {}
    for name in available_formats():
        try:
            out[name] = get_format(name).description
        except FormatError as exc:
            out[name] = f"(unavailable: {exc.message})"
    return out


_MENTIONS_TOOLS = re.compile(r"\btools\b")


def detect_format(chat_template: str | None) -> str:
    """The registry name of the format a chat template speaks, from the formats' own declarations."""
    if not chat_template or not _MENTIONS_TOOLS.search(chat_template):
        return "generic"
    checks = [(match, name) for name in available_formats() for match in _declared(name).detection]
    for match, name in sorted(checks, key=lambda c: (c[0].rank, c[1])):
        if match.matches(chat_template):
            return name
    return "generic"


def _declared(name: str) -> ToolCallFormat:
    try:
        return get_format(name)
    except FormatError:
        return ToolCallFormat()  # a broken plugin detects nothing
