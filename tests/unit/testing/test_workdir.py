"""zkconsumer.testing.workdir: cluster directories are swept once their owner is gone."""

from __future__ import annotations

import os
import time
from pathlib import Path

from zkconsumer.testing.workdir import KEEP_NAME, LOCK_NAME, PREFIX, WorkDir, sweep_abandoned


def test_live_directory_is_kept_and_abandoned_one_removed(tmp_path: Path) -> None:
    live = WorkDir(str(tmp_path))
    abandoned = tmp_path / f"{PREFIX}dead"
    abandoned.mkdir()
    (abandoned / LOCK_NAME).touch()  # nobody holds its lock
    unrelated = tmp_path / "something-else"
    unrelated.mkdir()
    assert sweep_abandoned(str(tmp_path)) == [abandoned]
    assert live.path.exists() and unrelated.exists()
    live.remove()
    assert not live.path.exists()
    live.remove()  # idempotent


def test_kept_directory_survives_sweeps(tmp_path: Path) -> None:
    kept = WorkDir(str(tmp_path))
    kept.release()
    assert (kept.path / KEEP_NAME).exists()
    assert sweep_abandoned(str(tmp_path)) == []
    assert kept.path.exists()


def test_lockless_directory_is_only_swept_when_old(tmp_path: Path) -> None:
    young = tmp_path / f"{PREFIX}young"
    young.mkdir()
    old = tmp_path / f"{PREFIX}old"
    old.mkdir()
    an_hour_ago = time.time() - 3600
    os.utime(old, (an_hour_ago, an_hour_ago))
    assert sweep_abandoned(str(tmp_path)) == [old]
    assert young.exists()
