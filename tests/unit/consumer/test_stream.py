"""The fetcher→iterator hand-off: ChunkQueue, PartitionTopicInfo and KafkaStream semantics."""

from __future__ import annotations

import threading
import time
from typing import List, Optional

import pytest

from zkconsumer.consumer.stream import FailureSignal, KafkaStream, MessageAndMetadata
from zkconsumer.errors import ConsumerTimeoutError, MessageSizeTooLargeError, ZkConsumerError
from zkconsumer.fetch.handoff import ChunkQueue, PartitionTopicInfo


def never() -> bool:
    return False


def make(capacity: int = 4, timeout_ms: int = 50, **kw: object):
    queue = ChunkQueue(capacity)
    info = PartitionTopicInfo("t", 0, queue, offset=10, fetch_size=1024)
    stream = KafkaStream(queue, timeout_ms, **kw)  # type: ignore[arg-type]
    return queue, info, stream


def take(stream: KafkaStream, n: int) -> List[MessageAndMetadata]:
    it = iter(stream)
    return [next(it) for _ in range(n)]


def test_messages_come_in_order_and_advance_consumed_offset() -> None:
    _, info, stream = make()
    assert info.enqueue(10, [(10, b"k", b"a"), (11, None, b"b")], never)
    assert info.fetched_offset == 12
    got = take(stream, 2)
    assert got == [MessageAndMetadata("t", 0, 10, b"k", b"a"), MessageAndMetadata("t", 0, 11, None, b"b")]
    assert info.consumed_offset == 12


def test_messages_below_the_consumed_offset_are_never_delivered_twice() -> None:
    queue, info, stream = make()
    info.enqueue(10, [(10, None, b"a"), (11, None, b"b")], never)
    assert [m.offset for m in take(stream, 1)] == [10]
    # The same range fetched again (a re-homed partition) is skipped up to what was handed out.
    queue.put(_chunk(info, 10, [(10, None, b"a"), (11, None, b"b"), (12, None, b"c")]), never)
    assert [m.offset for m in take(stream, 2)] == [11, 12]


def _chunk(info: PartitionTopicInfo, fetch_offset: int, messages):
    from zkconsumer.fetch.handoff import FetchedDataChunk

    return FetchedDataChunk(info, fetch_offset, messages)


def test_timeout_raises_and_the_stream_stays_usable() -> None:
    _, info, stream = make(timeout_ms=30)
    with pytest.raises(ConsumerTimeoutError):
        next(iter(stream))
    info.enqueue(10, [(10, None, b"a")], never)
    assert next(iter(stream)).message == b"a"


def test_shutdown_sentinel_ends_iteration_for_good() -> None:
    queue, info, stream = make(timeout_ms=-1)
    info.enqueue(10, [(10, None, b"a")], never)
    queue.put_shutdown()
    assert [m.message for m in stream] == [b"a"]
    assert list(stream) == []


def test_clear_drops_the_chunk_being_iterated() -> None:
    _, info, stream = make(timeout_ms=30)
    info.enqueue(10, [(10, None, b"a"), (11, None, b"b")], never)
    assert next(iter(stream)).offset == 10
    stream.clear()
    with pytest.raises(ConsumerTimeoutError):
        next(iter(stream))
    assert info.consumed_offset == 11


def test_a_chunk_taken_while_a_rebalance_clears_is_dropped() -> None:
    class RacingQueue(ChunkQueue):
        stream: Optional[KafkaStream] = None

        def get(self, timeout):  # type: ignore[override]
            item = super().get(timeout)
            if item is not None and self.stream is not None:
                # The rebalancer clears between the take and the install.
                self.clear()
                self.stream.clear()
                self.stream = None
            return item

    queue = RacingQueue(4)
    info = PartitionTopicInfo("t", 0, queue, offset=0, fetch_size=1024)
    stream = KafkaStream(queue, 30)
    queue.stream = stream
    info.enqueue(0, [(0, None, b"stale")], never)
    with pytest.raises(ConsumerTimeoutError):
        next(iter(stream))
    assert info.consumed_offset == 0


def test_an_error_chunk_is_raised_in_order() -> None:
    _, info, stream = make()
    info.enqueue(10, [(10, None, b"a")], never)
    info.enqueue_error(11, MessageSizeTooLargeError("t", 0, 11, 1024), never)
    it = iter(stream)
    assert next(it).offset == 10
    with pytest.raises(MessageSizeTooLargeError, match="topic t partition 0 at offset 11"):
        next(it)


def test_decoders_apply_to_key_and_value() -> None:
    _, info, stream = make(key_decoder=lambda b: b and b.decode(), value_decoder=lambda b: int(b))
    info.enqueue(10, [(10, b"k", b"42")], never)
    m = next(iter(stream))
    assert (m.key, m.message) == ("k", 42)


def test_a_background_failure_wakes_a_blocked_iterator() -> None:
    queue = ChunkQueue(2)
    failure = FailureSignal()
    stream = KafkaStream(queue, -1, failure=failure)
    raised: List[BaseException] = []

    def consume() -> None:
        try:
            next(iter(stream))
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            raised.append(exc)

    t = threading.Thread(target=consume)
    t.start()
    time.sleep(0.1)
    failure.set(RuntimeError("fetcher died"))
    queue.wake_consumers()
    t.join(2)
    assert not t.is_alive()
    # Handed to the application as a ZkConsumerError, the original as its cause.
    assert [type(e).__name__ for e in raised] == ["BackgroundThreadError"]
    assert isinstance(raised[0], ZkConsumerError) and str(raised[0].__cause__) == "fetcher died"


def test_a_full_queue_blocks_the_fetcher_until_aborted() -> None:
    queue = ChunkQueue(1)
    info = PartitionTopicInfo("t", 0, queue, offset=0, fetch_size=1024)
    assert info.enqueue(0, [(0, None, b"a")], never)
    stop = threading.Event()
    result: List[bool] = []
    t = threading.Thread(target=lambda: result.append(info.enqueue(1, [(1, None, b"b")], stop.is_set)))
    t.start()
    time.sleep(0.1)
    assert t.is_alive()  # back-pressure
    stop.set()
    queue.wake_producers()
    t.join(2)
    assert result == [False]
    assert info.fetched_offset == 1  # the aborted chunk did not advance the fetch position


def test_a_stale_fetch_is_not_queued() -> None:
    queue, info, _ = make()
    info.reset_offsets(100)
    assert not info.enqueue(10, [(10, None, b"a")], never)
    assert len(queue) == 0
    assert (info.fetched_offset, info.consumed_offset) == (100, 100)


def test_a_chunk_queued_after_a_clear_reaches_an_iterator_that_waited_across_it() -> None:
    """Regression: a waiting iterator must not mistake post-rebalance data for stale data."""
    queue = ChunkQueue(4)
    stream = KafkaStream(queue, 2000)
    got: List[MessageAndMetadata] = []
    t = threading.Thread(target=lambda: got.append(next(iter(stream))))
    t.start()
    time.sleep(0.1)  # the iterator is now waiting in queue.get
    queue.clear()  # a rebalance (or session loss) clears ...
    stream.clear()
    info = PartitionTopicInfo("t", 0, queue, offset=5, fetch_size=1024)
    info.enqueue(5, [(5, None, b"fresh")], never)  # ... and the new fetcher delivers
    t.join(5)
    assert [m.message for m in got] == [b"fresh"]


def test_messages_the_application_keeps_never_change() -> None:
    """The C iterator refills a message tuple that only it still references; one that anybody holds stays as it was."""
    _, info, stream = make(timeout_ms=30)
    expected = [MessageAndMetadata("t", 0, 10 + i, None, b"v%d" % i) for i in range(50)]
    info.enqueue(10, [(m.offset, m.key, m.message) for m in expected], never)
    kept = []
    for i, m in enumerate(stream):
        assert m == expected[i] and hash(m) == hash(expected[i])
        if i % 3 == 0:
            kept.append(m)  # some kept, the others dropped (and so recyclable)
        if i == len(expected) - 1:
            break
    assert kept == expected[::3]
    assert all(type(m) is MessageAndMetadata for m in kept)


def test_decoded_messages_are_new_tuples_each_time() -> None:
    """With decoders (whose results may be large or have finalizers) no message tuple is recycled."""
    import gc
    import weakref

    class Decoded:
        def __init__(self, value: Optional[bytes]) -> None:
            self.value = value

    _, info, stream = make(timeout_ms=30, value_decoder=Decoded)
    info.enqueue(10, [(10, None, b"a"), (11, None, b"b"), (12, None, b"c")], never)
    it = iter(stream)
    first = weakref.ref(next(it).message)
    gc.collect()
    assert first() is None  # dropped with its message, not kept alive by the iterator
    assert [next(it).message.value for _ in range(2)] == [b"b", b"c"]
