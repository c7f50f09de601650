"""Small read-only probes of the cluster's servers, independent of zkconsumer's own code.

- :func:`zookeeper_command` sends a ZooKeeper four-letter word (``ruok``, ``dump``...);
  :func:`srvr_fields` and :func:`sessions_with_ephemerals` read the replies.
- :func:`fetch_metadata` asks one broker for the leaders of topics with a version-0
  MetadataRequest, to see what *that broker's* metadata cache knows.
"""

from __future__ import annotations

import socket
import struct
from typing import BinaryIO, Dict, List, Sequence


def zookeeper_command(host: str, port: int, command: str, timeout: float = 2.0) -> str:
    """Send a four-letter ``command`` to a ZooKeeper server; return its whole reply as text."""
    with socket.create_connection((host, port), timeout=timeout) as sock, sock.makefile("rb") as reply:
        sock.sendall(command.encode("ascii"))
        return reply.read().decode("utf-8", "replace")  # the server closes the connection after replying


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


def fetch_metadata(host: str, port: int, topics: Sequence[str], timeout: float = 5.0) -> Dict[str, Dict[int, int]]:
    """Ask the broker at ``host:port`` (a MetadataRequest v0, kafka-python's codec) for ``topics``.

    Returns ``{topic: {partition: leader}}`` as that broker's metadata cache has it (-1:
    no leader; a topic it does not know has no partitions). Raises OSError on I/O failure.
    """
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse  # only this probe needs them

    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics], version=0)
    request.with_header(correlation_id=1, client_id="zkconsumer-testing")
    with socket.create_connection((host, port), timeout=timeout) as sock, sock.makefile("rb") as stream:
        sock.sendall(request.encode(header=True, framed=True))
        size = struct.unpack(">i", _read_exactly(stream, 4))[0]
        response = MetadataResponse.decode(_read_exactly(stream, size), version=0, header=True)
    return {t.name: {p.partition_index: p.leader_id for p in t.partitions} for t in response.topics}


def _read_exactly(stream: BinaryIO, size: int) -> bytes:
    data = stream.read(size)  # a buffered socket file reads until ``size`` bytes or the end of the stream
    if len(data) < size:
        raise ConnectionError("broker closed the connection mid-response")
    return data
