"""Free loopback TCP ports for test servers.

Ports are picked *below* the kernel's ephemeral range when there is room: a port
the OS hands out with ``bind(0)`` lies inside that range, and a client connection
made between our check and the JVM's ``bind`` (or before a broker restarts on the
same port) could take it as its local port. Below the range only other servers
compete, and each candidate is checked by binding it.
"""

from __future__ import annotations

import random
import socket
from typing import List, Optional, Tuple

#: Lowest port we pick from when the ephemeral range leaves room below it.
LOWEST_PORT = 10000
#: Linux's default when /proc is unavailable.
DEFAULT_EPHEMERAL_RANGE = (32768, 60999)


def ephemeral_port_range(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> Tuple[int, int]:
    """The kernel's ephemeral port range ``(low, high)``; Linux's default if unreadable."""
    try:
        with open(path) as handle:
            low, high = (int(field) for field in handle.read().split()[:2])
        return low, high
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL_RANGE


def free_ports(count: int, host: str = "127.0.0.1", rng: Optional[random.Random] = None) -> List[int]:
    """Return ``count`` distinct ports on ``host`` that were free a moment ago.

    Every port was bound (without SO_REUSEADDR) and released, all at the same time,
    so the list has no duplicates. The caller's server should bind them promptly.
    Each port is one of 100 random tries from LOWEST_PORT up to the ephemeral range (if
    at least 1000 ports fit there), or else one the OS picks.
    """
    if count < 0:
        raise ValueError("count must be >= 0")
    rng = rng or random.Random()
    highest = ephemeral_port_range()[0] - 1
    tries = 100 if highest - LOWEST_PORT + 1 >= 1000 else 0
    held: List[socket.socket] = []
    try:
        while len(held) < count:
            candidates = [rng.randint(LOWEST_PORT, highest) for _ in range(tries)] + [0]  # 0: the OS picks
            sock = next(filter(None, (_try_bind(host, port) for port in candidates)), None)
            if sock is None:
                raise OSError(f"could not bind any port on {host}")
            held.append(sock)
        return [sock.getsockname()[1] for sock in held]
    finally:
        for sock in held:
            sock.close()


def _try_bind(host: str, port: int) -> Optional[socket.socket]:
    """A socket listening on ``host:port`` (0: a port the OS picks), or None if that port is taken."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((host, port))
        sock.listen(1)
    except OSError:
        sock.close()
        return None
    return sock
