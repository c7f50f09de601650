"""GroupClient's read caches (scale items 1-2): members and brokers re-read only what changed."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Dict, List, Tuple

from zkconsumer.group import GroupClient


class FakeZk:
    """Children with a cversion, as ZooKeeper keeps it; counts every request."""

    def __init__(self) -> None:
        self.nodes: Dict[str, bytes] = {}
        self.cversion: Dict[str, int] = {}
        self.requests: List[Tuple[str, str]] = []
        self.client_id = (1, b"")

    def add(self, path: str, data: bytes) -> None:
        parent = path.rsplit("/", 1)[0]
        self.nodes[path] = data
        self.cversion[parent] = self.cversion.get(parent, 0) + 1

    def remove(self, path: str) -> None:
        parent = path.rsplit("/", 1)[0]
        del self.nodes[path]
        self.cversion[parent] = self.cversion.get(parent, 0) + 1

    def get_children(self, path: str, include_data: bool = False):
        self.requests.append(("children", path))
        kids = [p.rsplit("/", 1)[1] for p in self.nodes if p.rsplit("/", 1)[0] == path]
        return (kids, SimpleNamespace(cversion=self.cversion.get(path, 0))) if include_data else kids

    def get(self, path: str):
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
    assert zk.requests == [("children", "/brokers/ids")]
    zk.remove("/brokers/ids/1")
    zk.add("/brokers/ids/1", broker(9094))  # restarted on another port
    assert [b.port for b in group.brokers()] == [9092, 9094]
