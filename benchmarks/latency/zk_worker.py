"""``python -m benchmarks.latency.zk_worker --zookeeper ZK --topic T [--batch] ...``: zkconsumer's latency.

One member of a new group, one stream; iterates it (``MessageAndMetadata`` per message) or,
with ``--batch``, takes Arrow record batches (``KafkaStream.batches()``: all the messages of a
batch count as delivered when the batch is). The stamps of a batch of at most
:data:`SMALL_BATCH` rows are read one by one with ``struct`` from the value column's buffers, as
the iterator reads each message's; a larger batch's in one numpy step. One numpy step costs about
12 µs whatever the batch's size, more than the library's work for a one-row batch, and a live
stream's batches have one row: the benchmark's own reading would otherwise be counted as the
consumer's CPU.
"""

from __future__ import annotations

import sys
import uuid
from typing import Any, Callable, Dict

from zkconsumer import ConsumerConfig, ConsumerTimeoutError, ZookeeperConsumerConnector

from .settings import ZK_BASE, settings
from .stamps import STAMP, Recorder, now_us, ready, worker_arguments


def main() -> int:
    parser = worker_arguments(__doc__ or "")
    parser.add_argument("--zookeeper", required=True)
    parser.add_argument("--batch", action="store_true")
    args = parser.parse_args()
    props = {"zookeeper.connect": args.zookeeper, "group.id": args.group or f"lat-zk-{uuid.uuid4().hex[:8]}",
             **ZK_BASE, **settings("zkconsumer", args.setting), **dict(p.split("=", 1) for p in args.prop)}
    kind = "zkconsumer-batch" if args.batch else "zkconsumer"
    with ZookeeperConsumerConnector(ConsumerConfig(props)) as connector:
        stream = connector.create_message_streams({args.topic: 1})[args.topic][0]
        t0, t1, deadline = ready(args.window)
        recorder = Recorder(t0, t1, bool(args.trace), lambda: _fetch_counts(connector))
        (_read_batches if args.batch else _read_messages)(stream, recorder, deadline)
    recorder.finish(kind, args.setting, args.trace)
    return 0


def _fetch_counts(connector: ZookeeperConsumerConnector) -> Dict[str, int]:
    """Fetch requests answered and messages fetched so far, over all brokers (the metrics' counters)."""
    brokers = connector.metrics_snapshot()["fetch"].values()
    return {"fetch_requests": sum(b["requests"] for b in brokers), "fetched_messages": sum(b["messages"] for b in brokers)}


def _read_messages(stream: object, recorder: Recorder, deadline: int) -> None:
    unpack, add, it = STAMP.unpack_from, recorder.add, iter(stream)  # type: ignore[call-overload]
    while now_us() < deadline:
        try:
            for m in it:
                now = now_us()
                add(m.partition, unpack(m.message)[0], now)
                if now >= deadline:
                    return
        except ConsumerTimeoutError:
            continue


#: Batches of at most this many rows have their stamps read one by one (see the module docstring).
SMALL_BATCH = 8


def _read_batches(stream: object, recorder: Recorder, deadline: int) -> None:
    while now_us() < deadline:
        try:
            for batch in stream.batches():  # type: ignore[attr-defined]
                now = now_us()
                read_batch(batch, recorder.add, recorder.add_many, now)
                if now >= deadline:
                    return
        except ConsumerTimeoutError:
            continue


def read_batch(batch: Any, add: Callable[[int, int, int], None], add_many: Callable[[int, Any, int], None],
               now: int) -> None:
    """The stamps of ``batch`` (an Arrow record batch of the library's schema), to ``add`` one by one
    (at most :data:`SMALL_BATCH` rows) or to ``add_many`` as a numpy array, all delivered at ``now``.
    ``benchmarks.cpu_split``'s ``batch-read`` reads batches with it too."""
    values = batch.column(4)
    partition = batch.column(1)[0].as_py()
    first, n = values.offset, len(values)
    buffers = values.buffers()
    if n <= SMALL_BATCH:
        offsets, data = memoryview(buffers[1]).cast("i"), buffers[2]
        unpack = STAMP.unpack_from
        for i in range(first, first + n):
            add(partition, unpack(data, offsets[i])[0], now)
    else:
        import numpy as np

        offsets = np.frombuffer(buffers[1], dtype=np.int32)[first:first + n]
        data = np.frombuffer(buffers[2], dtype=np.uint8)
        stamps = data[offsets[:, None] + np.arange(STAMP.size)].copy().view(">i8").ravel().astype(np.int64)
        add_many(partition, stamps, now)


def keep_nothing(partition: int, stamps: Any, now: int) -> None:
    """A recorder for :func:`read_batch` that keeps nothing: the reading is measured, not what is read."""


if __name__ == "__main__":
    sys.exit(main())
