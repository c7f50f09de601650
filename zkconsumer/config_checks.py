"""Checks of :mod:`zkconsumer.config` beyond its table: ``zookeeper.connect`` in the form kazoo reads,
checked before any connection is tried, and the hint an unknown property name gets.

May import: errors.
"""

from __future__ import annotations

import difflib
import re
import urllib.parse
from typing import Collection

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


#: Properties of Kafka's newer clients (and what this consumer does instead), named in the error.
_NEWER_CLIENTS = {
    "bootstrap.servers": "this consumer finds the brokers through zookeeper.connect, as Kafka 0.8's does",
    "enable.auto.commit": "did you mean auto.commit.enable (Kafka 0.8's name)?",
    "key.deserializer": "pass key_decoder= to create_message_streams instead",
    "value.deserializer": "pass value_decoder= to create_message_streams instead",
    "max.poll.records": "a stream hands out one message at a time (stream.batches(max_rows=...) for batches)",
}


def _suggestion(name: str, known: Collection[str]) -> str:
    newer = _NEWER_CLIENTS.get(name.strip().lower())
    if newer:
        return f"; {newer}"
    candidate = name.strip().lower().replace("_", ".")
    if candidate in known:
        return f"; did you mean {candidate}?"
    close = difflib.get_close_matches(candidate, list(known), n=1, cutoff=0.7)
    if close:
        return f"; did you mean {close[0]}?"
    return " (ConsumerConfig.PROPERTIES lists the accepted properties)"


def unknown_property(name: str, known: Collection[str]) -> ConfigurationError:
    """The error for a property name not in ``known``, with the closest known name or what to use instead."""
    return ConfigurationError(name, f"unknown property {name!r}{_suggestion(name, known)}")
