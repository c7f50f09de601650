"""Issue 14: owner nodes claimed and released together (pipelined, one multi-operation for the
releases) give exactly what one-by-one claims and releases give, on a real ZooKeeper with
nodes held, rewritten and deleted by another client's session."""

from __future__ import annotations

import threading
import time
from typing import Any, Iterator, List, Tuple

import pytest
from kazoo.client import KazooClient
from support.common import unique

from zkconsumer.testing import LocalCluster
from zkconsumer.zookeeper import zkformat
from zkconsumer.zookeeper.group import GroupClient


@pytest.fixture
def member(cluster: LocalCluster) -> Iterator[Tuple[GroupClient, KazooClient, zkformat.GroupPaths]]:
    group = unique("pipelined")
    client = GroupClient(cluster.kazoo_client(), group, f"{group}_m1", retry_timeout_s=5.0)
    client.register(zkformat.encode_registration({"t": 1}, "static", 0))
    other = cluster.kazoo_client()
    yield client, other, zkformat.GroupPaths(group)
    client.deregister()


def test_claim_many_equals_claims_one_by_one(member: Tuple[GroupClient, KazooClient, zkformat.GroupPaths]) -> None:
    client, other, paths = member
    me = client.consumer_id
    # t-1 held by another member's session; t-2 already ours under another of our thread ids
    other.create(paths.owner("t", 1), b"peer-0", ephemeral=True, makepath=True)
    assert client.claim("t", 2, f"{me}-1") is None
    deleted = threading.Event()

    holders = client.claim_many([("t", 0, f"{me}-0", None), ("t", 1, f"{me}-0", lambda _e: deleted.set()),
                                 ("t", 2, f"{me}-0", None), ("u", 0, f"{me}-0", None)])

    assert holders == [None, "peer-0", None, None]
    for topic, partition in (("t", 0), ("t", 2), ("u", 0)):  # "u": its owners parent did not exist
        data, stat = other.get(paths.owner(topic, partition))
        assert data == f"{me}-0".encode() and stat.ephemeralOwner == client.session_id
    assert other.get(paths.owner("t", 1))[0] == b"peer-0"
    other.delete(paths.owner("t", 1))  # the holder lets go: the watch the read set fires
    assert deleted.wait(10)
    assert client.claim_many([("t", 1, f"{me}-0", None)]) == [None]


def test_claim_many_looking_first_equals_claims_one_by_one_and_creates_no_node_it_saw_held(
        member: Tuple[GroupClient, KazooClient, zkformat.GroupPaths]) -> None:
    client, other, paths = member
    me = client.consumer_id
    other.create(paths.owner("t", 1), b"peer-0", ephemeral=True, makepath=True)  # a peer's
    other.create(paths.owner("t", 3), b"peer-1", ephemeral=True)
    assert client.claim("t", 2, f"{me}-1") is None  # ours under another of our thread ids
    sent = _spy(client, "create_async", "get_children_async")
    deleted = threading.Event()

    holders = client.claim_many([("t", 0, f"{me}-0", None), ("t", 1, f"{me}-0", lambda _e: deleted.set()),
                                 ("t", 2, f"{me}-0", None), ("t", 3, f"{me}-0", None), ("u", 0, f"{me}-0", None)],
                                look_first=True)

    assert holders == [None, "peer-0", None, "peer-1", None]
    for topic, partition in (("t", 0), ("t", 2), ("u", 0)):
        data, stat = other.get(paths.owner(topic, partition))
        assert data == f"{me}-0".encode() and stat.ephemeralOwner == client.session_id
    # "t" listed once (two claims or more), "u" not (one claim): no create was sent for the nodes listed
    assert [path for kind, path in sent if kind == "get_children_async"] == [paths.owners_topic("t")]
    created = [path for kind, path in sent if kind == "create_async"]
    assert paths.owner("t", 0) in created and paths.owner("u", 0) in created
    assert paths.owner("t", 1) not in created and paths.owner("t", 3) not in created
    other.delete(paths.owner("t", 1))  # the read of the listed node set the watch
    assert deleted.wait(10)


def test_relabel_many_and_confirm_held_many_equal_their_one_node_forms(
        member: Tuple[GroupClient, KazooClient, zkformat.GroupPaths]) -> None:
    client, other, paths = member
    me = client.consumer_id
    assert client.claim_many([("t", p, f"{me}-0", None) for p in range(3)]) == [None] * 3
    other.create(paths.owner("t", 3), b"peer-0", ephemeral=True)
    other.set(paths.owner("t", 1), f"{me}-0".encode())  # still ours, but its version moved behind our back

    done = client.relabel_many([("t", 0, f"{me}-1"), ("t", 1, f"{me}-1"), ("t", 2, f"{me}-0"),
                                ("t", 3, f"{me}-1"), ("t", 4, f"{me}-1")])

    assert done == [True, True, True, False, False]  # t-2: already so; t-3: a peer's; t-4: no node
    assert [other.get(paths.owner("t", p))[0] for p in range(4)] == [
        f"{me}-1".encode(), f"{me}-1".encode(), f"{me}-0".encode(), b"peer-0"]
    reads = _count_owner_reads(client)
    assert client.confirm_held_many([("t", p) for p in range(5)]) == [True, True, True, False, False]
    first = len(reads)
    assert client.confirm_held_many([("t", p) for p in range(3)]) == [True, True, True]
    assert len(reads) == first  # confirmed nodes are vouched for by their watches: no read


def test_claim_many_recreates_an_owners_parent_deleted_by_hand(
        member: Tuple[GroupClient, KazooClient, zkformat.GroupPaths]) -> None:
    client, other, paths = member
    me = client.consumer_id
    assert client.claim_many([("t", 0, f"{me}-0", None)]) == [None]
    client.release_many([("t", 0)])
    other.delete(paths.owners_topic("t"), recursive=True)  # like `rmr` by an operator: the cached parent is gone
    assert client.claim_many([("t", 0, f"{me}-0", None), ("t", 1, f"{me}-0", None)]) == [None, None]
    assert sorted(other.get_children(paths.owners_topic("t"))) == ["0", "1"]


def test_release_many_deletes_only_this_sessions_nodes(
        member: Tuple[GroupClient, KazooClient, zkformat.GroupPaths]) -> None:
    client, other, paths = member
    me = client.consumer_id
    assert client.claim_many([("t", p, f"{me}-0", None) for p in range(4)]) == [None] * 4
    other.delete(paths.owner("t", 3))  # taken over behind our back: not ours to delete
    other.create(paths.owner("t", 3), b"peer-0", ephemeral=True)

    client.release_many([("t", p) for p in range(5)])  # t-4: never claimed

    assert other.get_children(paths.owners_topic("t")) == ["3"]
    assert other.get(paths.owner("t", 3))[0] == b"peer-0"


def test_release_many_falls_back_node_by_node_when_a_node_changes_before_the_multi(
        member: Tuple[GroupClient, KazooClient, zkformat.GroupPaths]) -> None:
    client, other, paths = member
    me = client.consumer_id
    assert client.claim_many([("t", p, f"{me}-0", None) for p in range(3)]) == [None] * 3
    bounded = client.client
    real_transaction = bounded.transaction
    multis: List[Any] = []

    def transaction() -> Any:
        # Between the reads and the multi, another client rewrites one node (its version moves):
        # the multi deletes nothing, and each node is released on its own.
        if not multis:
            other.set(paths.owner("t", 1), f"{me}-0".encode())
        multis.append(True)
        return real_transaction()

    bounded.transaction = transaction  # type: ignore[method-assign]
    client.release_many([("t", p) for p in range(3)])
    assert multis and other.get_children(paths.owners_topic("t")) == []


def _spy(client: GroupClient, *methods: str) -> List[Tuple[str, str]]:
    """``(method, path)`` of every call of ``methods`` of ``client``'s kazoo client from now on."""
    sent: List[Tuple[str, str]] = []
    raw = client.client.raw

    def spy(name: str, real: Any) -> Any:
        def spied(path: str, *args: Any, **kwargs: Any) -> Any:
            sent.append((name, path))
            return real(path, *args, **kwargs)

        return spied

    for name in methods:
        setattr(raw, name, spy(name, getattr(raw, name)))
    return sent


def _count_owner_reads(client: GroupClient) -> List[str]:
    """Every read of an owner node ``client`` sends from now on (one request each)."""
    reads: List[str] = []
    raw = client.client.raw
    real_get_async = raw.get_async

    def get_async(path: str, *args: Any, **kwargs: Any) -> Any:
        if "/owners/" in path:
            reads.append(path)
        return real_get_async(path, *args, **kwargs)

    raw.get_async = get_async  # type: ignore[method-assign]
    return reads


def test_an_owner_node_read_once_is_committed_against_and_released_without_reading_it_again(
        member: Tuple[GroupClient, KazooClient, zkformat.GroupPaths]) -> None:
    client, other, paths = member
    me = client.consumer_id
    reads = _count_owner_reads(client)
    assert client.claim_many([("t", 0, f"{me}-0", None)]) == [None]
    assert client.commit_offset_if_owner("t", 0, 5, f"{me}-0")
    assert len(reads) == 1  # the first fence reads the owner node, and sets a data watch on it
    assert client.commit_offset_if_owner("t", 0, 6, f"{me}-0")
    assert client.confirm_held("t", 0)
    assert other.get(paths.offset("t", 0))[0] == b"6"
    client.release_many([("t", 0)])
    assert len(reads) == 1  # the watch vouched for the node every time since
    assert other.exists(paths.owner("t", 0)) is None


def test_a_commit_of_many_partitions_is_one_multi_operation_and_fenced_all_or_nothing(
        member: Tuple[GroupClient, KazooClient, zkformat.GroupPaths]) -> None:
    client, other, paths = member
    me = client.consumer_id
    assert client.claim_many([("t", p, f"{me}-0", None) for p in range(4)]) == [None] * 4
    other.create(paths.offset("t", 0), b"1", makepath=True)  # one offset node exists already, three do not
    reads = _count_owner_reads(client)
    multis: List[Any] = []
    real_transaction = client.client.transaction
    client.client.transaction = lambda: multis.append(True) or real_transaction()  # type: ignore[method-assign]

    assert client.commit_offsets_if_owner([("t", p, 10 + p) for p in range(4)]) is False  # guessed t-0 absent
    assert client.commit_offsets_if_owner([("t", p, 10 + p) for p in range(4)]) is True  # knows better now
    assert [other.get(paths.offset("t", p))[0] for p in range(4)] == [b"10", b"11", b"12", b"13"]
    reads.clear(), multis.clear()
    assert client.commit_offsets_if_owner([("t", p, 20 + p) for p in range(4)]) is True
    assert (len(reads), len(multis)) == (0, 1)  # the steady commit: one request for all four

    other.delete(paths.owner("t", 2))  # taken over behind our back
    other.create(paths.owner("t", 2), b"peer-0", ephemeral=True)
    _wait(lambda: not client.confirm_held("t", 2))
    assert client.commit_offsets_if_owner([("t", p, 30 + p) for p in range(4)]) is False
    assert [other.get(paths.offset("t", p))[0] for p in range(4)] == [b"20", b"21", b"22", b"23"]  # nothing


def test_a_node_replaced_behind_our_back_fences_the_commit_though_its_version_was_known(
        member: Tuple[GroupClient, KazooClient, zkformat.GroupPaths]) -> None:
    client, other, paths = member
    me = client.consumer_id
    assert client.claim_many([("t", 1, f"{me}-0", None)]) == [None]
    assert client.commit_offset_if_owner("t", 1, 3, f"{me}-0")
    other.delete(paths.owner("t", 1))  # a tool deletes a live member's node; a peer takes it (version 0 again)
    _wait(lambda: not client.confirm_held("t", 1))  # the watch fired: the known version is forgotten
    other.create(paths.owner("t", 1), b"peer-0", ephemeral=True)
    assert not client.commit_offset_if_owner("t", 1, 9, f"{me}-0")
    assert other.get(paths.offset("t", 1))[0] == b"3"
    client.release_many([("t", 1)])
    assert other.get(paths.owner("t", 1))[0] == b"peer-0"


def _wait(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)
