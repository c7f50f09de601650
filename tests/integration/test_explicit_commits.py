"""``commit_offsets(offsets)``: exactly the positions an application names, fenced like every commit,
against a real ZooKeeper and real brokers, under both memberships.

A partition the member owns gets the offset as given (not what was handed out); a partition it does
not own (another member's, or one that does not exist) is refused and returned, never written; and
``positions()`` says what a plain ``commit_offsets()`` would commit.
"""

from __future__ import annotations

from typing import Dict

import pytest
from support.common import TwoMembers, consumer_props, produced_values, unique
from support.offsets import kafka_committed, zookeeper_committed

from zkconsumer.errors import ConfigurationError

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("membership", ["zookeeper", "kafka"])
def test_explicit_offsets_are_written_for_owned_partitions_and_refused_for_the_others(cluster, zk,
                                                                                      membership: str) -> None:
    topic, group = unique("explicit"), unique("g-explicit")
    cluster.create_topic(topic, partitions=2, replication=1)
    for p in (0, 1):
        cluster.produce(topic, produced_values(10, f"p{p}-"), partition=p)
    extra: Dict[str, object] = {"auto_commit_enable": "false"}
    if membership == "kafka":
        extra.update(group_membership="kafka", offsets_storage="kafka", dual_commit_enabled="false",
                     session_timeout_ms=6000, heartbeat_interval_ms=500)
    props = consumer_props(cluster, group, **extra)
    read = (lambda p: zookeeper_committed(zk, group, topic, [p])[p]) if membership == "zookeeper" \
        else (lambda p: kafka_committed(cluster, group, topic, [p])[p])
    with TwoMembers(props, topic) as members:
        first, drainers = members.first, members.drainers
        drainers[0].wait_for(20)
        assert first.positions() == {(topic, 0): 10, (topic, 1): 10}  # everything handed out

        with pytest.raises(ConfigurationError, match="must be a whole number"):
            first.commit_offsets({(topic, 0): -4})
        assert first.commit_offsets({(topic, 0): 3, (topic, 7): 1}) == [(topic, 7)]  # no such partition: refused
        assert read(0) == 3 and read(1) is None and read(7) is None  # exactly as named, and only that

        mine, theirs = members.join_second()  # the group rebalances: one partition each
        before = read(theirs[1])
        assert first.commit_offsets({mine: 5, theirs: 9}) == [theirs]  # another member's: refused
        assert read(mine[1]) == 5 and read(theirs[1]) == before
