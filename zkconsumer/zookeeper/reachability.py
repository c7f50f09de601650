"""Why a ZooKeeper connect string could not be reached, in words a user can act on.

kazoo reports a failed ``start()`` as a bare time-out, whether a name did not resolve, a port
refused or a server answered something else; the cause is only in its log warnings, which an
application (and the CLI) may silence. :func:`diagnose` asks again, once per server, after the
failure.
"""

from __future__ import annotations

import socket
import urllib.parse


def diagnose(connect: str, timeout_s: float = 1.0) -> str:
    """Why no server of ``connect`` (``host[:port],...[/chroot]``) may have answered, server by server:
    its name does not resolve, the connection is refused, it times out, or it connects (then ZooKeeper
    itself did not answer in time). Bounded: at most ``timeout_s`` per address tried."""
    causes = []
    for server in connect.partition("/")[0].split(","):
        parsed = urllib.parse.urlsplit("zk://" + server.strip())
        host, port = parsed.hostname or server.strip(), parsed.port or 2181
        try:
            addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            causes.append(f"{host}: the name does not resolve ({exc.strerror or exc})")
            continue
        family, kind, proto, _, address = addresses[0]
        try:
            with socket.socket(family, kind, proto) as sock:
                sock.settimeout(timeout_s)
                sock.connect(address)
        except ConnectionRefusedError:
            causes.append(f"{host}:{port}: connection refused (is ZooKeeper listening on that port?)")
        except OSError as exc:
            causes.append(f"{host}:{port}: {exc.strerror or type(exc).__name__} (a firewall, or a wrong address?)")
        else:
            causes.append(f"{host}:{port}: accepts connections but no ZooKeeper session was made (not ZooKeeper, "
                          "a TLS port without zookeeper.ssl settings, or a server without quorum?)")
    return "; ".join(causes)
