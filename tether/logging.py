"""structlog configuration: JSON lines when stderr is not a terminal, readable lines when it is.

Every line goes through one :class:`LogSink`. A line the disk refuses (``ENOSPC`` under a
redirected stderr, a closed pipe) is counted and dropped, never raised into the request that
logged it: a full disk must not take the server down with it. ``/health`` and ``/metrics`` show
the count; the first line written after a failure says how many were lost.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from typing import Any

import structlog

__all__ = ["LogSink", "configure_logging"]


class LogSink:
    """Writes log lines to the current ``sys.stderr`` (looked up per line: a replaced stream must not
    break logging); counts the lines it could not write."""

    def __init__(self) -> None:
        self.written = 0
        self.dropped = 0
        self.last_error: str | None = None
        self._unreported = 0
        self._lock = threading.Lock()

    def write(self, line: str) -> None:
        with self._lock:
            try:
                if self._unreported:
                    note = {"event": "log_lines_dropped", "count": self._unreported, "error": self.last_error}
                    self._put(json.dumps(note))
                    self._unreported = 0
                self._put(line)
                self.written += 1
            except (OSError, ValueError) as exc:  # ENOSPC, EPIPE, EIO; ValueError: the stream is closed
                self.dropped += 1
                self._unreported += 1
                self.last_error = f"{type(exc).__name__}: {exc}"

    @staticmethod
    def _put(line: str) -> None:
        stream = sys.stderr
        stream.write(line + "\n")
        stream.flush()

    def snapshot(self) -> dict[str, Any]:
        return {"written": self.written, "dropped": self.dropped, "last_error": self.last_error}

    # structlog's logger interface: every level writes the rendered line.
    def msg(self, message: str) -> None:
        self.write(message)

    debug = info = warning = warn = error = critical = exception = fatal = log = msg


class _SinkHandler(logging.Handler):
    """stdlib logging (uvicorn's) through the same sink."""

    def __init__(self, sink: LogSink) -> None:
        super().__init__()
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:  # a bad format string in a third-party log call; logging's own convention
            self.handleError(record)
            return
        self.sink.write(line)


def configure_logging(level: str = "info", *, json_output: bool | None = None) -> LogSink:
    """Configure structlog and route stdlib logging (uvicorn) through the same level; the sink every
    line goes through (its counts belong in ``/health``)."""
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        numeric = logging.INFO
    as_json = (not sys.stderr.isatty()) if json_output is None else json_output
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer(colors=False)
    )
    sink = LogSink()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=lambda *_: sink,
        cache_logger_on_first_use=False,
    )
    handler = _SinkHandler(sink)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=numeric, handlers=[handler])
    # httpx logs every request at INFO; a remote backend (--backend) would log one line per token call.
    logging.getLogger("httpx").setLevel(max(numeric, logging.WARNING))
    return sink
