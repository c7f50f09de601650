"""zkconsumer.testing.probes: MetadataRequest v0 bytes and ZooKeeper dump parsing."""

from __future__ import annotations

import struct

from zkconsumer.testing.probes import decode_metadata_response, encode_metadata_request, sessions_with_ephemerals, srvr_fields


def test_metadata_request_v0_layout() -> None:
    data = encode_metadata_request(["ab"], correlation_id=7, client_id="c")
    size, api_key, version, correlation = struct.unpack(">ihhi", data[:12])
    assert (size, api_key, version, correlation) == (len(data) - 4, 3, 0, 7)
    assert data[12:] == b"\x00\x01c" + b"\x00\x00\x00\x01" + b"\x00\x02ab"


def s(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def test_metadata_response_v0_decoding() -> None:
    payload = (struct.pack(">i", 7)
               + struct.pack(">i", 1) + struct.pack(">i", 0) + s("127.0.0.1") + struct.pack(">i", 9092)
               + struct.pack(">i", 1) + struct.pack(">h", 0) + s("t")
               + struct.pack(">i", 2)
               + struct.pack(">hii", 0, 0, 0) + struct.pack(">iii", 2, 0, 1) + struct.pack(">ii", 1, 0)
               + struct.pack(">hii", 5, 1, -1) + struct.pack(">ii", 1, 1) + struct.pack(">i", 0))
    correlation, brokers, topics = decode_metadata_response(payload)
    assert correlation == 7
    assert brokers == {0: ("127.0.0.1", 9092)}
    topic = topics["t"]
    assert topic.error == 0
    assert (topic.partitions[0].leader, topic.partitions[0].replicas, topic.partitions[0].isr) == (0, [0, 1], [0])
    assert (topic.partitions[1].error, topic.partitions[1].leader, topic.partitions[1].isr) == (5, -1, [])


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
