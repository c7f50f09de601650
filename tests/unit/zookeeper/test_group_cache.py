"""GroupClient's read caches (scale items 1-2): members and brokers re-read only what changed."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Dict, List, Tuple

from zkconsumer.zookeeper.group import GroupClient


class _Done:
    """A kazoo async result already answered (GroupClient calls through BoundedZooKeeper's ``*_async``)."""

    def __init__(self, call, args, kwargs) -> None:  # type: ignore[no-untyped-def]
        self._value, self._error = None, None
        try:
            self._value = call(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - handed to get(), as kazoo's results do
            self._error = exc

    def get(self, timeout: float = None):  # type: ignore[no-untyped-def,assignment]
        if self._error is not None:
            raise self._error
        return self._value


class FakeZk:
    """Children with a cversion, as ZooKeeper keeps it; counts every request."""

    handler = SimpleNamespace(timeout_exception=TimeoutError)

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        if name.endswith("_async"):
            sync = getattr(self, name[: -len("_async")])
            return lambda *args, **kwargs: _Done(sync, args, kwargs)
        raise AttributeError(name)

    def sync(self, path: str) -> str:  # ZooKeeper's sync (after a connection loss): nothing to catch up here
        return path

    def __init__(self) -> None:
        self.nodes: Dict[str, bytes] = {}
        self.cversion: Dict[str, int] = {}
        self.requests: List[Tuple[str, str]] = []
        self.client_id = (1, b"")
        self.watches: Dict[str, list] = {}

    def fire(self, parent: str) -> None:
        for watch in self.watches.pop(parent, []):
            watch(SimpleNamespace(type="CHILD", path=parent))

    def add(self, path: str, data: bytes) -> None:
        parent = path.rsplit("/", 1)[0]
        self.nodes[path] = data
        self.cversion[parent] = self.cversion.get(parent, 0) + 1
        self.fire(parent)

    def remove(self, path: str) -> None:
        parent = path.rsplit("/", 1)[0]
        del self.nodes[path]
        self.cversion[parent] = self.cversion.get(parent, 0) + 1
        self.fire(parent)

    def get_children(self, path: str, watch=None, include_data: bool = False):
        self.requests.append(("children", path))
        if watch is not None:
            self.watches.setdefault(path, []).append(watch)
        kids = [p.rsplit("/", 1)[1] for p in self.nodes if p.rsplit("/", 1)[0] == path]
        return (kids, SimpleNamespace(cversion=self.cversion.get(path, 0))) if include_data else kids

    def get(self, path: str, watch=None):
        self.requests.append(("get", path))
        return self.nodes[path], SimpleNamespace(ephemeralOwner=1, version=0)


def registration(n: int) -> bytes:
    return json.dumps({"version": 1, "subscription": {"t": n}, "pattern": "static",
                       "timestamp": "1"}).encode()


def test_scale_item2_members_are_read_once_and_again_only_when_changed() -> None:
    zk = FakeZk()
    group = GroupClient(zk, "g", "g_a")  # type: ignore[arg-type]
    for member in ("g_a", "g_b"):
        zk.add(f"/consumers/g/ids/{member}", registration(1))
    assert sorted(group.members()) == ["g_a", "g_b"]
    zk.requests.clear()
    assert sorted(group.members()) == ["g_a", "g_b"]
    assert zk.requests == [("children", "/consumers/g/ids")]  # nothing changed: one request
    zk.requests.clear()
    zk.add("/consumers/g/ids/g_c", registration(2))
    zk.remove("/consumers/g/ids/g_b")
    members = group.members()
    assert sorted(members) == ["g_a", "g_c"] and members["g_c"].subscription == {"t": 2}
    assert zk.requests == [("children", "/consumers/g/ids"), ("get", "/consumers/g/ids/g_c")]  # only the new one
    zk.requests.clear()
    # g_c deleted and re-created (another process, another subscription) between two reads: the
    # children look the same but the cversion moved by 2, so every node is read again
    zk.remove("/consumers/g/ids/g_c")
    zk.add("/consumers/g/ids/g_c", registration(3))
    assert group.members()["g_c"].subscription == {"t": 3}
    assert sorted(r for r in zk.requests if r[0] == "get") == [("get", "/consumers/g/ids/g_a"),
                                                               ("get", "/consumers/g/ids/g_c")]


def test_scale_item2_brokers_are_read_again_only_when_they_change() -> None:
    zk = FakeZk()
    group = GroupClient(zk, "g", "g_a")  # type: ignore[arg-type]
    broker = lambda port: json.dumps({"host": "h", "port": port, "version": 1}).encode()  # noqa: E731
    zk.add("/brokers/ids/0", broker(9092))
    zk.add("/brokers/ids/1", broker(9093))
    assert [b.port for b in group.brokers()] == [9092, 9093]
    zk.requests.clear()
    assert [b.port for b in group.brokers()] == [9092, 9093]
    assert zk.requests == []  # the watch has not fired: no request at all
    zk.remove("/brokers/ids/1")
    assert [b.port for b in group.brokers()] == [9092]
    assert zk.requests == [("children", "/brokers/ids")]  # fired: the children again, no get
    zk.add("/brokers/ids/1", broker(9094))  # restarted on another port
    assert [b.port for b in group.brokers()] == [9092, 9094]
    zk.client_id = (2, b"")  # a new session: watches are gone, read again
    zk.requests.clear()
    assert [b.port for b in group.brokers()] == [9092, 9094]
    assert zk.requests == [("children", "/brokers/ids")]


class VersionedZk(FakeZk):
    """Owner nodes with versions and an ephemeral owner, as ZooKeeper keeps them."""

    def __init__(self) -> None:
        super().__init__()
        self.stats: Dict[str, Tuple[int, int]] = {}  # path -> (ephemeral owner, version)
        self.data_watches: Dict[str, list] = {}

    def replace(self, path: str, data: bytes, stat: Tuple[int, int]) -> None:
        """Another client deletes the node and creates its own: the data watches set on it fire."""
        self.nodes[path], self.stats[path] = data, stat
        for watch in self.data_watches.pop(path, []):
            watch(SimpleNamespace(type="DELETED", path=path))

    def create(self, path: str, data: bytes, acl=None, ephemeral=False, sequence=False, makepath=False) -> str:
        from kazoo.exceptions import NodeExistsError

        self.requests.append(("create", path))
        if sequence:
            path = f"{path}{len(self.nodes):010d}"
        if path in self.nodes:
            raise NodeExistsError()
        self.nodes[path] = data
        self.stats[path] = (self.client_id[0], 0)
        return path

    def get(self, path: str, watch=None):
        from kazoo.exceptions import NoNodeError

        self.requests.append(("get", path))
        if path not in self.nodes:
            raise NoNodeError()
        if watch is not None:
            self.data_watches.setdefault(path, []).append(watch)
        owner, version = self.stats.get(path, (1, 0))
        return self.nodes[path], SimpleNamespace(ephemeralOwner=owner, version=version)

    def set(self, path: str, data: bytes, version: int = -1):
        from kazoo.exceptions import BadVersionError, NoNodeError

        self.requests.append(("set", path))
        if path not in self.nodes:
            raise NoNodeError()
        owner, current = self.stats[path]
        if version != -1 and version != current:
            raise BadVersionError()
        self.nodes[path] = data
        self.stats[path] = (owner, current + 1)
        return SimpleNamespace(ephemeralOwner=owner, version=current + 1)

    def delete(self, path: str, version: int = -1) -> None:
        from kazoo.exceptions import BadVersionError, NoNodeError

        self.requests.append(("delete", path))
        if path not in self.nodes:
            raise NoNodeError()
        if version != -1 and version != self.stats[path][1]:
            raise BadVersionError()
        del self.nodes[path]
        del self.stats[path]


class TxZk(VersionedZk):
    """Multi-operations as ZooKeeper applies them: all or nothing; the failed operation gets its
    error, those before it RolledBackError, those after it RuntimeInconsistency (kazoo's mapping)."""

    def exists(self, path: str, watch=None):
        self.requests.append(("exists", path))
        if path not in self.nodes:
            return None
        owner, version = self.stats.get(path, (0, 0))
        return SimpleNamespace(ephemeralOwner=owner, version=version)

    def ensure_path(self, path: str, acl=None) -> None:
        self.requests.append(("exists", path))

    def transaction(self):
        zk = self
        ops: list = []

        class Tx:
            def check(self, path: str, version: int) -> None:
                ops.append(("check", path, version, None))

            def set_data(self, path: str, data: bytes, version: int = -1) -> None:
                ops.append(("set", path, version, data))

            def create(self, path: str, data: bytes, acl=None, ephemeral=False, sequence=False) -> None:
                ops.append(("create", path, -1, data))

            def delete(self, path: str, version: int = -1) -> None:
                ops.append(("delete", path, version, None))

            def commit_async(self) -> _Done:
                return _Done(self.commit, (), {})

            def commit(self):
                from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError, RuntimeInconsistency

                zk.requests.append(("multi", ""))
                nodes, stats = dict(zk.nodes), dict(zk.stats)
                for i, (kind, path, version, data) in enumerate(ops):
                    error = None
                    if kind == "create":
                        error = NodeExistsError() if path in nodes else None
                    elif path not in nodes:
                        error = NoNodeError()
                    elif version != -1 and stats.get(path, (0, 0))[1] != version:
                        error = BadVersionError()
                    if error is not None:
                        return [RolledBackError()] * i + [error] + [RuntimeInconsistency()] * (len(ops) - i - 1)
                    if kind in ("create", "set"):
                        owner, current = stats.get(path, (0, -1))
                        nodes[path], stats[path] = data, (owner, current + 1)
                    elif kind == "delete":
                        del nodes[path], stats[path]
                zk.nodes, zk.stats = nodes, stats
                return [True] * len(ops)

        return Tx()


def test_scale_item2_relabel_is_a_read_and_a_conditional_write_and_never_takes_anothers_node() -> None:
    zk = TxZk()
    group = GroupClient(zk, "g", "g_a")  # type: ignore[arg-type]
    path = "/consumers/g/owners/t/0"
    assert group.claim("t", 0, "g_a-0") is None
    group.fences.establish()  # once per session, when the member registers
    zk.requests.clear()
    assert group.relabel("t", 0, "g_a-1") is True
    # the write is conditional on the version read and on the session's fence node, in one multi
    assert zk.requests == [("get", path), ("multi", "")] and zk.nodes[path] == b"g_a-1"
    # a tool deleted ours and another member created its own, at the same version: untouched
    zk.nodes[path], zk.stats[path] = b"g_b-0", (2, 1)
    assert group.relabel("t", 0, "g_a-0") is False
    group.release("t", 0)
    assert zk.nodes[path] == b"g_b-0"


def test_scale_item2_a_commit_to_a_known_offset_node_is_a_read_and_one_multi_and_still_fenced() -> None:
    zk = TxZk()
    group = GroupClient(zk, "g", "g_a")  # type: ignore[arg-type]
    assert group.claim("t", 0, "g_a-0") is None
    group.fences.establish()  # once per session, when the member registers
    zk.nodes["/consumers/g/offsets/t/0"] = b"5"
    zk.stats["/consumers/g/offsets/t/0"] = (0, 0)
    assert group.read_offset("t", 0) == 5
    zk.requests.clear()
    assert group.commit_offset_if_owner("t", 0, 7, "g_a-0") is True
    assert zk.requests == [("get", "/consumers/g/owners/t/0"), ("multi", "")]  # no exists/ensure_path
    assert zk.nodes["/consumers/g/offsets/t/0"] == b"7"
    # a partition never committed: created in the multi, no existence check
    assert group.claim("t", 1, "g_a-0") is None
    zk.requests.clear()
    assert group.commit_offset_if_owner("t", 1, 3, "g_a-0") is True
    assert zk.requests == [("get", "/consumers/g/owners/t/1"), ("exists", "/consumers/g/offsets/t"), ("multi", "")]
    assert zk.nodes["/consumers/g/offsets/t/1"] == b"3"
    zk.requests.clear()
    assert group.commit_offset_if_owner("t", 0, 8, "g_a-0") is True
    assert zk.requests == [("multi", "")]  # the first commit's read set a watch that has not fired: no read
    # a tool deleted ours and another member created its node at the same version: fenced
    zk.replace("/consumers/g/owners/t/0", b"g_b-0", (2, 0))
    assert group.commit_offset_if_owner("t", 0, 9, "g_a-0") is False
    assert zk.nodes["/consumers/g/offsets/t/0"] == b"8"


def test_a_connection_loss_makes_every_watch_kept_cache_stale_before_its_watch_callback_runs() -> None:
    """kazoo drops every watch when the connection drops, and tells their callbacks later, on its
    callback thread; the state listener's connection_lost() (on the connection thread, first) is
    what makes the next read go to ZooKeeper even if the client reconnected on the same session."""
    zk = FakeZk()
    group = GroupClient(zk, "g", "g_a")  # type: ignore[arg-type]
    zk.add("/brokers/topics/t", json.dumps({"version": 1, "partitions": {"0": [0], "1": [0]}}).encode())
    zk.add("/brokers/ids/0", json.dumps({"host": "h", "port": 9092, "version": 1}).encode())
    assert group.partitions_for_topics(["t"]) == {"t": [0, 1]} and len(group.brokers()) == 1
    zk.requests.clear()
    assert group.partitions_for_topics(["t"]) == {"t": [0, 1]} and len(group.brokers()) == 1
    assert zk.requests == []  # the watches stand: no request
    group.connection_lost()  # SUSPENDED, then back on the same session; no watch callback has run
    assert group.partitions_for_topics(["t"]) == {"t": [0, 1]} and len(group.brokers()) == 1
    assert zk.requests == [("get", "/brokers/topics/t"), ("children", "/brokers/ids")]


def test_a_released_owner_nodes_known_version_is_forgotten_before_our_own_watch_event_runs() -> None:
    """Our delete fires our own data watch, but kazoo runs its callback later (callback thread); a
    peer meanwhile re-creates the node at the same version 0. A commit after the release must read
    the node (and be fenced), not check the version it knew (the simulator, seed 1044265)."""
    zk = TxZk()
    group = GroupClient(zk, "g", "g_a")  # type: ignore[arg-type]
    path = "/consumers/g/owners/t/0"
    assert group.claim("t", 0, "g_a-0") is None
    group.fences.establish()
    assert group.commit_offset_if_owner("t", 0, 7, "g_a-0") is True  # its read set the watch
    for release in ("one", "many"):
        if release == "one":
            group.release("t", 0)
        else:
            group.release_many([("t", 0)])
        assert path not in zk.nodes
        pending = zk.data_watches.pop(path, [])  # our own watch's event: not run yet
        zk.nodes[path], zk.stats[path] = b"g_b-0", (2, 0)  # the peer's claim, version 0 again
        zk.requests.clear()
        assert group.commit_offset_if_owner("t", 0, 9, "g_a-0") is False
        assert zk.requests[0] == ("get", path) and zk.nodes["/consumers/g/offsets/t/0"] == b"7"
        for watch in pending:
            watch(SimpleNamespace(type="DELETED", path=path))
        # ours again for the next round
        del zk.nodes[path], zk.stats[path]
        assert group.claim("t", 0, "g_a-0") is None
        assert group.commit_offset_if_owner("t", 0, 7, "g_a-0") is True
