"""``zkconsumer perf``'s measurement: throughput as Kafka's ``kafka.tools.ConsumerPerformance --zookeeper`` measures it.

:func:`run_perf` joins a group with a :class:`~zkconsumer.connector.ZookeeperConsumerConnector`,
creates ``threads`` streams of one topic, waits ``warmup_ms`` (Kafka's tool
sleeps one second after creating its streams), then starts the clock and
consumes on one thread per stream until ``messages`` messages were handed out
in total. The clock stops at the N-th message; if the topic runs dry first,
iteration ends after ``consumer.timeout.ms`` of silence and, as Kafka's tool
does, that wait is taken off the elapsed time.

Counting is Kafka's: ``bytes`` is the total length of the message *values*
(``messageAndMetadata.message.length``), and MB are MiB (bytes / 2**20).

With ``batch=True`` the streams are consumed with :meth:`KafkaStream.batches`
(Arrow record batches); the batch holding the N-th message is counted up to it.

The result is a dict (what ``zkconsumer perf`` prints as JSON)::

    messages, bytes, mb, seconds, msgs_per_sec, mb_per_sec,  # the measured window
    seconds_since_streams,        # from create_message_streams() returning to the N-th message
    cpu_seconds,                  # this process's CPU time during the measured window
    peak_rss_mb,                  # this process's peak resident set size so far
    rss_mb_samples,               # RSS every rss_interval_s during the window (if asked)
    start_time, end_time,         # wall clock, ISO 8601
    topic, group, threads, batch, accelerated, timed_out, warmup_ms
"""

from __future__ import annotations

import datetime
import functools
import itertools
import resource
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional

from ..config import ConsumerConfig
from ..consumer.stream import KafkaStream
from ..errors import ConsumerTimeoutError
from ..threads import ShutdownableThread
from ..wire.messageset import ACCELERATED

__all__ = ["run_perf", "kafka_style_lines", "current_rss_mb", "peak_rss_mb"]

_MIB = 1024.0 * 1024.0


def current_rss_mb() -> Optional[float]:
    """This process's resident set size now (Linux ``/proc``), ``None`` where unavailable."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * resource.getpagesize() / _MIB


def peak_rss_mb() -> float:
    """This process's peak resident set size so far (``ru_maxrss``)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / _MIB if sys.platform == "darwin" else peak / 1024.0


class _Counter:
    """Messages and value bytes consumed by all threads; records when the N-th message was reached."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.tickets = itertools.count()  # next() is atomic under the GIL: one ticket per message
        self.lock = threading.Lock()
        self.messages = 0
        self.bytes = 0
        self.reached_at: Optional[float] = None
        self.done = threading.Event()

    def add(self, messages: int, nbytes: int) -> None:
        with self.lock:
            self.messages += messages
            self.bytes += nbytes
            if self.messages >= self.target and self.reached_at is None:
                self.reached_at = time.perf_counter()
                self.done.set()


def _consume_messages(stream: KafkaStream, counter: _Counter, single: bool) -> None:
    """Iterate ``stream`` until the counter's target is reached; as lean as a Python loop gets."""
    target = counter.target
    n = nbytes = 0
    try:
        if single:  # one stream: plain local counting
            if target > 0:
                for m in stream:
                    value = m[4]
                    if value is not None:
                        nbytes += len(value)
                    n += 1
                    if n >= target:
                        break
        else:  # several streams: a shared ticket per message stops all of them at exactly N
            tickets = counter.tickets
            for m in stream:
                if next(tickets) >= target:
                    break
                value = m[4]
                if value is not None:
                    nbytes += len(value)
                n += 1
    except ConsumerTimeoutError:
        pass
    finally:
        counter.add(n, nbytes)


def _consume_batches(stream: KafkaStream, counter: _Counter, max_rows: Optional[int]) -> None:
    from ..consumer.arrow import value_bytes

    target = counter.target
    try:
        for batch in stream.batches(max_rows):
            with counter.lock:
                left = target - counter.messages
                if left <= 0:
                    break
                if batch.num_rows > left:
                    batch = batch.slice(0, left)
            counter.add(batch.num_rows, value_bytes(batch))
            if counter.done.is_set():
                break
    except ConsumerTimeoutError:
        pass


def _iso(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch).isoformat(timespec="milliseconds")


def run_perf(config: ConsumerConfig, topic: str, messages: int, threads: int = 1, batch: bool = False,
             warmup_ms: int = 1000, max_batch_rows: Optional[int] = None,
             rss_interval_s: Optional[float] = None,
             on_streams: Optional[Callable[[List[KafkaStream]], None]] = None) -> Dict[str, Any]:
    """Consume ``messages`` messages of ``topic`` as a member of ``config``'s group; see the module docstring.

    ``on_streams(streams)``, if given, is called once the streams exist (before
    the warm-up), e.g. to watch their ``delivered`` counters for progress.
    """
    from ..connector import ZookeeperConsumerConnector

    if messages < 1 or threads < 1:
        raise ValueError("messages and threads must be >= 1")
    counter = _Counter(messages)
    samples: List[float] = []
    timed_out = False
    with ZookeeperConsumerConnector(config) as connector:
        streams = connector.create_message_streams({topic: threads})[topic]
        streams_at = time.perf_counter()
        if on_streams is not None:
            on_streams(list(streams))
        if warmup_ms > 0:
            time.sleep(warmup_ms / 1000.0)
        sampler: Optional[ShutdownableThread] = None
        if rss_interval_s:
            def sample() -> None:
                assert sampler is not None
                while not sampler.wait(rss_interval_s):
                    rss = current_rss_mb()
                    if rss is not None:
                        samples.append(round(rss, 1))
            sampler = ShutdownableThread("zkconsumer-perf-rss", sample)
        start_wall, start, cpu_start = time.time(), time.perf_counter(), time.process_time()
        if sampler is not None:
            sampler.start()
        if batch:
            workers = [ShutdownableThread(f"zkconsumer-perf-{i}", functools.partial(
                _consume_batches, s, counter, max_batch_rows)) for i, s in enumerate(streams)]
        else:
            workers = [ShutdownableThread(f"zkconsumer-perf-{i}", functools.partial(
                _consume_messages, s, counter, len(streams) == 1)) for i, s in enumerate(streams)]
        if len(workers) == 1:
            workers[0].run()  # in this thread: no extra thread competing for the GIL
            workers = []
        else:
            for w in workers:
                w.start()
            for w in workers:  # until all ran dry, or the N-th message (the others end at shutdown)
                while w.is_alive() and not counter.done.is_set():
                    w.join(0.05)
        end = counter.reached_at
        if end is None:  # ran dry: every stream waited consumer.timeout.ms at the end (Kafka's tool subtracts it)
            timed_out = True
            end = time.perf_counter() - max(0, config.consumer_timeout_ms) / 1000.0
        cpu = time.process_time() - cpu_start
        if sampler is not None:
            sampler.stop()
    for w in workers:  # the connector's shutdown ended their streams
        w.join()
    seconds = max(end - start, 1e-9)
    mb = counter.bytes / _MIB
    return {
        "messages": counter.messages,
        "bytes": counter.bytes,
        "mb": round(mb, 4),
        "seconds": round(seconds, 4),
        "msgs_per_sec": round(counter.messages / seconds, 1),
        "mb_per_sec": round(mb / seconds, 4),
        "seconds_since_streams": round(end - streams_at, 4),
        "cpu_seconds": round(cpu, 3),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "rss_mb_samples": samples,
        "start_time": _iso(start_wall),
        "end_time": _iso(start_wall + seconds),
        "topic": topic,
        "group": config.group_id,
        "threads": threads,
        "batch": batch,
        "accelerated": ACCELERATED,
        "timed_out": timed_out,
        "warmup_ms": warmup_ms,
    }


def kafka_style_lines(result: Dict[str, Any]) -> List[str]:
    """ConsumerPerformance's header and summary line for ``result``."""
    return [
        "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec",
        f"{result['start_time']}, {result['end_time']}, {result['mb']:.4f}, {result['mb_per_sec']:.4f}, "
        f"{result['messages']}, {result['msgs_per_sec']:.4f}",
    ]
