"""Chaos run observers: committed offsets, partition ownership and member logs, read from outside the group."""

from __future__ import annotations

import threading
import time
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import ZnodeStat

from benchmarks.chaos.report import Regression
from benchmarks.chaos.settings import ZK_UNAVAILABLE, ChaosError
from zkconsumer.testing.probes import zookeeper_command


class OffsetMonitor:
    """Watches a group's committed offsets for one topic: regressions and stalls.

    Observations come from a 100 ms poll and from a data watch per partition;
    both carry the node's version, and only versions newer than the last one
    seen count, so the two sources never reorder each other. ``pending_end(p)``
    says how far partition ``p`` has data (the producer's acknowledged end) for
    the stall measure.
    """

    def __init__(self, client: KazooClient, group: str, topic: str, partitions: int,
                 pending_end: Callable[[int], int], interval_s: float = 0.1,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._paths = {p: f"/consumers/{group}/offsets/{topic}/{p}" for p in range(partitions)}
        self._pending_end = pending_end
        self._interval = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._started_at = clock()
        self._values: Dict[int, int] = {}
        self._versions: Dict[int, int] = {}
        self._first_version: Dict[int, int] = {}
        self._last_change: Dict[int, float] = {}
        self._pending_since: Dict[int, Optional[float]] = {}
        self.seen_writes = 0
        self.malformed = 0
        self.regressions: List[Regression] = []
        self.max_stall: Dict[int, float] = {p: 0.0 for p in range(partitions)}
        self._thread = threading.Thread(target=self._run, name="chaos-offset-monitor", daemon=True)

    def start(self) -> None:
        self._started_at = self._clock()
        for partition, path in self._paths.items():
            self._client.DataWatch(path, self._watcher(partition))
        self._thread.start()

    def _watcher(self, partition: int) -> Callable[[Optional[bytes], Optional[ZnodeStat]], Optional[bool]]:
        def on_change(data: Optional[bytes], stat: Optional[ZnodeStat]) -> Optional[bool]:
            if self._stopped.is_set():
                return False
            self._observe(partition, data, stat)
            return None
        return on_change

    def _observe(self, partition: int, data: Optional[bytes], stat: Optional[ZnodeStat]) -> None:
        if data is None or stat is None:
            return
        with self._lock:
            last = self._versions.get(partition)
            if last is not None and stat.version <= last:
                return
            self._versions[partition] = stat.version
            self._first_version.setdefault(partition, stat.version)
            self.seen_writes += 1
            try:
                value = int(data.decode("ascii"))
            except ValueError:
                self.malformed += 1
                return
            before = self._values.get(partition)
            if before is not None and value < before:
                self.regressions.append(Regression(round(self._clock() - self._started_at, 2), partition,
                                                   before, value))
            if before is None or value != before:
                self._values[partition] = value
                self._last_change[partition] = self._clock()

    def _run(self) -> None:
        while not self._stopped.wait(self._interval):
            for partition, path in self._paths.items():
                try:
                    data, stat = self._client.get(path)
                except NoNodeError:
                    continue
                except Exception:  # a connection hiccup: the next tick reads again
                    break
                self._observe(partition, data, stat)
            self._track_stalls()

    def _track_stalls(self) -> None:
        now = self._clock()
        for partition in self._paths:
            end = self._pending_end(partition)
            with self._lock:
                committed = self._values.get(partition, 0)
                since = self._pending_since.get(partition)
                if committed >= end:
                    self._pending_since[partition] = None
                    continue
                if since is None:
                    since = self._pending_since[partition] = now
                stalled_from = max(since, self._last_change.get(partition, since))
                self.max_stall[partition] = max(self.max_stall[partition], now - stalled_from)

    def committed(self) -> Dict[int, int]:
        """The latest committed offset seen per partition."""
        with self._lock:
            return dict(self._values)

    def writes(self) -> Tuple[int, int]:
        """(writes observed, writes made) since monitoring began, from node versions."""
        with self._lock:
            total = sum(self._versions[p] - self._first_version[p] + 1 for p in self._versions)
            return self.seen_writes, total

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(5)


def zookeeper_serving(port: int) -> bool:
    """Whether the ZooKeeper server on 127.0.0.1:``port`` answers ``srvr``."""
    try:
        return "Mode: " in zookeeper_command("127.0.0.1", port, "srvr", timeout=1.0)
    except OSError:
        return False


def read_committed(client: KazooClient, group: str, topic: str, partitions: int) -> Dict[int, Optional[int]]:
    """The committed offsets in ZooKeeper right now (None where there is none)."""
    result: Dict[int, Optional[int]] = {}
    for p in range(partitions):
        try:
            result[p] = int(client.get(f"/consumers/{group}/offsets/{topic}/{p}")[0].decode("ascii"))
        except (NoNodeError, ValueError):
            result[p] = None
    return result


class OwnershipMonitor:
    """Samples a group's registrations and partition owners: ownerless intervals, and when it settled.

    Every ``interval_s`` it reads ``/consumers/<g>/ids`` and the owner nodes of
    ``topic`` (each read bounded by ``read_timeout_s``; a sample that cannot be
    read is skipped and changes nothing) and feeds them to :meth:`record`,
    which holds all the logic (definitions in the module docstring).
    ``has_live_members`` says whether the group has live member processes;
    :meth:`fault_ended` marks the end of a fault of the schedule.
    """

    def __init__(self, client: KazooClient, group: str, topic: str, partitions: int,
                 has_live_members: Callable[[], bool], interval_s: float = 0.1, read_timeout_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._ids_path = f"/consumers/{group}/ids"
        self._owners_path = f"/consumers/{group}/owners/{topic}"
        self._partitions = partitions
        self._has_live_members = has_live_members
        self._interval = interval_s
        self._read_timeout = read_timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._started_at = clock()
        self._ownerless_since: Dict[int, Optional[float]] = {p: None for p in range(partitions)}
        self._longest = 0.0
        self._longest_detail = ""
        self._complete_since: Optional[float] = None
        self._last_fault_end: Optional[float] = None
        self.samples = 0
        self.skipped = 0
        self._owners_cache: Optional[Tuple[int, Dict[int, str]]] = None
        self._thread = threading.Thread(target=self._run, name="chaos-ownership-monitor", daemon=True)

    def start(self) -> None:
        self._started_at = self._clock()
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(5 + 3 * self._read_timeout)

    def fault_ended(self) -> None:
        """A fault of the schedule has just ended (settling is measured from the last one)."""
        with self._lock:
            self._last_fault_end = self._clock()

    def _run(self) -> None:
        next_at = self._clock()
        while True:
            next_at = max(next_at + self._interval, self._clock())
            if self._stopped.wait(max(0.0, next_at - self._clock())):
                return
            sample = self._read()
            if sample is None:
                with self._lock:
                    self.skipped += 1
                continue
            self.record(self._clock(), sample[0], sample[1], self._has_live_members())

    def _read(self) -> Optional[Tuple[List[str], Dict[int, str]]]:
        """(registered member ids, partition -> owner) now, or None if ZooKeeper did not answer in time."""
        client, timeout = self._client, self._read_timeout
        try:
            ids_reply = client.get_children_async(self._ids_path)
            owned_reply = client.get_children_async(self._owners_path, include_data=True)
            try:
                registered = list(ids_reply.get(timeout=timeout))
            except NoNodeError:
                registered = []
            try:
                children, stat = owned_reply.get(timeout=timeout)
            except NoNodeError:
                children, stat = [], None
            # the owner nodes are only read again when a child was created or deleted since the
            # last read (the parent's cversion changed): a node's value never changes in place
            if stat is not None and self._owners_cache is not None and stat.cversion == self._owners_cache[0]:
                return registered, dict(self._owners_cache[1])
            replies = {int(c): client.get_async(f"{self._owners_path}/{c}") for c in children if c.isdigit()}
            owners: Dict[int, str] = {}
            for partition, reply in replies.items():
                try:
                    owners[partition] = reply.get(timeout=timeout)[0].decode("utf-8", "replace")
                except NoNodeError:  # released between the two reads: ownerless now
                    continue
            complete_read = len(owners) == len(replies)
            self._owners_cache = (stat.cversion, dict(owners)) if stat is not None and complete_read else None
            return registered, owners
        except ZK_UNAVAILABLE:
            return None
        except Exception:  # anything else unexpected from the client: skip the sample too
            return None

    def record(self, now: float, registered: Sequence[str], owners: Mapping[int, str], live: bool) -> None:
        """Account one sample taken at ``now``.

        >>> m = OwnershipMonitor(None, "g", "t", 2, lambda: True, clock=lambda: 0.0)  # type: ignore[arg-type]
        >>> m.record(1.0, ["g_a"], {0: "g_a-0", 1: "g_a-0"}, True)
        >>> m.record(2.0, ["g_a"], {0: "g_a-0"}, True)
        >>> m.record(4.5, ["g_a"], {0: "g_a-0"}, True)
        >>> m.record(5.0, ["g_a"], {0: "g_a-0", 1: "g_a-0"}, True)
        >>> m.longest_ownerless()
        (2.5, 'partition 1 from 2.0s to 4.5s')
        >>> m.settled_again()
        5.0
        """
        with self._lock:
            self.samples += 1
            for partition in range(self._partitions):
                if partition in owners or not live:
                    self._ownerless_since[partition] = None
                    continue
                since = self._ownerless_since[partition]
                if since is None:
                    since = self._ownerless_since[partition] = now
                if now - since > self._longest:
                    self._longest = now - since
                    self._longest_detail = (f"partition {partition} from {since - self._started_at:.1f}s "
                                            f"to {now - self._started_at:.1f}s")
            complete = len(owners) == self._partitions and all(
                any(owner.startswith(member + "-") for member in registered) for owner in owners.values())
            if not complete:
                self._complete_since = None
            elif self._complete_since is None:
                self._complete_since = now

    def longest_ownerless(self) -> Tuple[float, str]:
        """(seconds, which partition when) of the longest ownerless interval seen."""
        with self._lock:
            return round(self._longest, 1), self._longest_detail

    def settled_again(self) -> Optional[float]:
        """Seconds from the last fault's end to the final complete run of samples; None if not complete now."""
        with self._lock:
            if self._complete_since is None:
                return None
            reference = self._last_fault_end if self._last_fault_end is not None else self._started_at
            return round(max(0.0, self._complete_since - reference), 1)


# ---------------------------------------------------------------------------- the log


class LogReader:
    """Reads partitions of the topic by offset range with kafka-python, independent of any group."""

    def __init__(self, bootstrap_servers: str, topic: str, partitions: int) -> None:
        from kafka import KafkaConsumer, TopicPartition

        self._tps = {p: TopicPartition(topic, p) for p in range(partitions)}
        self._consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, api_version=(0, 9), group_id=None,
                                       enable_auto_commit=False, auto_offset_reset="earliest",
                                       fetch_max_wait_ms=100, max_partition_fetch_bytes=1 << 20)

    def end_offsets(self) -> Dict[int, int]:
        ends = self._consumer.end_offsets(list(self._tps.values()))
        return {p: int(ends[tp]) for p, tp in self._tps.items()}

    def read(self, ranges: Mapping[int, Tuple[int, int]], timeout: float = 120.0) -> Dict[int, List[Tuple[int, str]]]:
        """``(offset, value)`` of every message in ``[start, end)`` of each partition.

        Raises ChaosError if a range cannot be read completely within ``timeout``.
        """
        wanted = {p: r for p, r in ranges.items() if r[0] < r[1]}
        result: Dict[int, List[Tuple[int, str]]] = {p: [] for p in ranges}
        if not wanted:
            return result
        self._consumer.assign([self._tps[p] for p in wanted])
        for p, (start, _end) in wanted.items():
            self._consumer.seek(self._tps[p], start)
        remaining = dict(wanted)
        deadline = time.monotonic() + timeout
        while remaining:
            if time.monotonic() > deadline:
                raise ChaosError(f"could not read the log within {timeout:.0f}s; still missing {remaining}")
            for tp, records in self._consumer.poll(timeout_ms=500).items():
                _start, end = wanted[tp.partition]
                for record in records:
                    if record.offset < end:
                        value = record.value.decode("latin-1") if record.value is not None else "null"
                        result[tp.partition].append((record.offset, value))
            for p in list(remaining):
                if self._consumer.position(self._tps[p]) >= remaining[p][1]:
                    del remaining[p]
        self._consumer.assign([])
        return result

    def close(self) -> None:
        self._consumer.close()


# ---------------------------------------------------------------------------- one side


