"""Fixtures for the sandbox tests: work dirs, a stand-in $HOME with a secret, executors and a leak check.

The ``sandbox`` marker is registered here until pyproject.toml lists it. Tests
that need a working bubblewrap use the ``executor_factory`` fixture, which
skips with the exact reason when bubblewrap cannot create a sandbox here; the
fail-closed tests never skip.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.errors import SandboxError
from tether.sandbox import Limits, SandboxConfig, SandboxExecutor

SECRET = "tether-test-secret-5f0c1e"

ExecutorFactory = Callable[..., SandboxExecutor]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "sandbox: sandbox isolation and escape tests (need bubblewrap for most)"
    )


def _probe_bwrap(work_dir: Path) -> str | None:
    try:
        SandboxExecutor(SandboxConfig(work_dir=work_dir))
    except SandboxError as exc:
        return exc.message
    return None


@pytest.fixture(scope="session")
def bwrap_problem(tmp_path_factory: pytest.TempPathFactory) -> str | None:
    """None when bubblewrap works here; else why not (the skip reason of every isolation test)."""
    return _probe_bwrap(tmp_path_factory.mktemp("probe"))


@pytest.fixture
def work_dir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def fake_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory standing in for the invoking user's $HOME, holding a secret file."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".secret").write_text(SECRET)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("TETHER_TEST_HOST_SECRET", SECRET)
    return home


@pytest.fixture
def run_marker() -> str:
    return f"tether-run-{uuid.uuid4().hex}"


def _processes_with(marker: str) -> list[int]:
    needle = f"TETHER_TEST_MARKER={marker}".encode()
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


@pytest.fixture
def executor_factory(bwrap_problem: str | None, work_dir: Path, run_marker: str) -> Iterator[ExecutorFactory]:
    """Builds bwrap executors for ``work_dir``; afterwards asserts no sandboxed process survived."""
    if bwrap_problem is not None:
        pytest.skip(f"bubblewrap cannot create a sandbox in this environment: {bwrap_problem}")

    def factory(**limits: Any) -> SandboxExecutor:
        config = SandboxConfig(
            work_dir=work_dir,
            limits=Limits(**{"wall_time_s": 10.0, "kill_grace_s": 0.5, **limits}),
            env={"TETHER_TEST_MARKER": run_marker},
        )
        return SandboxExecutor(config)

    yield factory
    deadline = time.monotonic() + 3.0
    while (left := _processes_with(run_marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, f"sandboxed processes survived the test: {left}"
