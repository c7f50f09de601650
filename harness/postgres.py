"""A throw-away PostgreSQL server for tests and examples, from the system's PostgreSQL binaries.

:class:`LocalPostgres` runs ``initdb`` on a fresh temporary data directory and
starts ``postgres`` on a free loopback port (and a Unix socket in that
directory), as a child process that dies with this one
(:func:`~zkconsumer.testing.processes.spawn`). Authentication is ``trust`` for
the superuser ``zkconsumer``; :attr:`LocalPostgres.dsn` is a libpq connection
string for it.

PostgreSQL refuses to run as root: when this process is root, the server runs
as the unprivileged ``postgres`` account (created by Debian's ``postgresql``
package) and the data directory is created outside any root-only directory
and handed to it.

:func:`postgres_unavailable` says why no server can be started here (no
binaries, root without a ``postgres`` account), for a test's skip reason.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from zkconsumer.testing.ports import free_ports
from zkconsumer.testing.processes import kill_all, signal_group, spawn, tail

__all__ = ["LocalPostgres", "PostgresError", "find_postgres_bin", "postgres_unavailable"]

#: The account the server runs as when this process is root.
SERVER_ACCOUNT = "postgres"
#: The superuser ``initdb`` creates.
SUPERUSER = "zkconsumer"


class PostgresError(RuntimeError):
    """initdb or the server failed (the message holds the end of its log)."""


def find_postgres_bin() -> Optional[Path]:
    """The directory holding ``initdb`` and ``postgres``: ``$ZKCONSUMER_PG_BIN``, Debian's newest
    ``/usr/lib/postgresql/<version>/bin``, or the one of an ``initdb`` on ``PATH``; None if there is none."""
    candidates: List[str] = []
    if os.environ.get("ZKCONSUMER_PG_BIN"):
        candidates.append(os.environ["ZKCONSUMER_PG_BIN"])
    debian = glob.glob("/usr/lib/postgresql/*/bin")
    candidates += sorted(debian, key=lambda p: _version_key(Path(p).parent.name), reverse=True)
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(str(Path(on_path).parent))
    for directory in candidates:
        if (Path(directory) / "initdb").is_file() and (Path(directory) / "postgres").is_file():
            return Path(directory)
    return None


def _version_key(name: str) -> List[int]:
    return [int(part) if part.isdigit() else 0 for part in name.split(".")]


def _server_user() -> Optional[pwd.struct_passwd]:
    """The account to run the server as: None to run as ourselves (not root)."""
    if os.geteuid() != 0:
        return None
    return pwd.getpwnam(SERVER_ACCOUNT)


def postgres_unavailable() -> Optional[str]:
    """Why :class:`LocalPostgres` cannot run here, or None if it can."""
    if find_postgres_bin() is None:
        return ("no PostgreSQL server binaries (initdb, postgres) found: install Debian's postgresql package "
                "(scripts/setup-env does, optionally) or set ZKCONSUMER_PG_BIN")
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SERVER_ACCOUNT)
        except KeyError:
            return f"running as root and there is no {SERVER_ACCOUNT!r} account to run PostgreSQL as"
    return None


class LocalPostgres:
    """One PostgreSQL server on a temporary data directory; removed again by :meth:`stop`.

    ``start()`` returns once the server accepts connections. ``stop()`` is a
    fast shutdown (SIGINT), SIGKILL after ``grace`` seconds, then removes the
    data directory; it is idempotent.
    """

    def __init__(self, port: Optional[int] = None, bin_dir: Optional[Path] = None) -> None:
        self.port = port
        self.bin_dir = bin_dir
        self.root: Optional[Path] = None
        self._process: Optional["subprocess.Popen[Any]"] = None

    @property
    def dsn(self) -> str:
        """libpq connection string of the ``postgres`` database as superuser ``zkconsumer`` (over TCP)."""
        if self.port is None:
            raise RuntimeError("the PostgreSQL server has not been started")
        return f"host=127.0.0.1 port={self.port} user={SUPERUSER} dbname=postgres connect_timeout=10"

    @property
    def log_path(self) -> Path:
        assert self.root is not None
        return self.root / "postgres.log"

    def _run_as(self) -> Dict[str, Any]:
        user = _server_user()
        return {} if user is None else {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}

    def start(self, timeout: float = 60.0) -> str:
        """initdb + start the server; returns :attr:`dsn`. Raises :class:`PostgresError` on failure."""
        reason = postgres_unavailable()
        if reason:
            raise PostgresError(reason)
        bin_dir = self.bin_dir or find_postgres_bin()
        assert bin_dir is not None
        # Not under a root-only directory (pytest's tmp dirs are 0700): the server account must reach it.
        self.root = Path(tempfile.mkdtemp(prefix="zkconsumer-pg-"))
        data, sockets = self.root / "data", self.root / "sockets"
        sockets.mkdir()
        user = _server_user()
        if user is not None:
            for path in (self.root, sockets):
                os.chown(path, user.pw_uid, user.pw_gid)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update({"LC_ALL": "C", "LANG": "C", "HOME": str(self.root)})
        with open(self.log_path, "ab") as log:
            if user is not None:
                os.chown(self.log_path, user.pw_uid, user.pw_gid)
            init = spawn([str(bin_dir / "initdb"), "-D", str(data), "-U", SUPERUSER, "--auth=trust", "-E", "UTF8",
                          "--no-sync", "--no-instructions"],
                         cwd=str(self.root), env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                         **self._run_as())
            try:
                status = init.wait(timeout=max(timeout, 120.0))
            except subprocess.TimeoutExpired:
                kill_all([init])
                status = -1
            if status != 0:
                raise PostgresError(f"initdb failed ({status}):\n{tail(str(self.log_path))}")
            if self.port is None:
                self.port = free_ports(1)[0]
            self._process = spawn([str(bin_dir / "postgres"), "-D", str(data), "-p", str(self.port),
                                   "-h", "127.0.0.1", "-k", str(sockets), "-c", "max_connections=20",
                                   "-c", "shared_buffers=16MB"],
                                  cwd=str(self.root), env=env, stdin=subprocess.DEVNULL, stdout=log,
                                  stderr=subprocess.STDOUT, **self._run_as())
        deadline = time.monotonic() + timeout
        while not self._ready(bin_dir, env):
            if self._process.poll() is not None:
                raise PostgresError(f"postgres exited with status {self._process.returncode}:\n"
                                    f"{tail(str(self.log_path))}")
            if time.monotonic() > deadline:
                self.stop()
                raise PostgresError(f"postgres did not accept connections within {timeout:.0f}s:\n"
                                    f"{tail(str(self.log_path))}")
            time.sleep(0.2)
        return self.dsn

    def _ready(self, bin_dir: Path, env: Dict[str, str]) -> bool:
        probe = bin_dir / "pg_isready"
        if not probe.exists():
            return os.path.exists(self.root / "sockets" / f".s.PGSQL.{self.port}")  # type: ignore[operator]
        result = subprocess.run([str(probe), "-q", "-h", "127.0.0.1", "-p", str(self.port), "-U", SUPERUSER],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
        return result.returncode == 0

    def stop(self, grace: float = 15.0) -> None:
        """Fast shutdown, SIGKILL after ``grace`` seconds; then delete the data directory. Idempotent."""
        if self._process is not None:
            signal_group(self._process, signal.SIGINT)
            try:
                self._process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
            kill_all([self._process])
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def __enter__(self) -> "LocalPostgres":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
