"""benchmarks/_profile.py: py-spy's collapsed stacks folded into the per-token stages bench_stream reports."""

from __future__ import annotations

import os
import threading

from benchmarks._profile import parse_raw, process_cpu, thread_cpu

RAW = """\
thread (101): tether-batch;Thread.run (threading.py:982);BatchRunner._run (tether/engine/batch/runner.py:120);BatchRunner._fill_and_run (tether/engine/batch/runner.py:300);BatchContext.decode (tether/engine/batch/context.py:90) 40
thread (101): tether-batch;Thread.run (threading.py:982);BatchRunner._advance (tether/engine/batch/runner.py:340);BatchRunner._sample (tether/engine/batch/runner.py:370);Sampler.pick (tether/engine/batch/sampler.py:45) 3
thread (101): tether-batch;Thread.run (threading.py:982);BatchRunner._sample (tether/engine/batch/runner.py:372);NamesProcessor.__call__ (tether/grammar/constraint.py:50) 2
thread (202): tether-slot-3;Thread.run (threading.py:982);Scheduler._start.<locals>.work (tether/engine/scheduler.py:232);BaseEventLoop.call_soon_threadsafe (asyncio/base_events.py:812);BaseSelectorEventLoop._write_to_self (asyncio/selector_events.py:139) 4
thread (1): MainThread;Runner.run (asyncio/runners.py:118);RequestResponseCycle.send (uvicorn/protocols/http/h11_impl.py:499);_SelectorSocketTransport.write (asyncio/selector_events.py:1057) 5
thread (1): MainThread;Runner.run (asyncio/runners.py:118);BaseEventLoop._run_once (asyncio/base_events.py:1884);EpollSelector.select (selectors.py:468) 6
thread (1): MainThread;Runner.run (asyncio/runners.py:118);route (tether/turns/routing.py:80) 1
not a sample line
"""


def test_each_sample_goes_to_its_innermost_stage_and_its_thread() -> None:
    profile, names = parse_raw(RAW, rate=100)
    assert names == {101: "tether-batch", 202: "tether-slot-N", 1: "MainThread"}
    assert profile.stage_s() == {
        "llama_decode": 0.40,
        "sampling": 0.03,
        "constraint mask": 0.02,
        "handoff to the event loop": 0.04,
        "protocol + SSE write": 0.05,
        "event loop (select, callbacks)": 0.06,
        "routing (stops, format detector)": 0.01,
    }
    assert profile.thread_s() == {"tether-batch": 0.45, "tether-slot-N": 0.04, "MainThread": 0.12}


def test_cpu_time_is_read_per_thread_and_for_the_process() -> None:
    done = threading.Event()

    def spin() -> None:
        while not done.is_set():
            sum(range(10_000))

    before = process_cpu(os.getpid())
    worker = threading.Thread(target=spin)
    worker.start()
    try:
        threads = thread_cpu(os.getpid())
        assert worker.native_id in threads and threading.get_native_id() in threads
        while process_cpu(os.getpid()) - before < 0.05:  # ticks are coarse: wait for a few
            sum(range(10_000))
    finally:
        done.set()
        worker.join()
    assert process_cpu(os.getpid()) - before >= 0.05
