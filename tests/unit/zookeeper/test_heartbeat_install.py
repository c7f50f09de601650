"""``SessionHeartbeat.install`` on a real, unstarted kazoo client: it hooks what it needs.

The heartbeat wraps private methods of kazoo's connection handler (``HOOKED_METHODS``); a
kazoo release that renamed one would silently leave kazoo's own pings and no reply proofs.
These tests fail instead, and setup.cfg caps kazoo at the releases they passed on.
"""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient

from zkconsumer.zookeeper.heartbeat import HOOKED_METHODS, NATIVE_AVAILABLE, SessionHeartbeat


@pytest.fixture
def client() -> KazooClient:
    return KazooClient(hosts="127.0.0.1:1", timeout=6.0)  # never started: nothing connects


@pytest.mark.parametrize("mode", ["kafka", "quiet"])
def test_install_wraps_every_connection_method_it_needs_on_that_instance_only(client: KazooClient,
                                                                             mode: str) -> None:
    connection = client._connection
    originals = {name: getattr(connection, name) for name in HOOKED_METHODS}
    heartbeat = SessionHeartbeat.install(client, mode)
    try:
        assert heartbeat.observing, "kazoo's connection handler lacks a method the heartbeat needs"
        for name in HOOKED_METHODS:
            assert name in vars(connection), f"{name} not wrapped on the instance"
            assert getattr(connection, name) is not originals[name]
        untouched = KazooClient(hosts="127.0.0.1:1")._connection
        assert not set(HOOKED_METHODS) & set(vars(untouched)), "the class itself was changed"
    finally:
        heartbeat.stop()


def test_the_default_is_kafkas_margins_from_the_native_thread(client: KazooClient) -> None:
    """CI builds the C extension: the default must run Kafka's cadence on the thread that needs no GIL."""
    assert NATIVE_AVAILABLE, "the _heartbeat C extension did not build"
    heartbeat = SessionHeartbeat.install(client)
    try:
        assert (heartbeat.mode, heartbeat.pinger, heartbeat.effective) == ("kafka", "native", "kafka/native")
        assert heartbeat.longest_silence(6.0) == pytest.approx(2.0)  # a ping within T/3
    finally:
        heartbeat.stop()


def test_quiet_is_opt_in_and_kazoo_pings_over_tls() -> None:
    quiet = SessionHeartbeat.install(KazooClient(hosts="127.0.0.1:1"), "quiet")
    tls = SessionHeartbeat.install(KazooClient(hosts="127.0.0.1:1", use_ssl=True), "quiet")
    try:
        assert quiet.effective == "quiet/native"
        assert quiet.longest_silence(6.0) == pytest.approx(6.0 * (0.7 + 1 / 30))
        assert tls.effective == "kafka/kazoo"  # the native thread writes plain TCP only
    finally:
        quiet.stop()
        tls.stop()


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="kafka, quiet"):
        SessionHeartbeat("loud")


def test_a_kazoo_without_the_methods_is_left_as_it_is() -> None:
    class Bare:
        _connection = object()

    heartbeat = SessionHeartbeat.install(Bare(), "quiet")
    assert not heartbeat.observing and heartbeat.effective == "kafka/kazoo"
