"""harness.ports.refused_port: an address where nothing listens, that nothing can take."""

from __future__ import annotations

import socket

import pytest

from harness.ports import refused_port


def test_a_refused_port_refuses_connections_and_cannot_be_taken() -> None:
    with refused_port() as port:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        with socket.socket() as other, pytest.raises(OSError):
            other.bind(("127.0.0.1", port))  # no server, and no connection's local port


def test_a_released_port_can_be_a_connections_own_address_and_a_refused_one_cannot() -> None:
    """Why a port merely released is no address for "nothing listens": a connection whose local
    port it becomes reaches itself (TCP's simultaneous open) and stays up. Linux does that."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        released = probe.getsockname()[1]
    with socket.socket() as client:
        client.bind(("127.0.0.1", released))
        client.settimeout(2)
        client.connect(("127.0.0.1", released))
        assert client.getpeername() == client.getsockname()
    with refused_port() as port, socket.socket() as client:
        with pytest.raises(OSError):
            client.bind(("127.0.0.1", port))
