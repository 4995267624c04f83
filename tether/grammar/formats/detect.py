"""Pick a tool-call format from a model's jinja chat template text.

The checks run in this fixed order; the first that matches wins. More specific
markers come first because several families share ``<tool_call>``:

1. no template, or a template that never mentions ``tools`` → ``generic``
   (e.g. SmolLM2, Phi-3.5, Gemma 2, DeepSeek-R1 distills)
2. ``tool▁calls▁begin`` → ``deepseek_v3`` if the template fences arguments with
   ```` ```json ````, else ``deepseek_v31``
3. ``<start_function_call>`` / ``<start_function_declaration>`` → ``gemma``
4. ``<arg_key>`` → ``glm45``
5. ``<function=`` together with ``<parameter=`` → ``qwen3_coder``
6. ``[TOOL_CALLS]`` → ``mistral`` if ``[ARGS]`` appears, else ``mistral_v3``
7. ``<|tool_call_start|>`` / ``<|tool_list_start|>`` → ``pythonic`` (LFM2)
8. ``<|tool_call|>`` → ``phi4`` (Phi-4-mini, Granite 3)
9. ``<tool_call>`` → ``hermes``
10. ``<function=`` → ``llama_function``
11. ``<|python_tag|>`` or the Llama ``"parameters": dictionary`` instruction → ``llama3_json``
12. a ``[func_name1(`` instruction → ``pythonic`` (Llama 3.2/4 pythonic templates)
13. anything else → ``generic``
"""

from __future__ import annotations

import re

__all__ = ["detect_format"]

_MENTIONS_TOOLS = re.compile(r"\btools\b")
_LLAMA_JSON = re.compile(r"<\|python_tag\|>|\"parameters\": dictionary|\{\"name\": function name")
_PYTHONIC = re.compile(r"\[func_name\d*\(")

_CHECKS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("<start_function_call>",), "gemma"),
    (("<start_function_declaration>",), "gemma"),
    (("<arg_key>",), "glm45"),
    (("<function=", "<parameter="), "qwen3_coder"),
    (("[TOOL_CALLS]", "[ARGS]"), "mistral"),
    (("[TOOL_CALLS]",), "mistral_v3"),
    (("<|tool_call_start|>",), "pythonic"),
    (("<|tool_list_start|>",), "pythonic"),
    (("<|tool_call|>",), "phi4"),
    (("<tool_call>",), "hermes"),
    (("<function=",), "llama_function"),
)


def detect_format(chat_template: str | None) -> str:
    """The registry name of the tool-call format a chat template speaks (see module doc)."""
    if not chat_template or not _MENTIONS_TOOLS.search(chat_template):
        return "generic"
    if "tool▁calls▁begin" in chat_template:
        return "deepseek_v3" if "```json" in chat_template else "deepseek_v31"
    for markers, name in _CHECKS:
        if all(m in chat_template for m in markers):
            return name
    if _LLAMA_JSON.search(chat_template):
        return "llama3_json"
    if _PYTHONIC.search(chat_template):
        return "pythonic"
    return "generic"
