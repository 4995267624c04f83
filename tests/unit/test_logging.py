"""The log sink: a line the disk refuses is counted and dropped, never raised into the request."""

from __future__ import annotations

import errno
import io
import json

import pytest
import structlog

from tether.logging import LogSink, configure_logging


class FullDisk(io.StringIO):
    """A stream whose writes fail with ENOSPC until ``full`` is cleared."""

    def __init__(self) -> None:
        super().__init__()
        self.full = True

    def write(self, text: str) -> int:
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(text)


def test_refused_lines_are_counted_and_the_first_line_after_says_how_many(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    disk = FullDisk()
    monkeypatch.setattr("sys.stderr", disk)
    sink = LogSink()
    for i in range(3):
        sink.write(f"line {i}")  # must not raise
    assert (sink.written, sink.dropped) == (0, 3)
    assert sink.last_error == "OSError: [Errno 28] No space left on device"
    disk.full = False
    sink.write("back")
    lines = disk.getvalue().splitlines()
    assert json.loads(lines[0]) == {"event": "log_lines_dropped", "count": 3, "error": sink.last_error}
    assert lines[1:] == ["back"]
    sink.write("again")
    assert disk.getvalue().splitlines()[2:] == ["again"]  # reported once
    assert sink.snapshot() == {"written": 2, "dropped": 3, "last_error": sink.last_error}


def test_structlog_through_a_full_disk_does_not_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    disk = FullDisk()
    monkeypatch.setattr("sys.stderr", disk)
    sink = configure_logging("info", json_output=True)
    structlog.get_logger("t").info("request_done", status=200)
    structlog.get_logger("t").warning("slow")
    assert sink.dropped == 2
    disk.full = False
    structlog.get_logger("t").info("recovered")
    events = [json.loads(line)["event"] for line in disk.getvalue().splitlines()]
    assert events == ["log_lines_dropped", "recovered"]


def test_a_closed_stream_is_a_dropped_line(monkeypatch: pytest.MonkeyPatch) -> None:
    closed = io.StringIO()
    closed.close()
    monkeypatch.setattr("sys.stderr", closed)
    sink = LogSink()
    sink.write("x")
    assert sink.dropped == 1 and sink.last_error is not None and "closed" in sink.last_error
