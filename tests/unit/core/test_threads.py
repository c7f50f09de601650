"""The one thread lifecycle (``zkconsumer.threads``): start, request_stop, bounded join, stop; ParallelStops."""

from __future__ import annotations

import threading
import time
from typing import List

import pytest

from zkconsumer.threads import THREADS, ParallelStops, ShutdownableThread


def test_stop_wakes_the_body_and_joins() -> None:
    ticks: List[int] = []
    thread: ShutdownableThread

    def body() -> None:
        while not thread.wait(3600):
            ticks.append(1)

    thread = ShutdownableThread("zkconsumer-test-1", body)
    assert thread.name == "zkconsumer-test-1" and not thread.stopping
    thread.start()
    assert thread.is_alive()
    assert thread.stop(10.0)
    assert thread.stopping and not thread.is_alive() and ticks == []
    assert thread.stop(10.0)  # idempotent


def test_stop_before_start_returns_at_once_and_a_later_start_ends_at_once() -> None:
    ran = threading.Event()
    thread = ShutdownableThread("zkconsumer-test-2", lambda: ran.set() if thread.stopping else None)
    assert thread.stop(0.0)
    thread.start()
    thread.join(10.0)
    assert ran.is_set() and not thread.is_alive()


def test_request_stop_calls_wake_and_does_not_join() -> None:
    woken = threading.Event()
    release = threading.Event()
    thread = ShutdownableThread("zkconsumer-test-3", lambda: release.wait(10.0), wake=woken.set)
    thread.start()
    thread.request_stop()
    assert woken.is_set() and thread.is_alive()
    release.set()
    assert thread.stop(10.0)


def test_stop_from_the_thread_itself_does_not_join() -> None:
    results: List[bool] = []
    thread = ShutdownableThread("zkconsumer-test-4", lambda: results.append(thread.stop(10.0)))
    thread.start()
    thread.join(10.0)
    assert results == [False] and not thread.is_alive()


def test_a_bounded_join_returns_with_the_thread_still_running() -> None:
    release = threading.Event()
    thread = ShutdownableThread("zkconsumer-test-5", lambda: release.wait(10.0))
    thread.start()
    assert not thread.stop(0.01)  # the body ignores the request until released
    release.set()
    assert thread.stop(10.0)


def test_do_work_runs_in_a_loop_until_stopping() -> None:
    class Counter(ShutdownableThread):
        def __init__(self) -> None:
            super().__init__("zkconsumer-test-6")
            self.rounds = 0

        def do_work(self) -> None:
            self.rounds += 1
            if self.rounds == 3:
                self.request_stop()

    counter = Counter()
    counter.start()
    counter.join(10.0)
    assert counter.rounds == 3 and not counter.is_alive()


def test_the_runtime_starts_a_named_task() -> None:
    names: List[str] = []
    task = THREADS.start(lambda: names.append(threading.current_thread().name), "zkconsumer-test-7")
    task.join(10.0)
    assert names == ["zkconsumer-test-7"] and not task.is_current()


def test_parallel_stops_run_at_once_and_report_those_still_running(caplog: pytest.LogCaptureFixture) -> None:
    release = threading.Event()
    stops = ParallelStops("c1")
    stops.run("quick", lambda: None)
    stops.run("slow", lambda: release.wait(10.0))
    stops.run("broken", lambda: 1 / 0)
    assert stops.wait("quick", time.monotonic() + 10.0)
    assert stops.wait("absent", time.monotonic())
    assert stops.join(0.01) == ["slow"]
    release.set()
    assert stops.join(10.0) == []
    assert "stopping broken failed" in caplog.text
