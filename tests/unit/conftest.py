"""Unit-tier fixtures shared by the message-set tests."""

from __future__ import annotations

import kafka.codec
import pytest

from zkconsumer.wire.codecs import xxh32


@pytest.fixture
def old_kafka_lz4(monkeypatch: pytest.MonkeyPatch) -> None:
    """kafka-python needs ``xxhash`` for Kafka 0.8/0.9 LZ4 framing; lend it our XXH32 if it is missing."""
    if kafka.codec.xxhash is None:
        class Digest:
            def __init__(self, data: bytes) -> None:
                self.value = xxh32(bytes(data))

            def digest(self) -> bytes:
                return self.value.to_bytes(4, "big")

        monkeypatch.setattr(kafka.codec, "xxhash", type("xxhash", (), {"xxh32": staticmethod(Digest)}))
