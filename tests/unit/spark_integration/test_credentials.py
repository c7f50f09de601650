"""spark_integration.credentials: where a keytab is found on Spark's driver and executors (no Spark started)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.core.files import SparkFiles

from spark_integration.credentials import consumer_config, resolve_keytab
from zkconsumer import ConfigurationError, ConsumerConfig

KERBEROS = {"zookeeper.connect": "localhost:2181", "group.id": "g", "security.protocol": "SASL_PLAINTEXT",
            "sasl.kerberos.principal": "zkclient@EXAMPLE.COM"}


@pytest.fixture
def spark_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Python worker's SparkFiles directory (as PySpark's worker sets it up), and a cwd without the keytab."""
    root = tmp_path / "userFiles-1234"
    root.mkdir()
    monkeypatch.setattr(SparkFiles, "_root_directory", str(root))
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return root


def test_without_kerberos_or_keytab_the_properties_are_unchanged(spark_files: Path) -> None:
    plain = {"zookeeper.connect": "z:2181", "group.id": "g", "sasl.kerberos.keytab": "nowhere.keytab"}
    assert resolve_keytab(plain) == plain  # Kerberos is off: the keytab is never read
    cache_login = {k: v for k, v in KERBEROS.items() if k != "sasl.kerberos.principal"}
    assert resolve_keytab(cache_login) == cache_login


def test_a_relative_keytab_is_found_in_the_working_directory_first(spark_files: Path) -> None:
    Path("c.keytab").write_bytes(b"here")
    (spark_files / "c.keytab").write_bytes(b"shipped")
    resolved = resolve_keytab({**KERBEROS, "sasl.kerberos.keytab": "c.keytab"})
    assert resolved["sasl.kerberos.keytab"] == str(Path("c.keytab").resolve())


def test_a_relative_keytab_is_found_among_the_spark_files(spark_files: Path) -> None:
    (spark_files / "c.keytab").write_bytes(b"shipped")
    config = consumer_config({**KERBEROS, "zookeeper.sasl.enabled": "true", "security.protocol": "PLAINTEXT",
                              "sasl.kerberos.keytab": "c.keytab"})
    assert config.sasl_kerberos_keytab == str(spark_files / "c.keytab")


def test_a_streaming_querys_own_files_directory_falls_back_to_the_drivers(spark_files: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    (spark_files / "c.keytab").write_bytes(b"shipped")
    job = spark_files / "streaming_job"
    job.mkdir()
    monkeypatch.setattr(SparkFiles, "_root_directory", str(job))
    assert resolve_keytab({**KERBEROS, "sasl.kerberos.keytab": "c.keytab"})["sasl.kerberos.keytab"] == \
        str(spark_files / "c.keytab")


def test_a_keytab_found_nowhere_is_named_with_both_ways_to_provide_it(spark_files: Path) -> None:
    with pytest.raises(ConfigurationError) as info:
        resolve_keytab({**KERBEROS, "sasl.kerberos.keytab": "c.keytab"})
    assert info.value.property == "sasl.kerberos.keytab"
    text = str(info.value)
    assert "cannot read keytab 'c.keytab'" in text and str(spark_files) in text
    assert "same absolute path on every node" in text and "--files /path/to/c.keytab" in text
    with pytest.raises(ConfigurationError, match="cannot read keytab '/no/such.keytab'"):
        resolve_keytab({**KERBEROS, "sasl.kerberos.keytab": "/no/such.keytab"})


def test_a_consumer_config_is_used_as_given() -> None:
    config = ConsumerConfig({**KERBEROS, "sasl.kerberos.keytab": "/no/such.keytab"})
    assert consumer_config(config) is config
