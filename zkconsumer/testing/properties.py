"""Configuration files of the local cluster's JVMs, as pure functions of plain data.

``render_properties`` writes Java ``.properties`` text; the other functions build the
settings of ZooKeeper and of a broker, ``SERVER_LOG4J`` is log4j's. Nothing here does I/O.
"""

from __future__ import annotations

from typing import Dict, Mapping, Optional, Union

PropertyValue = Union[str, int, float, bool]

#: ZooKeeper's tick: sessions expire on tick boundaries, so a short tick makes
#: expiry (of brokers killed with SIGKILL, of test clients) prompt.
ZOOKEEPER_TICK_MS = 500
#: Broker ZooKeeper session timeout: a killed broker disappears from /brokers/ids
#: this long after its death.
BROKER_ZK_SESSION_TIMEOUT_MS = 6000


def format_value(value: PropertyValue) -> str:
    """Java's spelling of a property value: booleans are ``true``/``false``.

    >>> format_value(True), format_value(3), format_value("x")
    ('true', '3', 'x')
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}


def _escape(text: str, is_key: bool) -> str:
    """Escape for a .properties file (read by Java as ISO-8859-1 with \\uXXXX escapes)."""
    out = []
    for index, char in enumerate(text):
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif (is_key and char in "=:#! ") or (char == " " and index == 0):
            out.append("\\" + char)
        elif not " " <= char <= "~":  # outside printable ASCII: \uXXXX per UTF-16 code unit
            units = char.encode("utf-16-be").hex()
            out.extend(f"\\u{units[i:i + 4]}" for i in range(0, len(units), 4))
        else:
            out.append(char)
    return "".join(out)


def render_properties(props: Mapping[str, PropertyValue]) -> str:
    """Java ``.properties`` text: one ``key=value`` line per entry, in the mapping's order.

    >>> render_properties({"log.dirs": "/tmp/a b", "delete.topic.enable": True})
    'log.dirs=/tmp/a b\\ndelete.topic.enable=true\\n'
    """
    return "".join(f"{_escape(key, True)}={_escape(format_value(value), False)}\n" for key, value in props.items())


def merge(defaults: Mapping[str, PropertyValue],
          overrides: Optional[Mapping[str, Optional[PropertyValue]]]) -> Dict[str, str]:
    """``defaults`` updated by ``overrides``; an override of ``None`` removes the key.

    >>> merge({"a": 1, "b": 2}, {"b": None, "c": False})
    {'a': '1', 'c': 'false'}
    """
    merged = {**defaults, **(overrides or {})}
    return {key: format_value(value) for key, value in merged.items() if value is not None}


def zookeeper_properties(data_dir: str, port: int,
                         overrides: Optional[Mapping[str, Optional[PropertyValue]]] = None) -> Dict[str, str]:
    """A standalone ZooKeeper server on 127.0.0.1:``port`` storing data in ``data_dir``.

    Sessions may ask for 1 s to 60 s; the connection limit per client address is
    lifted (every test client comes from 127.0.0.1). ``overrides`` win; an override
    of ``None`` removes a setting.

    >>> zookeeper_properties("/d", 2181, {"maxClientCnxns": 10})["maxClientCnxns"]
    '10'
    """
    return merge({
        "dataDir": data_dir,
        "clientPort": port,
        "clientPortAddress": "127.0.0.1",
        "tickTime": ZOOKEEPER_TICK_MS,
        "minSessionTimeout": 2 * ZOOKEEPER_TICK_MS,
        "maxSessionTimeout": 60000,
        "maxClientCnxns": 0,
        "autopurge.purgeInterval": 0,
    }, overrides)


def broker_properties(broker_id: int, port: int, log_dir: str, zk_connect: str, *,
                      cluster_size: int, partitions: int,
                      overrides: Optional[Mapping[str, Optional[PropertyValue]]] = None) -> Dict[str, str]:
    """Settings of Kafka 0.9 broker ``broker_id`` in a cluster of ``cluster_size`` brokers.

    Tuned for tests on a small machine: loopback only, few threads, a 16 MiB log-cleaner
    buffer (the default 128 MiB would not fit a small heap), auto-created topics with
    ``partitions`` partitions and replication 1, deletable topics, a replicated offsets
    topic with 4 partitions, no automatic preferred-leader moves (leaders change only
    when a test makes them), quick controlled shutdown, ZooKeeper session 6 s.
    ``overrides`` win; an override of ``None`` removes a setting.
    """
    return merge({
        "broker.id": broker_id,
        "host.name": "127.0.0.1",
        "port": port,
        "advertised.host.name": "127.0.0.1",
        "advertised.port": port,
        "log.dirs": log_dir,
        "zookeeper.connect": zk_connect,
        "zookeeper.session.timeout.ms": BROKER_ZK_SESSION_TIMEOUT_MS,
        "zookeeper.connection.timeout.ms": 10000,
        "num.partitions": partitions,
        "default.replication.factor": 1,
        "auto.create.topics.enable": True,
        "delete.topic.enable": True,
        "offsets.topic.replication.factor": min(3, cluster_size),
        "offsets.topic.num.partitions": 4,
        "auto.leader.rebalance.enable": False,
        "controlled.shutdown.enable": True,
        "controlled.shutdown.max.retries": 1,
        "controlled.shutdown.retry.backoff.ms": 500,
        "num.network.threads": 2,
        "num.io.threads": 2,
        "background.threads": 2,
        "num.recovery.threads.per.data.dir": 1,
        "log.cleaner.dedupe.buffer.size": 16 * 1024 * 1024,
        "log.cleaner.threads": 1,
    }, overrides)


#: The log4j 1.2 configuration of the cluster's JVMs: INFO and above to stdout (each JVM's
#: log file), minus per-request and client-library chatter.
SERVER_LOG4J = {
    "log4j.rootLogger": "INFO, console",
    "log4j.appender.console": "org.apache.log4j.ConsoleAppender",
    "log4j.appender.console.Target": "System.out",
    "log4j.appender.console.layout": "org.apache.log4j.PatternLayout",
    "log4j.appender.console.layout.ConversionPattern": "[%d] %p %m (%c)%n",
    "log4j.logger.kafka.request.logger": "WARN",
    "log4j.logger.kafka.network.Processor": "WARN",
    "log4j.logger.org.I0Itec.zkclient": "WARN",
    "log4j.logger.org.apache.zookeeper.ZooKeeper": "WARN",
    "log4j.logger.org.apache.zookeeper.ClientCnxn": "WARN",
}
