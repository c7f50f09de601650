"""The order in which a member's kazoo client tries ZooKeeper servers after a connection ends
(pure ordering, and its wiring into a stand-in for kazoo's connection handler)."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any, List, Tuple

import pytest

from zkconsumer.zookeeper import server_order
from zkconsumer.zookeeper.server_order import last_server_last

A, B, C = ("zk1", "10.0.0.1", 2181), ("zk2", "10.0.0.2", 2181), ("zk3", "10.0.0.3", 2181)


def test_the_server_left_goes_last_and_the_rest_keep_their_order() -> None:
    assert last_server_last([A, B, C], ("10.0.0.1", 2181)) == [B, C, A]
    assert last_server_last([B, A, C], ("10.0.0.1", 2181)) == [B, C, A]
    assert last_server_last([A, B, C], None) == [A, B, C]
    assert last_server_last([A, B, C], ("10.0.0.9", 2181)) == [A, B, C]  # no longer listed
    assert last_server_last([A, B, C], ("10.0.0.1", 2182)) == [A, B, C]  # same address, other port
    assert last_server_last([A], ("10.0.0.1", 2181)) == [A]  # alone: tried again at once


def test_a_host_name_resolving_to_two_addresses_moves_only_the_address_left() -> None:
    twin = ("zk1", "10.0.0.4", 2181)
    assert last_server_last([A, twin, B], ("10.0.0.1", 2181)) == [twin, B, A]


class FakeConnection:
    """kazoo's connection handler as far as its connect loop is concerned: a round is the list
    ``_expand_client_hosts`` returns (kazoo shuffles it; here, a fixed draw), tried in order."""

    def __init__(self, draw: List[Tuple[str, str, int]]) -> None:
        self.draw = draw
        self.tried: List[Tuple[str, str, int]] = []

    def _expand_client_hosts(self) -> List[Tuple[str, str, int]]:
        return list(self.draw)

    def _connect_attempt(self, host: str, hostip: str, port: int, retry: Any) -> None:
        self.tried.append((host, hostip, port))

    def round(self) -> None:
        for host, hostip, port in self._expand_client_hosts():
            self._connect_attempt(host, hostip, port, None)


def test_installed_a_new_round_starts_away_from_the_last_server_tried() -> None:
    connection = FakeConnection([A, B, C])
    client = SimpleNamespace(_connection=connection)
    assert server_order.install(client)
    connection.round()  # the first round: C was tried last (the member's connection was there)
    connection.draw = [C, A, B]  # kazoo's next shuffle draws C first
    assert connection._expand_client_hosts() == [A, B, C]
    connection.tried.clear()
    connection.round()
    assert connection.tried == [A, B, C]


def test_a_wrapper_with_the_raw_client_is_installed_on_the_raw_one() -> None:
    connection = FakeConnection([A, B])
    assert server_order.install(SimpleNamespace(raw=SimpleNamespace(_connection=connection)))
    connection._connect_attempt(*B, None)
    assert connection._expand_client_hosts() == [A, B]


def test_a_kazoo_without_the_methods_is_left_alone_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    client = SimpleNamespace(_connection=SimpleNamespace())
    with caplog.at_level(logging.WARNING, logger="zkconsumer.zookeeper.server_order"):
        assert not server_order.install(client)
    assert "cannot order" in caplog.text
    assert vars(client._connection) == {}
