"""Unit-tier fixtures shared by the message-set tests."""

from __future__ import annotations

import os

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


#: Unit tests that need the ``spark`` extra (PySpark, pyarrow, numpy), the kerberos extra, the test extra's mypy or
#: Python 3.10+'s ``sys.stdlib_module_names``. scripts/test-pythons runs the unit tier on every supported Python
#: version in a virtualenv with the runtime dependencies only, and sets
#: ``ZKCONSUMER_WITHOUT_SPARK_EXTRA=1``: these are then not collected (rather than skipped, which
#: CI's skip policy would refuse). The project's own .venv (Python 3.11, every extra) runs them all.
NEEDS_SPARK_EXTRA = [
    "spark_integration",                       # spark_integration: PySpark and pyarrow
    "consumer/test_batches.py",                # Arrow batches: pyarrow
    "consumer/test_small_batches.py",          # Arrow batches built in C: pyarrow
    "benchmarks/test_latency_handover.py",     # numpy
    "benchmarks/test_read_batch.py",           # the latency benchmark's reading of batches: pyarrow, numpy
    "test_dependencies.py",                    # every extra installed; sys.stdlib_module_names (3.10+)
    "core/test_config_types_mypy.py",          # mypy, the lint toolchain of the test extra
    "benchmarks/test_drivers.py",              # the examples import PySpark; the drivers, the checkout's .venv
    "core/test_kerberos_reconnect.py",         # pure-sasl, the kerberos extra
]

if os.environ.get("ZKCONSUMER_WITHOUT_SPARK_EXTRA", "") not in ("", "0"):
    collect_ignore = list(NEEDS_SPARK_EXTRA)
