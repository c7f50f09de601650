"""An address where nothing listens, held for a test: ``refused_port()``.

A port merely released (bound to 0, then closed) is no such address: the kernel hands ports
of its ephemeral range to servers and to connections' local ends, and a connection whose
local port is the one it connects to reaches itself (TCP's simultaneous open; Linux does
it) and stays up. A CI run once saw a proxy's "down" target answer that way.
"""

from __future__ import annotations

import contextlib
import socket
from typing import Iterator


@contextlib.contextmanager
def refused_port(host: str = "127.0.0.1") -> Iterator[int]:
    """A port on ``host`` that refuses every connection until the block ends.

    The port is held by a socket that is bound but never listens: a connection to it is
    refused (``ECONNREFUSED``), no server can bind it, and the kernel takes no connection's
    local port from it.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((host, 0))
        yield sock.getsockname()[1]
    finally:
        sock.close()
