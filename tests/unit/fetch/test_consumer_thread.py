"""zkconsumer.fetch: a consumer waiting on its empty queue runs its fetcher's round on its own thread.

``fetch.on.consumer.thread`` (see ``fetcher_thread.py``): who runs a round, how a stop waits for a
round on a consumer's thread, how a background failure interrupts one, what an exception in one
does, and how a broker that stops answering is bounded by the consumer's deadline and still failed
after ``socket.timeout.ms``. A scripted connection stands in for the broker; the real broker's side
is in tests/integration/test_fetcher.py.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, List, Optional, Sequence

import pytest

from zkconsumer.errors import BrokerUnavailableError
from zkconsumer.fetch.fetcher_thread import FetcherKey, FetcherThread
from zkconsumer.fetch.handoff import ChunkQueue, FetchedDataChunk, PartitionTopicInfo
from zkconsumer.fetch.rounds import ANSWER_GRACE_MS, HANDBACK_S
from zkconsumer.wire.protocol import FetchPartition, FetchPartitionResponse, FetchResponse

from .test_fetcher import encode, make_config
from .walking import walked_via_fetch


class ScriptedConnection:
    """One broker's connection: each fetch answers the messages appended since, after ``on_fetch``.

    ``on_fetch(calls)`` runs first in every fetch, on the fetching thread (it may block or raise).
    Records which thread sent each fetch, the broker wait it asked for and its socket bound. While
    ``hung`` is set the broker answers nothing: a fetch times out after its bound, as a real
    connection does (``socket_timeout_ms`` when it has none), or is answered once ``hung`` is
    cleared before that. ``delay_s``: every answer takes that long (a far or slow broker).
    """

    def __init__(self, on_fetch: Optional[Callable[["ScriptedConnection"], None]] = None) -> None:
        self.address = "b1:9001"
        self.lock = threading.Lock()
        self.log: List[bytes] = []
        self.threads: List[int] = []
        self.waits: List[int] = []
        self.on_fetch = on_fetch
        self.aborted = threading.Event()
        self.interrupted = threading.Event()
        self.closed = 0
        self.hung = False
        self.offsets_hung = False  # ListOffsets requests are never answered
        self.error_code = 0  # of every partition in a fetch response
        self.delay_s = 0.0
        self.socket_timeout_ms = 5000
        self.bounds: List[Optional[int]] = []

    def append(self, n: int) -> None:
        with self.lock:
            for _ in range(n):
                self.log.append(encode(len(self.log), b"v%d" % len(self.log)))

    fetch_walked = walked_via_fetch

    def fetch(self, partitions: Sequence[FetchPartition], max_wait_ms: int, min_bytes: int,
              timeout_ms: Optional[int] = None) -> FetchResponse:
        with self.lock:
            self.threads.append(threading.get_ident())
            self.waits.append(max_wait_ms)
            self.bounds.append(timeout_ms)
        if self.on_fetch is not None:
            self.on_fetch(self)
        bound = self.socket_timeout_ms if timeout_ms is None else timeout_ms
        answer_at = time.monotonic() + self.delay_s
        give_up_at = time.monotonic() + bound / 1000.0
        while (self.hung or time.monotonic() < answer_at) and not (self.interrupted.is_set() or self.aborted.is_set()):
            if time.monotonic() >= give_up_at:
                error = BrokerUnavailableError(f"broker {self.address} did not answer within {bound} ms")
                error.timed_out = True
                raise error
            time.sleep(0.002)
        if self.aborted.is_set() or self.interrupted.is_set():
            self.interrupted.clear()
            raise BrokerUnavailableError(f"broker {self.address} unreachable")
        out = []
        with self.lock:
            for fp in partitions:
                data = b"".join(self.log[fp.offset:])
                if self.error_code:
                    data = b""
                out.append(FetchPartitionResponse(fp.topic, fp.partition, self.error_code, len(self.log), memoryview(data)))
        if not any(len(p.message_set) for p in out):
            time.sleep(0.002)  # a broker would wait up to max_wait_ms for data
        return FetchResponse(tuple(out))

    def list_offsets(self, topic: str, partition: int, time_: int, timeout_ms: Optional[int] = None) -> int:
        if self.offsets_hung:
            bound = self.socket_timeout_ms if timeout_ms is None else timeout_ms
            time.sleep(bound / 1000.0)
            error = BrokerUnavailableError(f"broker {self.address} did not answer within {bound} ms")
            error.timed_out = True
            raise error
        return 0

    def close(self) -> None:
        self.closed += 1

    def abort(self) -> None:
        self.aborted.set()

    def interrupt(self) -> None:
        self.interrupted.set()


class Member:
    """One fetcher thread over a scripted connection, feeding one queue of one partition."""

    def __init__(self, conn: ScriptedConnection, drives: bool = True, start: int = 0, **config: object) -> None:
        self.conn = conn
        self.errors: List[BaseException] = []
        self.handed_back: List[PartitionTopicInfo] = []
        self.queue = ChunkQueue(4)
        self.info = PartitionTopicInfo("t", 0, self.queue, start, 1 << 20)
        self.fetcher = FetcherThread(FetcherKey(1, "b1", 9001, 0), make_config(fetch_on_consumer_thread=drives, **config),
                                     conn, self.handed_back.extend, self.errors.append)  # type: ignore[arg-type]
        self.fetcher.add_partitions([self.info])
        self.fetcher.start()

    def take(self, timeout: float) -> List[int]:
        """One ``get`` as an iterator does; the offsets it handed out (advancing the consumed offset)."""
        chunk = self.queue.get(timeout)
        if not isinstance(chunk, FetchedDataChunk):
            return []
        offsets = [m[0] for m in chunk.messages if m[0] >= self.info.consumed_offset]
        if offsets:
            self.info.consumed_offset = offsets[-1] + 1
        return offsets

    def stop(self) -> None:
        self.fetcher.stop(10.0)


@pytest.fixture
def member_factory():  # type: ignore[no-untyped-def]
    made: List[Member] = []

    def make(conn: ScriptedConnection, **kwargs: object) -> Member:
        made.append(Member(conn, **kwargs))  # type: ignore[arg-type]
        return made[-1]

    yield make
    for member in made:
        member.stop()


def consume_while_producing(member: Member, total: int) -> List[int]:
    """Append one message at a time, each after the consumer took the previous one (a live stream)."""
    got: List[int] = []
    deadline = time.monotonic() + 10
    while len(got) < total:
        assert time.monotonic() < deadline, got
        if len(member.conn.log) == len(got):
            member.conn.append(1)
        got.extend(member.take(0.5))
    return got


def take_until_handed_back(member: Member, within_s: float, what: str) -> float:
    """``take(0.1)`` until the partition is handed back (within ``within_s``, else fail with ``what``), each
    wait ending on time and delivering nothing; returns when the first wait began (``time.monotonic()``)."""
    started = time.monotonic()
    while not member.handed_back:
        assert time.monotonic() - started < within_s, what
        call = time.monotonic()
        assert member.take(0.1) == []
        assert time.monotonic() - call < 0.1 + ANSWER_GRACE_MS / 1000 + 0.15
    return started


def test_a_waiting_consumer_runs_the_rounds_on_its_own_thread_and_gets_every_message_once_in_order(
        member_factory) -> None:  # type: ignore[no-untyped-def]
    member = member_factory(ScriptedConnection(), fetch_wait_max_ms=100)
    assert consume_while_producing(member, 200) == list(range(200))
    me = threading.get_ident()
    mine = sum(1 for t in member.conn.threads if t == me)
    assert mine >= 150, (mine, len(member.conn.threads))  # the fetcher thread ran only the first few
    assert member.errors == [] and member.handed_back == []


def test_with_the_property_false_only_the_fetcher_thread_fetches(member_factory) -> None:  # type: ignore[no-untyped-def]
    member = member_factory(ScriptedConnection(), drives=False, fetch_wait_max_ms=100)
    assert consume_while_producing(member, 50) == list(range(50))
    assert threading.get_ident() not in member.conn.threads


def test_the_broker_wait_of_a_consumer_round_is_cut_to_what_is_left_of_its_timeout(
        member_factory) -> None:  # type: ignore[no-untyped-def]
    member = member_factory(ScriptedConnection(), fetch_wait_max_ms=5000)
    time.sleep(HANDBACK_S)
    started = time.monotonic()
    assert member.take(0.03) == []
    assert time.monotonic() - started < 1.0
    me = threading.get_ident()
    mine = [w for t, w in zip(member.conn.threads, member.conn.waits) if t == me]
    assert mine and max(mine) <= 30, mine


def test_the_fetcher_thread_fetches_ahead_while_the_consumer_is_busy(member_factory) -> None:  # type: ignore[no-untyped-def]
    member = member_factory(ScriptedConnection(), fetch_wait_max_ms=20)
    assert consume_while_producing(member, 20) == list(range(20))
    member.conn.append(5)
    time.sleep(HANDBACK_S * 4)  # the application works on what it got; nobody waits on the queue
    assert len(member.queue) >= 1, "the fetcher thread should have fetched ahead"
    assert member.take(0) == [20, 21, 22, 23, 24]


def test_a_stop_ends_a_round_on_the_consumer_thread_and_returns_only_after_it(
        member_factory) -> None:  # type: ignore[no-untyped-def]
    me: List[int] = []
    in_round = threading.Event()
    ended: List[float] = []

    def block_until_aborted(conn: ScriptedConnection) -> None:
        if me and threading.get_ident() == me[0]:
            in_round.set()
            assert conn.aborted.wait(10)
            time.sleep(0.2)  # the round still works a while after its socket was aborted
            ended.append(time.monotonic())

    member = member_factory(ScriptedConnection(block_until_aborted), fetch_wait_max_ms=100)
    got: List[List[int]] = []

    def consumer() -> None:
        me.append(threading.get_ident())
        got.append(member.take(30))

    thread = threading.Thread(target=consumer)
    thread.start()
    assert in_round.wait(10)
    member.fetcher.stop(10.0)
    returned = time.monotonic()
    assert ended and ended[0] <= returned
    member.queue.put_shutdown()  # as the connector does after stopping its fetchers
    thread.join(10)
    assert not thread.is_alive() and got == [[]]
    assert member.fetcher.drive(1.0) is False  # no round after a stop
    assert member.handed_back == [] and member.errors == []


def test_a_background_failure_interrupts_a_round_on_the_consumer_thread_without_giving_partitions_up(
        member_factory) -> None:  # type: ignore[no-untyped-def]
    me: List[int] = []
    in_round = threading.Event()

    def block_until_interrupted(conn: ScriptedConnection) -> None:
        if me and threading.get_ident() == me[0] and not in_round.is_set():
            in_round.set()
            assert conn.interrupted.wait(10)

    member = member_factory(ScriptedConnection(block_until_interrupted), fetch_wait_max_ms=100)
    time.sleep(HANDBACK_S)
    result: List[object] = []

    def consumer() -> None:
        me.append(threading.get_ident())
        result.append(member.queue.get(30))

    thread = threading.Thread(target=consumer)
    thread.start()
    assert in_round.wait(10)
    member.queue.wake_consumers()
    thread.join(5)
    assert not thread.is_alive() and result == [None]
    assert member.fetcher.partition_count() == 1 and member.handed_back == [] and member.errors == []
    member.conn.append(3)
    assert member.take(5) == [0, 1, 2]  # the next round fetches them


def test_an_exception_in_a_round_on_the_consumer_thread_ends_the_fetcher_and_is_reported(
        member_factory) -> None:  # type: ignore[no-untyped-def]
    def fail_on_the_consumer(conn: ScriptedConnection) -> None:
        if threading.current_thread() is threading.main_thread():
            raise RuntimeError("bug in a round")

    member = member_factory(ScriptedConnection(fail_on_the_consumer), fetch_wait_max_ms=100)
    time.sleep(HANDBACK_S)
    assert member.take(0.3) == []
    assert [str(e) for e in member.errors] == ["bug in a round"]
    assert member.fetcher.stopping
    member.fetcher.join(5)
    assert not member.fetcher.is_alive()


def test_a_keyboard_interrupt_in_a_round_reaches_the_consumer_and_closes_the_connection(
        member_factory) -> None:  # type: ignore[no-untyped-def]
    raised: List[bool] = []

    def interrupt_once(conn: ScriptedConnection) -> None:
        if threading.current_thread() is threading.main_thread() and not raised:
            raised.append(True)
            raise KeyboardInterrupt

    member = member_factory(ScriptedConnection(interrupt_once), fetch_wait_max_ms=100)
    time.sleep(HANDBACK_S)
    closed = member.conn.closed
    with pytest.raises(KeyboardInterrupt):
        member.take(5)
    assert member.conn.closed == closed + 1 and member.errors == []
    assert consume_while_producing(member, 5) == list(range(5))  # the member goes on


def test_a_consumer_round_never_waits_past_the_consumers_deadline_on_a_broker_that_stopped_answering(
        member_factory) -> None:  # type: ignore[no-untyped-def]
    """A hung broker (no answer, the connection open) holds a consumer's round only until the consumer's
    own deadline and ANSWER_GRACE_MS, not socket.timeout.ms; the partition stays with its fetcher, and comes back on its own
    once the broker answers again."""
    member = member_factory(ScriptedConnection(), fetch_wait_max_ms=100, socket_timeout_ms=5000)
    assert consume_while_producing(member, 3) == [0, 1, 2]
    member.conn.hung = True
    me, before = threading.get_ident(), len(member.conn.threads)
    for _ in range(3):
        started = time.monotonic()
        assert member.take(0.2) == []
        assert time.monotonic() - started < 0.2 + ANSWER_GRACE_MS / 1000 + 0.15
    mine = [b for t, b in zip(member.conn.threads[before:], member.conn.bounds[before:]) if t == me]
    assert mine and all(b is not None and b <= 200 + ANSWER_GRACE_MS for b in mine), mine
    assert member.handed_back == [] and member.errors == [] and member.fetcher.partition_count() == 1
    counters = member.fetcher.stats.snapshot()[1]  # each of the consumer's rounds above was cut: a request, not an error
    assert counters["deadline_cuts"] >= len(mine) and counters["requests"] > counters["deadline_cuts"], counters
    assert counters["errors"] == {}, counters
    member.conn.hung = False
    member.conn.append(2)
    assert member.take(1.0) == [3, 4]


def test_a_broker_silent_for_socket_timeout_over_many_short_consumer_rounds_is_failed_and_handed_back(
        member_factory) -> None:  # type: ignore[no-untyped-def]
    """Each round gives up at the consumer's deadline (0.1 s), but the broker has not answered for
    socket.timeout.ms (0.6 s) across them: the fetcher fails it, as one silent request would, and hands the
    partition back (to look its leader up again), within socket.timeout.ms and a round."""
    member = member_factory(ScriptedConnection(), fetch_wait_max_ms=100, socket_timeout_ms=600)
    member.conn.socket_timeout_ms = 600
    assert consume_while_producing(member, 2) == [0, 1]
    member.conn.hung = True
    started = take_until_handed_back(member, 0.6 + 0.5, "not handed back after socket.timeout.ms")
    assert time.monotonic() - started >= 0.6 - 0.05
    assert [i.partition for i in member.handed_back] == [0] and member.errors == []
    assert member.fetcher.stats.snapshot()[1]["errors"] == {"BrokerUnavailableError": 1}


def test_a_broker_slower_than_the_consumers_deadline_still_delivers_through_the_fetcher_thread(
        member_factory) -> None:  # type: ignore[no-untyped-def]
    """Every answer takes 0.3 s (a far broker), longer than a consumer waiting 0.05 s gives its round: the round
    is cut at the deadline, and the fetcher thread then runs the rounds with its own socket.timeout.ms for
    CUT_BACKOFF_S, so the messages still arrive (each wait of the consumer still ends on time), nothing is
    handed back and no failure is counted."""
    member = member_factory(ScriptedConnection(), fetch_wait_max_ms=100)
    assert consume_while_producing(member, 2) == [0, 1]
    member.conn.delay_s = 0.3
    member.conn.append(3)
    got: List[int] = []
    started = time.monotonic()
    while len(got) < 3:
        assert time.monotonic() - started < 5.0, ("a slow broker's messages never arrived", got)
        call = time.monotonic()
        got.extend(member.take(0.05))
        assert time.monotonic() - call < 0.05 + ANSWER_GRACE_MS / 1000 + 0.15
    assert got == [2, 3, 4]
    assert member.handed_back == [] and member.errors == []
    assert "BrokerUnavailableError" not in member.fetcher.stats.snapshot()[1]["errors"]


def test_an_offset_lookup_cut_at_the_consumers_deadline_leaves_it_to_the_fetcher_thread(
        member_factory) -> None:  # type: ignore[no-untyped-def]
    """The broker answers OFFSET_OUT_OF_RANGE and then never answers the auto.offset.reset lookup: each consumer's
    wait still ends on time, the lookup cut at the deadline leaves the rounds to the fetcher thread, whose own
    lookup fails after socket.timeout.ms (0.6 s) and hands the partition back (to look its leader up again)."""
    member = member_factory(ScriptedConnection(), fetch_wait_max_ms=100, socket_timeout_ms=600)
    member.conn.socket_timeout_ms = 600
    assert consume_while_producing(member, 2) == [0, 1]
    member.conn.error_code, member.conn.offsets_hung = 1, True  # OFFSET_OUT_OF_RANGE
    take_until_handed_back(member, 0.6 + 1.5, "the partition was never handed back")
    assert [i.partition for i in member.handed_back] == [0] and member.errors == []


def test_room_taken_during_a_consumers_turn_does_not_wake_the_stepped_back_fetcher_thread() -> None:
    """Every response fills the queue (two partitions, room for one chunk), so every chunk taken frees
    room: the listener queues the parked chunk on the consumer's thread, and the fetcher thread, which
    is waiting out the consumer's turn, is left asleep. It wakes when the turn could end (about every
    ``HANDBACK_S`` + ``fetch.wait.max.ms``), not at every chunk; woken, it only waited again."""
    conn = ScriptedConnection()
    queue = ChunkQueue(1)
    infos = [PartitionTopicInfo("t", p, queue, 0, 1 << 20) for p in (0, 1)]
    fetcher = FetcherThread(FetcherKey(1, "b1", 9001, 0), make_config(fetch_on_consumer_thread=True, fetch_wait_max_ms=100),
                            conn, lambda infos: None, lambda exc: None)  # type: ignore[arg-type]
    turns = []
    pause_s = fetcher._turns.thread_pause_s

    def counted(may_hand_over: bool) -> float:
        turns.append(time.monotonic())
        return pause_s(may_hand_over)
    fetcher._turns.thread_pause_s = counted  # type: ignore[method-assign]
    fetcher.add_partitions(infos)
    fetcher.start()
    try:
        taken: List[int] = []
        started = time.monotonic()
        while len(taken) < 400:
            assert time.monotonic() - started < 20, len(taken)
            time.sleep(0.001)  # a live stream: a message now and then, the consumer waiting between
            conn.append(1)
            for _ in range(2):  # one chunk per partition
                chunk = queue.get(0.5)
                assert isinstance(chunk, FetchedDataChunk), chunk
                taken.append(chunk.messages[-1][0])
        elapsed = time.monotonic() - started
        room_events = fetcher._room_events
    finally:
        fetcher.stop(10.0)
    assert room_events >= 300, room_events
    assert threading.get_ident() in conn.threads
    # Woken at every room event, the thread turned its loop about as often as room appeared.
    assert len(turns) <= 10 + elapsed / HANDBACK_S, (len(turns), room_events, elapsed)
