"""zkconsumer.zookeeper.reachability: the cause of a failed connection, server by server (real sockets)."""

from __future__ import annotations

import socket

import pytest

from zkconsumer import ZookeeperConsumerConnector, ZooKeeperUnavailableError
from zkconsumer.zookeeper.reachability import diagnose


def test_each_server_gets_its_own_cause() -> None:
    with socket.socket() as listening, socket.socket() as closed:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        closed.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
        port, refused = listening.getsockname()[1], closed.getsockname()[1]
        said = diagnose(f"nosuchhost.invalid:2181,127.0.0.1:{refused},127.0.0.1:{port}/kafka").split("; ")
    assert said[0].startswith("nosuchhost.invalid: the name does not resolve")
    assert said[1] == f"127.0.0.1:{refused}: connection refused (is ZooKeeper listening on that port?)"
    assert said[2].startswith(f"127.0.0.1:{port}: accepts connections but no ZooKeeper session was made")


def test_a_server_without_a_port_is_tried_on_2181() -> None:
    assert diagnose("nosuchhost.invalid").startswith("nosuchhost.invalid: the name does not resolve")
    assert diagnose("127.0.0.1").startswith("127.0.0.1:2181: ")


def test_a_connector_that_cannot_connect_says_why() -> None:
    """Before, an unresolvable name and a refused port both said only "could not connect ... within"."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        with pytest.raises(ZooKeeperUnavailableError) as info:
            ZookeeperConsumerConnector({"zookeeper.connect": f"127.0.0.1:{port}", "group.id": "g",
                                        "zookeeper.connection.timeout.ms": 300})
    assert str(info.value).endswith(f": 127.0.0.1:{port}: connection refused (is ZooKeeper listening on that port?)")
