"""Temporary directories of local clusters, removed even after a crash.

A cluster's directory holds an ``owner.lock`` file on which the owning process keeps
an exclusive ``flock`` for the cluster's lifetime. The kernel drops the lock when that
process dies, however it dies, so a later cluster can tell an abandoned directory
(lock obtainable) from a live one (lock held) and remove the abandoned ones.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path
from typing import IO, List, Optional

PREFIX = "zkconsumer-cluster-"
LOCK_NAME = "owner.lock"
#: Present in a directory kept on purpose (for post-mortems): never swept.
KEEP_NAME = "KEEP"
#: A directory younger than this without a lock file may be one being created.
_CREATION_GRACE_SECONDS = 60.0


class WorkDir:
    """A fresh temporary directory, locked by this process until :meth:`remove`."""

    def __init__(self, parent: Optional[str] = None) -> None:
        self.path = Path(tempfile.mkdtemp(prefix=PREFIX, dir=parent))
        self._lock: Optional[IO[bytes]] = open(self.path / LOCK_NAME, "wb")
        fcntl.flock(self._lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)

    def remove(self) -> None:
        """Delete the directory and release the lock; safe to call twice."""
        if self._lock is None:
            return
        shutil.rmtree(self.path, ignore_errors=True)
        self._lock.close()
        self._lock = None

    def release(self) -> None:
        """Keep the directory (for post-mortems) and release the lock; sweeps leave it alone."""
        if self._lock is not None:
            (self.path / KEEP_NAME).touch()
            self._lock.close()
            self._lock = None


def sweep_abandoned(parent: Optional[str] = None) -> List[Path]:
    """Remove cluster directories in ``parent`` (default: the temp dir) whose owner is gone.

    Only directories owned by this user are considered. Returns the removed paths.
    """
    removed = [path for path in Path(parent or tempfile.gettempdir()).glob(PREFIX + "*") if _is_abandoned(path)]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed


def _is_abandoned(path: Path) -> bool:
    """Ours (and not a link), not kept, and its lock free; without a lock file, over a minute old."""
    try:
        info = path.lstat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or (path / KEEP_NAME).exists():
            return False
        if not (path / LOCK_NAME).exists():  # being created, or its owner died before locking it
            return time.time() - info.st_mtime > _CREATION_GRACE_SECONDS
        with open(path / LOCK_NAME, "rb") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError while its owner lives
        return True
    except OSError:
        return False
