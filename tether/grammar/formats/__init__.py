"""Tool-call formats: one module per model family, looked up by name.

``get_format("hermes")`` imports only the module it needs. Third-party packages
add formats through the ``tether.formats`` entry-point group; an entry point names
a ``ToolCallFormat`` subclass (or instance) and its name is the registry key. A
built-in name always wins over a plugin of the same name.
"""

from __future__ import annotations

import importlib
from functools import cache
from importlib.metadata import EntryPoint, entry_points

from tether.errors import FormatError
from tether.grammar.formats.base import ToolCallFormat
from tether.grammar.formats.detect import detect_format

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
