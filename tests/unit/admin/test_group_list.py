"""``groups list``'s merge of ZooKeeper's groups with the brokers' (pure logic, fakes for ZooKeeper and brokers).

What the brokers and ZooKeeper really answer is checked against the real cluster in
tests/integration/test_offset_stores.py; here: a broker that cannot be asked is a problem,
never fatal, and only consumer groups are kept.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Tuple

import pytest
from kazoo.exceptions import NoNodeError

from zkconsumer.admin import access, group_list
from zkconsumer.errors import BrokerUnavailableError
from zkconsumer.wire.group_protocol import ListedGroups


class FakeZooKeeper:
    """Just what ``list_all_groups`` reads: children and data of a few nodes."""

    def __init__(self, nodes: Dict[str, bytes], children: Dict[str, List[str]]) -> None:
        self.nodes, self.kids = nodes, children

    def retry(self, call: Callable[..., Any], *args: Any) -> Any:
        return call(*args)

    def get_children(self, path: str) -> List[str]:
        if path not in self.kids:
            raise NoNodeError(path)
        return self.kids[path]

    def get(self, path: str) -> Tuple[bytes, None]:
        if path not in self.nodes:
            raise NoNodeError(path)
        return self.nodes[path], None


def broker(port: int) -> bytes:
    return json.dumps({"version": 1, "host": "127.0.0.1", "port": port}).encode()


def test_a_broker_that_cannot_be_asked_is_a_problem_and_only_consumer_groups_are_kept(monkeypatch) -> None:
    zk = FakeZooKeeper({"/brokers/ids/0": broker(9000), "/brokers/ids/1": broker(9001), "/brokers/ids/2": b"{"},
                       {"/consumers": ["zk-b", "zk-a"], "/brokers/ids": ["0", "1", "2", "3"]})
    answers = {9000: ListedGroups(0, (("modern", "consumer"), ("connect-cluster", "connect"), ("old", "zkconsumer"),
                                      ("zk-a", "consumer"), ("empty", "")))}

    class FakeConnection:
        def __init__(self, host: str, port: int, *args: Any, **kwargs: Any) -> None:
            self.port = port

        def send(self, request: Any) -> ListedGroups:
            if self.port not in answers:
                raise BrokerUnavailableError(f"connection refused by 127.0.0.1:{self.port}")
            return answers[self.port]

        def close(self) -> None:
            pass

    monkeypatch.setattr(access, "BrokerConnection", FakeConnection)
    listing = group_list.list_all_groups(zk)  # type: ignore[arg-type]
    assert listing.zookeeper == ["zk-a", "zk-b"]
    assert listing.kafka == {"modern": 0, "old": 0, "zk-a": 0, "empty": 0}  # connect's group is no consumer group
    assert listing.groups == ["empty", "modern", "old", "zk-a", "zk-b"]
    assert len(listing.problems) == 2  # broker 3 vanished meanwhile: not a problem
    assert listing.problems[0].startswith("broker 1 at 127.0.0.1:9001: connection refused")
    assert listing.problems[1].startswith("broker 2:")


@pytest.mark.parametrize("zookeeper, kafka, expected", [
    (True, True, "both"), (True, False, "zookeeper"), (False, True, "kafka"), (False, False, None)])
def test_where(zookeeper: bool, kafka: bool, expected: object) -> None:
    assert group_list.where(zookeeper, kafka) == expected
