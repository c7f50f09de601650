"""spark_integration.prefetch: read-ahead in a thread keeps order, errors and bounds, and ends its thread."""

from __future__ import annotations

import threading
import time
from typing import Iterator, List

import pytest

from spark_integration.prefetch import prefetched


def threads_named(name: str) -> List[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name]


def test_item3_read_ahead_yields_every_item_in_order() -> None:
    assert list(prefetched(iter(range(1000)), depth=2, name="t-order")) == list(range(1000))
    assert not threads_named("t-order")


def test_item3_read_ahead_reraises_the_producers_error_after_the_items_before_it() -> None:
    def items() -> Iterator[int]:
        yield 1
        yield 2
        raise KeyError("boom")

    got: List[int] = []
    with pytest.raises(KeyError, match="boom"):
        for item in prefetched(items(), name="t-error"):
            got.append(item)
    assert got == [1, 2]
    assert not threads_named("t-error")


def test_item3_read_ahead_stays_within_its_depth_of_a_slow_consumer() -> None:
    made: List[int] = []

    def items() -> Iterator[int]:
        for i in range(10):
            made.append(i)
            yield i

    it = prefetched(items(), depth=2, name="t-depth")
    assert next(it) == 0
    time.sleep(0.3)  # the producer runs ahead as far as it may
    assert len(made) <= 1 + 2 + 1  # the one consumed, `depth` queued, one being offered
    assert list(it) == list(range(1, 10))


def test_item3_closing_early_cancels_a_blocked_producer_and_joins_its_thread() -> None:
    unblock = threading.Event()
    closed = threading.Event()

    def items() -> Iterator[int]:
        try:
            yield 0
            unblock.wait(10)  # a fetch blocked on the network, until cancel() aborts it
            raise ConnectionError("aborted")
        finally:
            closed.set()

    it = prefetched(items(), cancel=unblock.set, join_timeout=5, name="t-cancel")
    assert next(it) == 0
    started = time.monotonic()
    it.close()
    assert time.monotonic() - started < 5
    assert closed.is_set() and not threads_named("t-cancel")


def test_item3_a_producer_that_does_not_end_within_the_bound_is_reported() -> None:
    release = threading.Event()

    def items() -> Iterator[int]:
        yield 0
        release.wait(10)  # ignores cancel()
        yield 1

    it = prefetched(items(), join_timeout=0.2, name="t-stuck")
    assert next(it) == 0
    with pytest.raises(RuntimeError, match="did not end"):
        it.close()
    release.set()
    for thread in threads_named("t-stuck"):
        thread.join(5)
