"""zkconsumer.testing.probes: a broker's leaders by MetadataRequest v0, and ZooKeeper dump parsing."""

from __future__ import annotations

import socket
import struct
import threading
from typing import List

from zkconsumer.testing.probes import fetch_metadata, sessions_with_ephemerals, srvr_fields


def s(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def test_fetch_metadata_sends_a_v0_request_and_reads_each_partitions_leader() -> None:
    payload = (struct.pack(">i", 1)
               + struct.pack(">i", 1) + struct.pack(">i", 0) + s("127.0.0.1") + struct.pack(">i", 9092)
               + struct.pack(">i", 1) + struct.pack(">h", 0) + s("t")
               + struct.pack(">i", 2)
               + struct.pack(">hii", 0, 0, 0) + struct.pack(">iii", 2, 0, 1) + struct.pack(">ii", 1, 0)
               + struct.pack(">hii", 5, 1, -1) + struct.pack(">ii", 1, 1) + struct.pack(">i", 0))
    requests: List[bytes] = []
    with socket.create_server(("127.0.0.1", 0)) as server:
        def answer() -> None:
            connection, _ = server.accept()
            with connection:
                requests.append(connection.recv(1024))
                connection.sendall(struct.pack(">i", len(payload)) + payload)

        broker = threading.Thread(target=answer, daemon=True)
        broker.start()
        assert fetch_metadata("127.0.0.1", server.getsockname()[1], ["ab"]) == {"t": {0: 0, 1: -1}}
        broker.join(5)
    size, api_key, version, correlation = struct.unpack(">ihhi", requests[0][:12])
    assert (size, api_key, version, correlation) == (len(requests[0]) - 4, 3, 0, 1)
    assert requests[0].endswith(b"\x00\x00\x00\x01\x00\x02ab")


DUMP = """SessionTracker dump:
Session Sets (2):
0 expire at Sat Nov 21 15:24:53 UTC 2026:
1 expire at Sat Nov 21 15:24:54 UTC 2026:
\t0x1a1feb5c0390001
ephemeral nodes dump:
Sessions with Ephemerals (2):
0x1a1feb5c0390001:
\t/controller
\t/brokers/ids/0
0x1a1feb5c0390002:
\t/eph
"""


def test_sessions_with_ephemerals_reads_only_the_ephemeral_section() -> None:
    assert sessions_with_ephemerals(DUMP) == {
        0x1A1FEB5C0390001: ["/controller", "/brokers/ids/0"],
        0x1A1FEB5C0390002: ["/eph"],
    }
    assert sessions_with_ephemerals("Sessions with Ephemerals (0):\n") == {}


def test_srvr_fields_read_mode_and_version_and_nothing_from_a_server_out_of_quorum() -> None:
    reply = ("Zookeeper version: 3.4.6-1569965, built on 02/20/2014 09:09 GMT\nLatency min/avg/max: 0/0/0\n"
             "Received: 3\nMode: follower\nNode count: 4\n")
    fields = srvr_fields(reply)
    assert fields["Mode"] == "follower" and fields["Zookeeper version"].startswith("3.4.6")
    assert srvr_fields("This ZooKeeper instance is not currently serving requests\n") == {}
