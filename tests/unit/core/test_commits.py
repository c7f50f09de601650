"""zkconsumer.commits: the commit vocabulary every offset store and committer shares, and the storage interface."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

from zkconsumer.commits import NO_GENERATION, CommitEntry, CommitOutcome, Generation, OffsetStorage
from zkconsumer.errors import OffsetStorageError
from zkconsumer.offsets.storage import DualOffsetStorage, KafkaOffsetStorage
from zkconsumer.zookeeper.offset_storage import ZooKeeperOffsetStorage


def test_no_generation_is_kafkas_default_and_means_zookeeper_membership() -> None:
    assert NO_GENERATION == Generation(-1, "") and NO_GENERATION.generation_id == -1 and NO_GENERATION.member_id == ""
    assert not NO_GENERATION.managed


@pytest.mark.parametrize("generation_id", [0, 1, 2**31 - 1])
def test_a_coordinators_generation_is_managed_from_zero_on(generation_id: int) -> None:
    assert Generation(generation_id, "member-1").managed


def test_a_generation_is_a_value() -> None:
    """Compared and hashed by its fields: a fence taken before a rebalance equals one taken after only if
    neither the generation nor the member id moved."""
    assert Generation(3, "m") == Generation(3, "m") and hash(Generation(3, "m")) == hash(Generation(3, "m"))
    assert Generation(3, "m") != Generation(4, "m") and Generation(3, "m") != Generation(3, "n")
    generation_id, member_id = Generation(5, "m")
    assert (generation_id, member_id) == (5, "m")


def test_a_commit_entry_is_changed_unless_told_and_keys_by_its_partition() -> None:
    entry = CommitEntry("t", 2, 100, "g_c1-0")
    assert entry.changed and entry.tp == ("t", 2)
    assert not CommitEntry("t", 2, 100, "g_c1-0", changed=False).changed
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.offset = 101  # type: ignore[misc]
    assert {entry: 1}[CommitEntry("t", 2, 100, "g_c1-0")] == 1


def test_a_commit_outcome_starts_empty_with_lists_of_its_own() -> None:
    first, second = CommitOutcome(), CommitOutcome()
    assert (first.committed, first.fenced, first.error) == ([], [], None)
    first.committed.append(("t", 0))
    first.fenced.append(("t", 1))
    assert second.committed == [] and second.fenced == []
    failed = CommitOutcome(committed=[("t", 0)], error=OffsetStorageError("timed out", retriable=True))
    assert failed.fenced == [] and isinstance(failed.error, OffsetStorageError)


@pytest.mark.parametrize("storage, name, rewrites", [
    (ZooKeeperOffsetStorage, "zookeeper", False),
    (KafkaOffsetStorage, "kafka", True),
    (DualOffsetStorage, "kafka+zookeeper", True),
])
def test_every_storage_offers_the_interface(storage: Any, name: str, rewrites: bool) -> None:
    """Each store has every method of :class:`OffsetStorage` with its parameters, and says whether it rewrites
    unchanged offsets (Kafka's retention) or skips them (ZooKeeper)."""
    assert storage.name == name and storage.rewrites_unchanged is rewrites
    for method in ("read", "write", "out_of_sync", "close"):
        wanted = inspect.signature(getattr(OffsetStorage, method))
        got = inspect.signature(getattr(storage, method))
        assert [(p.name, p.kind, p.default) for p in got.parameters.values()] == \
               [(p.name, p.kind, p.default) for p in wanted.parameters.values()], (storage, method)
