"""Checks of :mod:`zkconsumer.config` beyond its table: ``zookeeper.connect`` in the form kazoo reads,
checked before any connection is tried, the rules that tie properties together
(:func:`check_combinations`), and the hint an unknown property name gets.

May import: errors.
"""

from __future__ import annotations

import difflib
import re
import urllib.parse
from typing import Any, Collection, Mapping, Optional

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



def _check_consumer_id(value: Optional[str]) -> None:
    if value is not None and ("/" in value or value in (".", "..") or any(ord(c) < 32 for c in value)):
        raise ConfigurationError("consumer.id", f"invalid value {value!r}: it becomes a ZooKeeper node name")


def _check_zookeeper_auth(value: Optional[str]) -> None:
    if value is not None:
        user, colon, _ = value.partition(":")
        if not colon or not user:
            raise ConfigurationError("zookeeper.auth", "invalid value '***': expected user:password")


def check_combinations(v: Mapping[str, Any]) -> None:
    """The rules that tie properties together (and the forms of ``zookeeper.connect``, ``consumer.id``,
    ``zookeeper.auth``), on the parsed ``values`` of every property; raises
    :class:`~zkconsumer.errors.ConfigurationError` naming the property to change."""
    check_zookeeper_connect(v["zookeeper.connect"])
    _check_consumer_id(v["consumer.id"])
    _check_zookeeper_auth(v["zookeeper.auth"])
    if v["fetch.wait.max.ms"] > v["socket.timeout.ms"]:
        raise ConfigurationError(
            "fetch.wait.max.ms",
            f"{v['fetch.wait.max.ms']} exceeds socket.timeout.ms ({v['socket.timeout.ms']}); socket.timeout.ms "
            "should always be at least fetch.wait.max.ms to prevent unnecessary socket timeouts",
        )
    if v["zookeeper.acl.enable"] and v["zookeeper.auth"] is None and not v["zookeeper.sasl.enabled"]:
        raise ConfigurationError("zookeeper.acl.enable", "true requires zookeeper.auth (user:password) or "
                                 "zookeeper.sasl.enabled")
    if v["sasl.kerberos.keytab"] is not None and v["sasl.kerberos.principal"] is None:
        raise ConfigurationError("sasl.kerberos.principal", "is required with sasl.kerberos.keytab")
    if v["ssl.keyfile"] is not None and v["ssl.certfile"] is None:
        raise ConfigurationError("ssl.keyfile", "is set but ssl.certfile is not")
    if v["group.membership"] == "kafka" and v["offsets.storage"] != "kafka":
        raise ConfigurationError(
            "group.membership",
            "kafka requires offsets.storage=kafka: only the coordinator can fence commits by generation "
            "(the documentation's page Migration from Kafka's consumer moves the offsets first)",
        )
    if v["group.membership"] == "kafka" and v["heartbeat.interval.ms"] >= v["session.timeout.ms"]:
        raise ConfigurationError(
            "heartbeat.interval.ms",
            f"{v['heartbeat.interval.ms']} must be below session.timeout.ms ({v['session.timeout.ms']})",
        )


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
