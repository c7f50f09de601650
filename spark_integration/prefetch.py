"""Read ahead: run an iterator in a background thread, a bounded number of items ahead of its consumer.

The executor side of the ``zkconsumer`` source uses it so that the next fetch
from Kafka is in flight while Spark takes the previous record batch: without
it, each task waits for the broker, then Spark waits for the task.

Contract of :func:`prefetched`:

* yields exactly the items of ``items``, in order (nothing lost, nothing
  repeated); an exception raised by ``items`` is re-raised in the consumer
  after the items before it, with its traceback;
* at most ``depth`` items wait in the queue, plus the one the producer thread
  is making: memory stays bounded however slow the consumer is;
* when the consumer stops early (``close()`` of the generator, or an
  exception thrown into it), ``cancel`` is called to unblock a producer
  waiting on I/O, and the thread is joined within ``join_timeout`` seconds
  (a ``RuntimeError`` if it did not end by then, so a leaked thread is never
  silent); ``items`` is then closed in its own thread;
* the producer thread is a daemon named ``name`` and never outlives the
  generator's end by more than ``join_timeout``.
"""

from __future__ import annotations

import queue
import sys
import threading
from types import TracebackType
from typing import Callable, Iterator, List, Optional, TypeVar, Union

__all__ = ["prefetched"]

T = TypeVar("T")

_DONE = object()


class _Failure:
    """An exception raised by the producer, carried to the consumer."""

    def __init__(self, error: BaseException, tb: Optional[TracebackType]) -> None:
        self.error, self.tb = error, tb


def prefetched(items: Iterator[T], depth: int = 1, *, cancel: Callable[[], None] = lambda: None,
               join_timeout: float = 30.0, name: str = "zkconsumer-prefetch") -> Iterator[T]:
    """``items`` read ahead by up to ``depth`` items in a background thread; see the module docstring.

    >>> list(prefetched(iter(range(5)), depth=2))
    [0, 1, 2, 3, 4]
    """
    if depth < 1:
        raise ValueError(f"depth must be >= 1, not {depth}")
    slots: "queue.Queue[Union[T, _Failure, object]]" = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def offer(item: Union[T, _Failure, object]) -> bool:
        """Put ``item`` unless the consumer stopped; False if it did."""
        while not stop.is_set():
            try:
                slots.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not offer(item):
                    return
            offer(_DONE)
        except BaseException as error:  # noqa: BLE001 - handed to the consumer, which re-raises it
            offer(_Failure(error, sys.exc_info()[2]))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:  # noqa: BLE001 - the consumer already has the outcome; nothing to add
                    pass

    thread = threading.Thread(target=produce, name=name, daemon=True)
    thread.start()
    finished = False
    try:
        while True:
            item = slots.get()
            if item is _DONE:
                finished = True
                return
            if isinstance(item, _Failure):
                finished = True
                raise item.error.with_traceback(item.tb)
            yield item  # type: ignore[misc]
    finally:
        stop.set()
        if not finished:
            cancel()
        _drain(slots)
        thread.join(join_timeout)
        if thread.is_alive():
            raise RuntimeError(f"the read-ahead thread {name!r} did not end within {join_timeout:.0f}s")


def _drain(slots: "queue.Queue[object]") -> List[object]:
    got: List[object] = []
    while True:
        try:
            got.append(slots.get_nowait())
        except queue.Empty:
            return got

