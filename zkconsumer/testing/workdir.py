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
    base = Path(parent or tempfile.gettempdir())
    removed: List[Path] = []
    try:
        candidates = [p for p in base.iterdir() if p.name.startswith(PREFIX)]
    except OSError:
        return removed
    for path in candidates:
        if _is_abandoned(path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _is_abandoned(path: Path) -> bool:
    try:
        if not path.is_dir() or path.is_symlink() or path.stat().st_uid != os.getuid():
            return False
        if (path / KEEP_NAME).exists():
            return False
        lock_path = path / LOCK_NAME
        if not lock_path.exists():
            return time.time() - path.stat().st_mtime > _CREATION_GRACE_SECONDS
        with open(lock_path, "rb") as handle:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            return True
    except OSError:
        return False
