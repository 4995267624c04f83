"""structlog's configuration is process-wide: CLI tests (``CliRunner``) configure it to write to a
stream that is closed afterwards. Start every workflow test from structlog's defaults."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import structlog


@pytest.fixture(autouse=True)
def _default_structlog() -> Iterator[None]:
    structlog.reset_defaults()
    yield
