"""A fetcher's view of one partition, and the count of its partitions that are not simply fetchable.

:class:`PartitionState` is what a :class:`~zkconsumer.fetch.fetcher_thread.FetcherThread` keeps per
partition. :class:`Hindrances` counts the states that a round cannot simply fetch: those with a
parked chunk, and those stalled or ever delayed. While both counts are zero every partition of the
fetcher is ready, and a round skips its scans over them (issue 44: at a thousand messages a second
each message is its own round, and three scans over every partition cost about a tenth of it).
"""

from __future__ import annotations

import threading
from typing import Optional

from ..structs import TopicPartition
from .handoff import FetchedDataChunk, PartitionTopicInfo

__all__ = ["Hindrances", "PartitionState"]


class PartitionState:
    """A fetcher's view of one partition. ``lock`` is held while its data is processed.

    ``parked`` is the one chunk fetched but not yet queued because the queue was
    full: set and queued by the fetcher thread under ``lock``, dropped under
    ``lock`` when the partition is removed. ``parked``, ``stalled`` and ``delay_until``
    change only through :class:`Hindrances`, which counts them.
    """

    __slots__ = ("info", "tp", "lock", "removed", "stalled", "delay_until", "high_watermark", "parked")

    def __init__(self, info: PartitionTopicInfo) -> None:
        self.info = info
        self.tp: TopicPartition = (info.topic, info.partition)  # an info's topic and partition never change
        self.lock = threading.Lock()
        self.removed = False
        self.stalled = False            # an error chunk was queued or parked; never fetch again
        self.delay_until = 0.0          # time.monotonic() before which not to fetch
        self.high_watermark = -1
        self.parked: Optional[FetchedDataChunk] = None


class Hindrances:
    """How many of one fetcher's current partition states have a parked chunk (:attr:`parked`) and how
    many are stalled or were ever delayed (:attr:`odd`).

    Every method is called with the state's ``lock`` held, so each state's own changes are seen in
    order; the counts have a lock of their own (never held while taking another), so callers may
    hold any of the fetcher's locks. Reading a count needs no lock: both zero means that, as of
    the last change made under a state lock the reader synchronised with, no state is parked,
    stalled or delayed. A round reads them after taking the round lock, and every park is made
    inside a round, so a round never misses a park; an unpark seen late only sends it down the
    slower path that scans, which is always correct.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.parked = 0
        self.odd = 0

    def clear(self) -> bool:
        """No state parked, stalled or delayed: every partition is ready (see the class docstring)."""
        return not (self.parked or self.odd)

    def park(self, st: PartitionState, chunk: FetchedDataChunk) -> None:
        """``chunk`` waits on ``st`` for room in its queue."""
        if st.parked is None:
            with self._lock:
                self.parked += 1
        st.parked = chunk

    def unpark(self, st: PartitionState) -> None:
        """``st``'s parked chunk was queued or dropped."""
        if st.parked is not None:
            st.parked = None
            with self._lock:
                self.parked -= 1

    def stall(self, st: PartitionState) -> None:
        """``st`` is never fetched again (its error chunk is queued or parked)."""
        self._make_odd(st)
        st.stalled = True

    def delay(self, st: PartitionState, until: float) -> None:
        """``st`` is not fetched before ``until`` (``time.monotonic()``)."""
        self._make_odd(st)
        st.delay_until = until

    def forget(self, st: PartitionState) -> None:
        """``st`` left its fetcher (after ``removed`` was set, so nothing parks, stalls or delays it again):
        its parked chunk is dropped and it counts no more."""
        self.unpark(st)
        if st.stalled or st.delay_until:
            with self._lock:
                self.odd -= 1

    def _make_odd(self, st: PartitionState) -> None:
        if not (st.stalled or st.delay_until):
            with self._lock:
                self.odd += 1
