"""Export and import of committed offsets in the file format of Kafka's
``ExportZkOffsets`` / ``ImportZkOffsets``: one ``/consumers/<g>/offsets/<t>/<p>:<offset>`` per line."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from kazoo.client import KazooClient

from ..zookeeper import zkformat
from . import atomic, reads
from .errors import OffsetFileError
from .reads import Progress, list_groups

__all__ = ["OffsetEntry", "export_offsets", "format_export", "parse_export", "import_offsets"]


_OFFSET_PATH = re.compile(r"/consumers/([^/]+)/offsets/([^/]+)/([0-9]+)")


@dataclass(frozen=True)
class OffsetEntry:
    """One committed offset: ``group``, ``topic``, ``partition`` and the ``offset`` node's value."""

    group: str
    topic: str
    partition: int
    offset: int

    @property
    def path(self) -> str:
        return zkformat.GroupPaths(self.group).offset(self.topic, self.partition)


def export_offsets(zk: KazooClient, groups: Optional[Sequence[str]] = None) -> List[OffsetEntry]:
    """Every committed offset of ``groups`` (all groups when ``None``), sorted.

    As ExportZkOffsets, partitions without an offset node are skipped. Raises
    :class:`UnknownGroupError` for a named group that does not exist, and
    :class:`~zkconsumer.errors.MalformedZnodeError` for an unreadable offset node.
    """
    if groups is None:
        groups = list_groups(zk)
    else:
        for group in groups:
            reads.require_group(zk, group)
    found: List[Tuple[str, str, int, str]] = []
    for group in groups:
        paths = zkformat.GroupPaths(group)
        for topic in reads.children(zk, paths.offsets):
            for partition in reads.partition_ids(reads.children(zk, paths.offsets_topic(topic))):
                found.append((group, topic, partition, paths.offset(topic, partition)))
    data = reads.get_many(zk, [path for *_, path in found])
    return [OffsetEntry(group, topic, partition, zkformat.decode_offset(path, data[path]))
            for group, topic, partition, path in found if data[path] is not None]


def format_export(entries: Iterable[OffsetEntry]) -> str:
    """ExportZkOffsets' file format: one ``/consumers/<g>/offsets/<t>/<p>:<offset>`` per line.

    >>> format_export([OffsetEntry("g", "t", 0, 42)])
    '/consumers/g/offsets/t/0:42\\n'
    """
    return "".join(f"{e.path}:{e.offset}\n" for e in entries)


def parse_export(text: str, source: str = "<input>") -> List[OffsetEntry]:
    """Parse an ExportZkOffsets file; ImportZkOffsets' format, validated.

    Each line is ``<path>:<offset>``; blank lines and lines starting with ``#``
    are skipped (ImportZkOffsets stops at the first blank line instead, silently
    ignoring the rest). Unlike ImportZkOffsets, which writes any value to any
    path, the path must be an offset node and the offset a non-negative
    integer: a bad line raises :class:`OffsetFileError` naming ``source`` and the
    line number, before anything is written. A path given twice keeps its last
    value (as ImportZkOffsets' map does).

    >>> parse_export("/consumers/g/offsets/t/0:42\\n")
    [OffsetEntry(group='g', topic='t', partition=0, offset=42)]
    """
    found: Dict[str, OffsetEntry] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        path, sep, value = line.rpartition(":")
        if not sep:
            raise OffsetFileError(source, number, raw, "expected <path>:<offset>")
        match = _OFFSET_PATH.fullmatch(path.strip())
        if match is None:
            raise OffsetFileError(source, number, raw, "the path is not /consumers/<group>/offsets/<topic>/<partition>")
        value = value.strip()
        if not value.isdigit():
            raise OffsetFileError(source, number, raw, "the offset is not a non-negative integer")
        group, topic, partition = match.group(1), match.group(2), int(match.group(3))
        entry = OffsetEntry(group, topic, partition, int(value))
        found[entry.path] = entry
    return list(found.values())


def import_offsets(
    zk: KazooClient, entries: Sequence[OffsetEntry], *, force: bool = False, progress: Optional[Progress] = None,
    planned: Optional[List[atomic.OffsetWrite]] = None,
) -> int:
    """Write every entry's offset to its node (created if missing), all in one ZooKeeper
    multi-operation; returns how many were written (all of them).

    Refuses (:class:`GroupActiveError`, nothing written) if any group in
    ``entries`` has live members, unless ``force``: ImportZkOffsets does not
    check, but a live member would overwrite the imported offsets at its next commit.
    All or nothing (:func:`.atomic.write_offsets`): without ``force`` the write also
    requires every node unchanged since it was read just before (a commit in between
    fails it, nothing written); with ``force`` existing nodes are overwritten whatever
    they hold. A file too large for one request is refused (:class:`~.atomic.TooLargeError`).
    ``progress(written, total)`` is called before (0) and after the write (all).
    ``planned``, if given, receives the writes before they are sent (for a caller that is
    interrupted and must say what happened: :func:`.atomic.applied`).
    """
    groups = sorted({e.group for e in entries})
    if not force:
        for group in groups:
            reads.refuse_if_live(zk, group, "import offsets")
    nodes = atomic.read_nodes(zk, [e.path for e in entries])
    writes = []
    for e in entries:
        node = nodes[e.path]
        version = None if node is None else (atomic.ANY_VERSION if force else node[1])
        writes.append(atomic.OffsetWrite(e.group, e.topic, e.partition, e.offset,
                                         None if node is None else node[0], version))
    if planned is not None:
        planned.extend(writes)
    if progress is not None and entries:
        progress(0, len(entries))
    atomic.write_offsets(zk, writes)
    if progress is not None and entries:
        progress(len(entries), len(entries))
    return len(entries)
