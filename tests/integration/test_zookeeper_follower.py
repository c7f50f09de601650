"""A member whose ZooKeeper server is cut off from the ensemble's leader, on a real 3-node ensemble.

Such a follower keeps its clients' connections and answers their pings and reads from its own
state until it gives up on the leader (``syncLimit`` x ``tickTime``: here 15 s), while the leader
and the other follower, a majority, expire the member's session after its timeout (4 s) and hand
its partitions to the other member. A member that took the follower's ping answers as proof that
its session lived would go on fetching and handing out those partitions for those 15 s, beside
their new owner. The session lease counts only answers the leader checked (a write, a ``sync``),
so the member stops queuing once the lease lapses, before the leader can have expired the session:
at no moment do two members hand out the same partition, and nothing is lost.

Node 1 reaches its peers through proxies (``ProjectCluster(isolatable_node=1)``), so
``isolate_zookeeper()`` is a real partition between ZooKeeper servers while the member's own
connection to node 1 stays up.
"""

from __future__ import annotations

import threading
import time
from typing import Dict, Iterator, List, Set, Tuple

import pytest
from kafka import KafkaProducer
from kazoo.client import KazooClient
from support.common import Drainer, consumer_props, owners, unique, wait_until

from harness.cluster import ProjectCluster
from zkconsumer import ZookeeperConsumerConnector
from zkconsumer.testing.core import zookeeper_mode

pytestmark = pytest.mark.integration

SESSION_MS = 4000
PARTITIONS = 4


@pytest.fixture(scope="module")
def ensemble() -> Iterator[ProjectCluster]:
    """One broker on 3 ZooKeeper nodes; node 1 isolatable, and slow to give up on its leader."""
    cluster = ProjectCluster(brokers=1, partitions=PARTITIONS, zookeeper_nodes=3, isolatable_node=1,
                             zookeeper_config={"syncLimit": 30})
    with cluster:
        yield cluster


class Producer:
    """Writes ``<partition>-<n>`` to every partition, a few messages every 50 ms, until stopped."""

    def __init__(self, cluster: ProjectCluster, topic: str) -> None:
        self.cluster, self.topic = cluster, topic
        self.written: Set[bytes] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        producer = KafkaProducer(bootstrap_servers=self.cluster.bootstrap_servers, api_version=(0, 9), acks=1,
                                 linger_ms=0)
        try:
            n = 0
            while not self._stop.is_set():
                for p in range(PARTITIONS):
                    batch = [f"{p}-{n + i}".encode() for i in range(3)]
                    for value in batch:
                        producer.send(self.topic, value=value, partition=p)
                    producer.flush(30)
                    self.written.update(batch)
                n += 3
                self._stop.wait(0.05)
        finally:
            producer.close(10)

    def stop(self) -> Set[bytes]:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive()
        return self.written


def first_after(stamped: List[Tuple[float, object]], partition: int, after: float) -> float:
    return min((t for t, m in stamped if m.partition == partition and t > after), default=float("inf"))  # type: ignore[attr-defined]


def last_of(stamped: List[Tuple[float, object]], partition: int) -> float:
    return max((t for t, m in stamped if m.partition == partition), default=float("-inf"))  # type: ignore[attr-defined]


def test_a_member_on_a_follower_cut_off_from_its_leader_stops_before_its_partitions_move(
        ensemble: ProjectCluster) -> None:
    cluster = ensemble
    assert cluster.zookeeper_leader() != 1, "node 1 must be a follower"
    topic, group = unique("cutoff"), unique("g-cutoff")
    cluster.create_topic(topic, partitions=PARTITIONS, replication=1)
    node = {n: f"127.0.0.1:{cluster.zookeeper_port(n)}" for n in cluster.zookeeper_nodes}
    # The cut-off member writes nothing (no auto-commit): a forwarded write would stall behind the
    # cut and its pings with it (a session's requests are answered in order), so kazoo would drop the
    # connection by itself. An idle member's pings are what the follower goes on answering.
    idle = dict(zookeeper_session_timeout_ms=SESSION_MS)
    committing = dict(idle, auto_commit_enable="true", auto_commit_interval_ms=200)
    majority = f"{node[2]},{node[3]}"
    referee = KazooClient(hosts=majority)
    referee.start(30)
    producer = Producer(cluster, topic)
    cut_off = ZookeeperConsumerConnector(consumer_props(cluster, group, zookeeper_connect=node[1], **idle))
    other = ZookeeperConsumerConnector(consumer_props(cluster, group, zookeeper_connect=majority, **committing))
    drainers: Dict[str, Drainer] = {}
    try:
        drainers["cut_off"] = Drainer(cut_off.create_message_streams({topic: 1})[topic])
        drainers["other"] = Drainer(other.create_message_streams({topic: 1})[topic])
        wait_until(lambda: len(set(owners(referee, group, topic).values())) == 2 and
                   len(owners(referee, group, topic)) == PARTITIONS, 60, "two owners of two partitions each")
        time.sleep(1.0)
        theirs = {p for p, owner in owners(referee, group, topic).items() if owner.startswith(cut_off.consumer_id)}
        assert len(theirs) == 2

        cut_at = time.monotonic()
        cluster.isolate_zookeeper()
        wait_until(lambda: all(o.startswith(other.consumer_id) for o in owners(referee, group, topic).values())
                   and len(owners(referee, group, topic)) == PARTITIONS, 30,
                   "the majority to expire the cut-off member's session and the other member to take its partitions")
        wait_until(lambda: all(first_after(drainers["other"].stamped(), p, cut_at) < float("inf") for p in theirs), 30,
                   "the other member to hand out the partitions it took over")
        taken_at = max(first_after(drainers["other"].stamped(), p, cut_at) for p in theirs)
        # The danger was real: the cut-off member's server was still a follower serving it then.
        assert zookeeper_mode(cluster.zookeeper_port(1)) == "follower"
        time.sleep(2.0)  # the other member goes on; the cut-off one must not
        stamped = drainers["cut_off"].stamped()
        for p in theirs:
            assert last_of(stamped, p) < first_after(drainers["other"].stamped(), p, cut_at), (
                f"partition {p} was handed out by both members at once: the cut-off member's last at "
                f"+{last_of(stamped, p) - cut_at:.2f} s, the new owner's first at "
                f"+{first_after(drainers['other'].stamped(), p, cut_at) - cut_at:.2f} s after the cut")
        assert max((t for t, _ in stamped), default=cut_at) < taken_at

        cluster.reconnect_zookeeper()
        written = producer.stop()
        everyone = lambda: {m.message for d in drainers.values() for m in d.snapshot()}  # noqa: E731
        wait_until(lambda: written <= everyone(), 90, "every message written to be handed out by someone")
    finally:
        cluster.reconnect_zookeeper()
        if producer._thread.is_alive():
            producer.stop()
        for drainer in drainers.values():
            drainer.stop()
        cut_off.shutdown()
        other.shutdown()
        referee.stop()
        referee.close()
