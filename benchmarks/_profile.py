"""Where a served token's time goes: py-spy samples of a running server, folded into stages.

``py-spy record --format raw --threads --nonblocking`` samples every Python thread of the server
without pausing it; each sample's stack is given to the first stage (leaf first) whose pattern
matches one of its frames. CPU time of threads py-spy cannot see (llama.cpp's OpenMP workers) comes
from ``/proc/<pid>/task/*/stat``. Divided by the tokens streamed meanwhile, both give µs per token.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["STAGES", "Profile", "ProfileRun", "process_cpu", "thread_cpu"]

# (stage, frame pattern), tried leaf first against each frame of a sample's stack: the innermost
# match names the stage. Patterns are file paths and function names of this code and its server stack.
STAGES: list[tuple[str, str]] = [
    (
        "llama_decode",
        r"\bdecode \(tether/engine/batch/context\.py|\b_eval_tokens|\beval \(llama_cpp/llama\.py",
    ),
    ("constraint mask", r"tether/grammar/|tether/engine/processors\.py|_GuardedProcessor"),
    (
        "sampling",
        r"tether/engine/batch/sampler\.py|\blogits \(tether/engine/batch/context\.py|\bsample \(llama_cpp/",
    ),
    ("runner (batch, drafts)", r"tether/engine/batch/(runner|draft|context)\.py|llama_cpp/llama\.py"),
    (
        "token loop (handoff, detokenize)",
        r"tether/engine/(loop|stops|llama_cpp)\.py|tether/engine/batch/(jobs|engine)\.py",
    ),
    ("handoff to the event loop", r"call_soon_threadsafe|_write_to_self|tether/engine/scheduler\.py"),
    (
        "routing (stops, format detector)",
        r"tether/turns/routing\.py|tether/turns/stopmatch|tether/grammar/detector",
    ),
    ("turn pipeline", r"tether/turns/|tether/guardrails/|tether/workflows/"),
    ("protocol + SSE write", r"tether/proxy/|starlette/|uvicorn/|h11/|fastapi/|_SelectorSocketTransport"),
    ("event loop (select, callbacks)", r"asyncio/|selectors\.py"),
]


@dataclass
class Profile:
    """Samples per (thread name, stage), and CPU seconds per thread name over the same window."""

    rate: int
    samples: Counter[tuple[str, str]] = field(default_factory=Counter)
    cpu_s: dict[str, float] = field(default_factory=dict)  # threads alive at the end of the window
    process_cpu_s: float = 0.0  # every thread, those that ended meanwhile included

    def stage_s(self) -> dict[str, float]:
        out: Counter[str] = Counter()
        for (_, stage), n in self.samples.items():
            out[stage] += n
        return {k: n / self.rate for k, n in out.items()}

    def thread_s(self) -> dict[str, float]:
        out: Counter[str] = Counter()
        for (thread, _), n in self.samples.items():
            out[thread] += n
        return {k: n / self.rate for k, n in out.items()}


def _stage(frames: list[str]) -> str:
    for frame in reversed(frames):
        for stage, pattern in STAGES:
            if re.search(pattern, frame):
                return stage
    return "other Python"


def _thread_name(name: str) -> str:
    return re.sub(r"-\d+$", "-N", name)  # tether-slot-3 -> tether-slot-N


def parse_raw(text: str, rate: int) -> tuple[Profile, dict[int, str]]:
    """py-spy's raw (collapsed) output: ``thread (TID): NAME;frame;frame COUNT`` per line."""
    profile = Profile(rate)
    names: dict[int, str] = {}
    for line in text.splitlines():
        m = re.match(r"thread \((\d+)\): (.*) (\d+)$", line)
        if not m:
            continue
        tid, stack, count = int(m.group(1)), m.group(2), int(m.group(3))
        name, *frames = stack.split(";")
        names[tid] = _thread_name(name)
        profile.samples[(names[tid], _stage(frames))] += count
    return profile, names


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) of ``pid``, threads that have ended included."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of each thread of ``pid``."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the thread ended meanwhile
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / tick
    return out


class ProfileRun:
    """``with ProfileRun(pid, rate) as run: ...`` then ``run.profile``: what the server did meanwhile."""

    def __init__(self, pid: int, rate: int = 200) -> None:
        spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        if not Path(spy).exists():
            raise SystemExit("py-spy is not installed: .venv/bin/pip install -e '.[bench]'")
        self.pid, self.rate, self._spy = pid, rate, spy
        self._out = self.raw = Path(tempfile.mkdtemp()) / "raw.txt"  # py-spy's own output, kept
        self.profile = Profile(rate)

    def __enter__(self) -> ProfileRun:
        self._cpu = thread_cpu(self.pid)
        self._process_cpu = process_cpu(self.pid)
        cmd = [self._spy, "record", "--pid", str(self.pid), "--format", "raw", "--threads", "--nonblocking"]
        cmd += ["--rate", str(self.rate), "--output", str(self._out)]
        self._proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return self

    def __exit__(self, *exc: object) -> None:
        after, total = thread_cpu(self.pid), process_cpu(self.pid)
        self._proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        self._proc.wait(timeout=60)
        profile, names = parse_raw(self._out.read_text() if self._out.exists() else "", self.rate)
        for tid, seconds in after.items():
            name = names.get(tid, "llama.cpp worker threads")
            spent = seconds - self._cpu.get(tid, 0.0)
            profile.cpu_s[name] = profile.cpu_s.get(name, 0.0) + spent
        profile.process_cpu_s = total - self._process_cpu
        self.profile = profile
