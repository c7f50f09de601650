"""zkconsumer.testing.ports: free loopback ports below the ephemeral range."""

from __future__ import annotations

import random
import socket
from pathlib import Path

import pytest

from zkconsumer.testing import ports
from zkconsumer.testing.ports import DEFAULT_EPHEMERAL_RANGE, ephemeral_port_range, free_ports


def test_free_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    ports = free_ports(8)
    assert len(set(ports)) == 8
    low = ephemeral_port_range()[0]
    for port in ports:
        if low - 10000 >= 1000:
            assert 10000 <= port < low
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_free_ports_of_zero_is_empty() -> None:
    assert free_ports(0) == []


def test_free_ports_skip_a_port_in_use() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        taken = busy.getsockname()[1]
        rng = random.Random(7)
        assert taken not in free_ports(50, rng=rng)
        with socket.create_connection(("127.0.0.1", taken), timeout=0.5):
            pass  # it really is taken: something accepts there


def test_ephemeral_range_is_read_from_proc_or_defaults(tmp_path: Path) -> None:
    custom = tmp_path / "range"
    custom.write_text("40000\t50000\n")
    assert ephemeral_port_range(str(custom)) == (40000, 50000)
    assert ephemeral_port_range(str(tmp_path / "missing")) == DEFAULT_EPHEMERAL_RANGE


def test_without_room_below_the_ephemeral_range_the_os_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "ephemeral_port_range", lambda: (10500, 60999))
    assert all(port >= 10500 for port in free_ports(20))
    monkeypatch.setattr(ports, "ephemeral_port_range", lambda: (32768, 60999))
    assert all(10000 <= port < 32768 for port in free_ports(20))
