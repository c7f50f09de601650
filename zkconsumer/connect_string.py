"""``zookeeper.connect``: the form kazoo reads, checked before any connection is tried.

May import: errors.
"""

from __future__ import annotations

import re
import urllib.parse

from .errors import ConfigurationError

CONNECT_FORM = "expected host:port[,host:port...][/chroot], e.g. zk1:2181,zk2:2181/kafka"


def check_zookeeper_connect(value: str) -> None:
    """Each server as kazoo reads it (``host[:port]``, IPv6 in brackets), so a typo fails here and
    not as a connection that times out later."""
    scheme = re.match(r"\s*([A-Za-z][A-Za-z0-9+.-]*)://", value)
    if scheme:
        raise ConfigurationError("zookeeper.connect", f"invalid value {value!r}: no {scheme.group(1)}:// scheme, "
                                                      f"{CONNECT_FORM}")
    hosts, slash, chroot = value.partition("/")
    if not hosts or any(not h.strip() for h in hosts.split(",")):
        raise ConfigurationError("zookeeper.connect", f"invalid value {value!r}: {CONNECT_FORM}")
    for host in hosts.split(","):
        try:
            parsed = urllib.parse.urlsplit("zk://" + host.strip())
            port = parsed.port
        except ValueError:
            parsed, port = None, None
        if parsed is None or not parsed.hostname or parsed.path or parsed.username is not None or (
                ":" in host.strip().rsplit("]", 1)[-1] and port is None):
            raise ConfigurationError("zookeeper.connect", f"invalid server {host.strip()!r} in {value!r}: "
                                                          f"{CONNECT_FORM} (the port a number from 1 to 65535)")
        if port is not None and not 0 < port < 65536:
            raise ConfigurationError("zookeeper.connect", f"invalid port {port} in {value!r}: {CONNECT_FORM}")
    if slash and chroot and (chroot.endswith("/") or "//" in chroot):
        raise ConfigurationError("zookeeper.connect", f"invalid chroot in {value!r}: /{chroot}")
