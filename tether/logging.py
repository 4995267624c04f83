"""structlog configuration: JSON lines when stderr is not a terminal, readable lines when it is."""

from __future__ import annotations

import logging
import sys

import structlog

__all__ = ["configure_logging"]


def configure_logging(level: str = "info", *, json_output: bool | None = None) -> None:
    """Configure structlog and route stdlib logging (uvicorn) through the same level."""
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        numeric = logging.INFO
    as_json = (not sys.stderr.isatty()) if json_output is None else json_output
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        # Look sys.stderr up per logger, not once: a replaced or closed stream must not break logging.
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=False,
    )
    logging.basicConfig(level=numeric, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    # httpx logs every request at INFO; a remote backend (--backend) would log one line per token call.
    logging.getLogger("httpx").setLevel(max(numeric, logging.WARNING))


def _stderr_logger(*_: object) -> structlog.PrintLogger:
    return structlog.PrintLogger(file=sys.stderr)
