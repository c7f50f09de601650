"""Issue 14 item 2: a rebalance does not re-read owner nodes a member keeps, yet still finds out
one deleted or taken over behind its back (real ZooKeeper, nodes changed by another client)."""

from __future__ import annotations

from typing import Any, Iterator, List, Tuple

import pytest
from kazoo.client import KazooClient
from support.common import unique

from zkconsumer.testing import LocalCluster
from zkconsumer.zookeeper import zkformat
from zkconsumer.zookeeper.group import GroupClient


class CountingGroup:
    """A GroupClient whose reads of owner nodes (each one request to the server) are counted."""

    def __init__(self, zk: KazooClient, group: str, consumer_id: str) -> None:
        self.group = GroupClient(zk, group, consumer_id, retry_timeout_s=5.0)
        self.reads: List[str] = []
        bounded = self.group.client
        raw_get = bounded.get

        def get(path: str, *args: Any, **kwargs: Any) -> Tuple[bytes, Any]:
            if "/owners/" in path:
                self.reads.append(path)
            return raw_get(path, *args, **kwargs)

        bounded.get = get  # type: ignore[method-assign]


@pytest.fixture
def member(cluster: LocalCluster) -> Iterator[Tuple[CountingGroup, str]]:
    group = unique("owner-confirm")
    counting = CountingGroup(cluster.kazoo_client(), group, "m1")
    counting.group.register(zkformat.encode_registration({"t": 1}, "static", 0))
    yield counting, group
    counting.group.deregister()


def test_scale_item2_a_kept_owner_node_is_confirmed_once_then_without_requests(
        member: Tuple[CountingGroup, str]) -> None:
    counting, _ = member
    assert counting.group.claim("t", 0, "m1-0") is None
    before = len(counting.reads)
    assert counting.group.confirm_held("t", 0)
    assert len(counting.reads) == before + 1  # the first confirmation reads (and sets the watch)
    for _ in range(5):
        assert counting.group.confirm_held("t", 0)
    assert len(counting.reads) == before + 1  # unchanged node: no further request


def test_scale_item2_an_owner_node_deleted_by_hand_is_found_out(
        cluster: LocalCluster, member: Tuple[CountingGroup, str]) -> None:
    counting, group = member
    assert counting.group.claim("t", 1, "m1-0") is None
    assert counting.group.confirm_held("t", 1)
    other = cluster.kazoo_client()
    path = zkformat.GroupPaths(group).owner("t", 1)
    other.delete(path)
    _wait(lambda: not counting.group.confirm_held("t", 1))
    # taken over by another member's session: still not ours
    other.create(path, b"m2-0", ephemeral=True)
    assert not counting.group.confirm_held("t", 1)
    assert counting.group.claim("t", 1, "m1-0") == "m2-0"


def test_scale_item2_an_owner_node_rewritten_by_another_client_is_read_again(
        cluster: LocalCluster, member: Tuple[CountingGroup, str]) -> None:
    counting, group = member
    assert counting.group.claim("t", 2, "m1-0") is None
    assert counting.group.confirm_held("t", 2)
    other = cluster.kazoo_client()
    other.set(zkformat.GroupPaths(group).owner("t", 2), b"intruder-0")
    _wait(lambda: not counting.group.confirm_held("t", 2))


def _wait(condition: Any, timeout: float = 10.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "not found out within the bound"
        time.sleep(0.05)
