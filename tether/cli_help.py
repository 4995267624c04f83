"""``tether serve --help`` in sections: the options grouped by what they set, in plain text.

Typer's rich help groups options in panels but renders flags as ``--name <bool>``; the plain help
reads well at 80 columns but lists some forty options in one block. :class:`SectionedCommand`
keeps the plain rendering and writes one section per group of :data:`SERVE_SECTIONS` (an option
in none lands under "Other options", so a new one is never hidden).
"""

from __future__ import annotations

import typer.core
from typer._click import Context, HelpFormatter  # typer vendors click; these are its own types

__all__ = ["SERVE_SECTIONS", "SectionedCommand"]

# Section title -> the serve parameters in it, in the order shown.
SERVE_SECTIONS: dict[str, tuple[str, ...]] = {
    "Model and engine": (
        "model", "engine", "ctx", "slots", "threads", "gpu_layers", "flash_attn", "cache_type_k",
        "cache_type_v", "mmap", "mlock", "batching", "speculate", "preempt", "embedding_model",
    ),
    "Prefix cache": ("prefix_cache_ram_gb", "prefix_cache_dir", "prefix_cache_gb"),
    "Listening": (
        "host", "port", "api_key", "model_alias", "queue_limit", "queue_timeout", "stream_window",
        "shutdown_grace", "max_body_mb",
    ),
    "Replies and guardrails": ("max_tokens", "temperature", "tool_format", "constrain", "preset", "compaction", "tool_view_share"),
    "Remote backend": ("backend", "backend_kind", "backend_api_key", "backend_timeout"),
    "Server tools and sessions": (
        "server_tools", "mcp_config", "permission", "work_dir", "workflow", "session_store", "session_ttl_s",
        "max_sessions", "responses_store",
    ),
    "Configuration and logging": ("config_file", "profile", "log_level"),
}  # fmt: skip
OTHER = "Other options"


class SectionedCommand(typer.core.TyperCommand):
    """A command whose options are listed in the sections of :data:`SERVE_SECTIONS`."""

    def format_options(self, ctx: Context, formatter: HelpFormatter) -> None:
        where = {name: title for title, names in SERVE_SECTIONS.items() for name in names}
        rows: dict[str, list[tuple[str, str]]] = {title: [] for title in [*SERVE_SECTIONS, OTHER]}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None:
                rows[where.get(param.name or "", OTHER)].append(record)
        for title, records in rows.items():
            if records:
                with formatter.section(title):
                    formatter.write_dl(records)
