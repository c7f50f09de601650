"""Small read-only probes of the cluster's servers, independent of the code under test.

- :func:`zookeeper_command` sends a ZooKeeper four-letter word (``ruok``, ``dump``...);
  :func:`srvr_fields` and :func:`sessions_with_ephemerals` read the replies.
- :func:`fetch_metadata` asks one broker for topic metadata with a version-0
  MetadataRequest, to see what *that broker's* metadata cache knows.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field
from typing import Dict, List, Sequence, Tuple

_METADATA_API_KEY = 3


def zookeeper_command(host: str, port: int, command: str, timeout: float = 2.0) -> str:
    """Send a four-letter ``command`` to a ZooKeeper server; return its whole reply as text."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(command.encode("ascii"))
        chunks: List[bytes] = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def srvr_fields(reply: str) -> Dict[str, str]:
    """The ``Key: value`` lines of a ``srvr`` reply; ``{}`` from a server not serving requests.

    ``Mode`` is ``standalone``, ``leader`` or ``follower``; ``Zookeeper version`` starts
    with the version number.

    >>> srvr_fields("Zookeeper version: 3.8.0-x, built on y\\nMode: leader\\n")["Mode"]
    'leader'
    """
    fields = (line.split(":", 1) for line in reply.splitlines() if ": " in line)
    return {key.strip(): value.strip() for key, value in fields}


def sessions_with_ephemerals(dump: str) -> Dict[int, List[str]]:
    """Parse the ephemeral-node section of a ZooKeeper 3.4 ``dump`` reply: session id -> paths.

    >>> sessions_with_ephemerals("Sessions with Ephemerals (1):\\n0x15f:\\n\\t/a\\n\\t/b\\n")
    {351: ['/a', '/b']}
    """
    result: Dict[int, List[str]] = {}
    current = None
    in_section = False
    for line in dump.splitlines():
        if line.startswith("Sessions with Ephemerals"):
            in_section = True
        elif in_section and line.startswith("0x") and line.rstrip().endswith(":"):
            current = int(line.strip()[:-1], 16)
            result[current] = []
        elif in_section and current is not None and line.startswith("\t"):
            result[current].append(line.strip())
    return result


@dataclass
class PartitionMetadata:
    """One partition as a broker reports it; ``leader`` is -1 when it has none."""

    error: int
    partition: int
    leader: int
    replicas: List[int] = field(default_factory=list)
    isr: List[int] = field(default_factory=list)


@dataclass
class TopicMetadata:
    """One topic as a broker reports it (``error`` 0 = fine, 3 = unknown, 5 = leader not available)."""

    error: int
    name: str
    partitions: Dict[int, PartitionMetadata] = field(default_factory=dict)


def encode_metadata_request(topics: Sequence[str], correlation_id: int = 1,
                            client_id: str = "zkconsumer-testing") -> bytes:
    """A size-prefixed MetadataRequest v0 for ``topics`` (empty: all topics)."""
    body = struct.pack(">hhi", _METADATA_API_KEY, 0, correlation_id) + _string(client_id)
    body += struct.pack(">i", len(topics)) + b"".join(_string(t) for t in topics)
    return struct.pack(">i", len(body)) + body


def decode_metadata_response(payload: bytes) -> Tuple[int, Dict[int, Tuple[str, int]], Dict[str, TopicMetadata]]:
    """Decode a MetadataResponse v0 (without its size prefix).

    Returns ``(correlation_id, {broker id: (host, port)}, {topic: TopicMetadata})``.
    """
    reader = _Reader(payload)
    correlation_id = reader.int32()
    brokers = {}
    for _ in range(reader.int32()):
        node_id = reader.int32()
        brokers[node_id] = (reader.string(), reader.int32())
    topics = {}
    for _ in range(reader.int32()):
        error, name = reader.int16(), reader.string()
        topic = TopicMetadata(error, name)
        for _ in range(reader.int32()):
            part = PartitionMetadata(reader.int16(), reader.int32(), reader.int32())
            part.replicas = [reader.int32() for _ in range(reader.int32())]
            part.isr = [reader.int32() for _ in range(reader.int32())]
            topic.partitions[part.partition] = part
        topics[name] = topic
    return correlation_id, brokers, topics


def fetch_metadata(host: str, port: int, topics: Sequence[str], timeout: float = 5.0) -> Dict[str, TopicMetadata]:
    """Ask the broker at ``host:port`` for the metadata of ``topics``; raises OSError on I/O failure."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(encode_metadata_request(topics))
        size = struct.unpack(">i", _recv_exactly(sock, 4))[0]
        _, _, result = decode_metadata_response(_recv_exactly(sock, size))
    return result


def _string(text: str) -> bytes:
    data = text.encode("utf-8")
    return struct.pack(">h", len(data)) + data


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    chunks: List[bytes] = []
    while size > 0:
        chunk = sock.recv(min(size, 1 << 20))
        if not chunk:
            raise ConnectionError("broker closed the connection mid-response")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def _unpack(self, fmt: str, size: int) -> int:
        value = struct.unpack_from(fmt, self._data, self._pos)[0]
        self._pos += size
        return int(value)

    def int16(self) -> int:
        return self._unpack(">h", 2)

    def int32(self) -> int:
        return self._unpack(">i", 4)

    def string(self) -> str:
        length = self.int16()
        text = self._data[self._pos:self._pos + length].decode("utf-8")
        self._pos += length
        return text
