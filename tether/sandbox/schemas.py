"""Descriptions and JSON Schemas of the built-in tools (the ``parameters`` of OpenAI function tools).

Kept short and explicit: small models follow a tight schema far better than a
long description. Every schema forbids unknown properties.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SCHEMAS"]

_PATH = {"type": "string", "minLength": 1, "description": "Path relative to the work dir."}


def _obj(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


SCHEMAS: dict[str, tuple[str, dict[str, Any]]] = {
    "read_file": (
        "Read a text file from the work dir. Returns its content; long files are cut, use offset/limit for more.",
        _obj(
            {
                "path": _PATH,
                "offset": {"type": "integer", "minimum": 1, "description": "First line to read (1-based)."},
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 10000,
                    "description": "How many lines.",
                },
            },
            ["path"],
        ),
    ),
    "write_file": (
        "Create or overwrite a file in the work dir with the given content. Parent directories are created.",
        _obj({"path": _PATH, "content": {"type": "string"}}, ["path", "content"]),
    ),
    "edit_file": (
        "Replace exact text in a file. old_string must occur exactly once unless replace_all is true.",
        _obj(
            {
                "path": _PATH,
                "old_string": {"type": "string", "minLength": 1, "description": "Exact text to find."},
                "new_string": {"type": "string", "description": "Replacement text."},
                "replace_all": {"type": "boolean", "description": "Replace every occurrence."},
            },
            ["path", "old_string", "new_string"],
        ),
    ),
    "list_dir": (
        "List a directory of the work dir: directories end with '/', files show their size.",
        _obj({"path": {**_PATH, "description": "Directory relative to the work dir (default '.')."}}, []),
    ),
    "glob": (
        "Find paths matching a glob pattern such as '**/*.py' or 'src/*.{js,ts}'.",
        _obj(
            {
                "pattern": {"type": "string", "minLength": 1},
                "path": {**_PATH, "description": "Directory to search from (default '.')."},
            },
            ["pattern"],
        ),
    ),
    "grep": (
        "Search file contents with an extended regular expression. Returns 'path:line:text' lines.",
        _obj(
            {
                "pattern": {"type": "string", "minLength": 1, "description": "Extended regular expression."},
                "path": {**_PATH, "description": "File or directory to search (default '.')."},
                "include": {
                    "type": "string",
                    "minLength": 1,
                    "description": "Only files matching this glob, e.g. '*.py'.",
                },
                "case_insensitive": {"type": "boolean"},
                "max_results": {"type": "integer", "minimum": 1, "maximum": 1000},
            },
            ["pattern"],
        ),
    ),
    "bash": (
        "Run a bash command in the work dir inside a sandbox: no network, time and memory limits.",
        _obj({"command": {"type": "string", "minLength": 1}}, ["command"]),
    ),
}
