"""Writing many offset nodes all at once or not at all: one ZooKeeper multi-operation.

``offsets reset --execute`` and ``offsets import`` cut short (Ctrl-C, a kill, a lost
connection, a node refusing the write) must not leave some partitions moved and others
not, without saying which (a ``shift:+N`` run again would move the moved ones twice).
:func:`write_offsets` sends every write in one ZooKeeper multi-operation, which the server
applies entirely or not at all.

Each write says what it expects to find, as read when the plan was made: a node at a
given version (``set`` with that version) or no node (``create``). A node changed since
(a consumer committed, another reset ran) makes the whole multi fail, nothing written
(:class:`OffsetsChangedError`): a plan computed from values that no longer hold is not
applied. Parents (``/consumers/<g>/offsets/<t>``) are created first, outside the multi
(empty nodes, no offsets).

One multi must fit in one ZooKeeper request (the server's ``jute.maxbuffer``, 1 MB by
default): :data:`MAX_REQUEST_BYTES`. A larger write is refused before anything is sent
(:class:`TooLargeError`, naming the size), so the caller can split it into parts each
all-or-nothing (``reset --partitions``, one group per import file).

Outcomes, each saying exactly what was written: success (every write); a failure the
server answered (nothing); a connection lost while the multi was in flight (ZooKeeper
is asked again which of the two happened, :class:`OutcomeUnknownError` only if the
nodes changed meanwhile); Ctrl-C while waiting for the answer (the answer is still
awaited for up to :data:`INTERRUPTED_WAIT_S`, then :class:`Interrupted` carries it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    KazooException,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    RolledBackError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.serialization import Transaction

from ..errors import ZooKeeperAccessError
from ..zookeeper import zkformat
from .errors import AdminError

__all__ = ["MAX_REQUEST_BYTES", "OffsetWrite", "NothingWrittenError", "OffsetsChangedError", "OutcomeUnknownError",
           "TooLargeError", "Interrupted", "applied", "write_offsets", "request_bytes", "planned", "read_nodes", "ANY_VERSION"]

#: The largest multi-operation sent: ZooKeeper refuses a request over its ``jute.maxbuffer``
#: (1 MB - 1 by default); the margin covers the request's headers.
MAX_REQUEST_BYTES = 1_000_000
#: After Ctrl-C, how long the answer to a multi already sent is awaited (within the CLI's grace period).
INTERRUPTED_WAIT_S = 5.0
#: How long ZooKeeper is awaited for the answer, and to read back after a lost connection.
ANSWER_TIMEOUT_S = 30.0
#: An :class:`OffsetWrite` version that overwrites the node whatever its version (``import --force``).
ANY_VERSION = -1
#: How many reads :func:`read_nodes` keeps in flight.
READ_WINDOW = 256


@dataclass(frozen=True)
class OffsetWrite:
    """One offset node to write: ``offset`` where the plan found ``previous`` at ``version``
    (``version`` ``None``: there was no node, it is created; :data:`ANY_VERSION`: whatever the
    node holds now is overwritten)."""

    group: str
    topic: str
    partition: int
    offset: int
    previous: Optional[int]
    version: Optional[int]

    @property
    def path(self) -> str:
        return zkformat.GroupPaths(self.group).offset(self.topic, self.partition)

    def describe(self) -> str:
        """``group topic/partition: previous -> offset`` (``none`` for no node)."""
        before = "none" if self.previous is None else str(self.previous)
        return f"{self.group} {self.topic}/{self.partition}: {before} -> {self.offset}"


class NothingWrittenError(AdminError):
    """The write was not made, none of it (the message says why)."""


class TooLargeError(NothingWrittenError):
    """The writes do not fit in one ZooKeeper request; nothing was written."""

    def __init__(self, count: int, size: int) -> None:
        self.count, self.size = count, size
        super().__init__(
            f"nothing was written: the {count} offset writes need a ZooKeeper request of {size} bytes, over the "
            f"{MAX_REQUEST_BYTES} that one atomic write may carry (jute.maxbuffer); write fewer at a time "
            "(offsets reset --partitions, or an import file per group), each part all-or-nothing")


class OffsetsChangedError(NothingWrittenError):
    """The server refused the multi (a node changed since the plan, or refused); nothing was written."""

    def __init__(self, write: OffsetWrite, why: str) -> None:
        self.write = write
        super().__init__(f"nothing was written (all-or-nothing): {write.group} {write.topic}/{write.partition} "
                         f"{why}; make the plan again")


class OutcomeUnknownError(AdminError):
    """The connection was lost with the multi in flight, and reading back could not tell whether it
    was applied (the nodes changed meanwhile, or ZooKeeper stayed away). It was applied entirely
    or not at all."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"cannot tell whether the offsets were written ({detail}): ZooKeeper applied all of them "
                         "or none; check with 'zkconsumer groups describe' before running it again")


class Interrupted(KeyboardInterrupt):
    """Ctrl-C while the multi was in flight: ``applied`` says what happened (``None``: not known)."""

    def __init__(self, applied: Optional[bool]) -> None:
        self.applied = applied
        super().__init__()


def _transaction(zk: KazooClient, writes: Sequence[OffsetWrite], acl: Optional[List[Any]]) -> Any:
    txn = zk.transaction()
    for w in writes:
        data = zkformat.encode_offset(w.offset)
        if w.version is None:
            txn.create(w.path, data, acl=acl)
        else:
            txn.set_data(w.path, data, version=w.version)
    return txn


def request_bytes(zk: KazooClient, writes: Sequence[OffsetWrite]) -> int:
    """The size of the multi-operation that writes ``writes`` (its serialized request body)."""
    return len(Transaction(_transaction(zk, writes, None).operations).serialize())


def write_offsets(zk: KazooClient, writes: Sequence[OffsetWrite], acl: Optional[List[Any]] = None) -> None:
    """Write every one of ``writes`` in one ZooKeeper multi-operation: all or nothing.

    Returns once all were written. Raises, nothing written: :class:`TooLargeError` (before
    sending), :class:`OffsetsChangedError` (a node not as planned), ``NoAuthError`` as
    :class:`~zkconsumer.errors.ZooKeeperAccessError` (a node's ACL). Raises
    :class:`OutcomeUnknownError` when that cannot be known, and :class:`Interrupted` on
    Ctrl-C (with what is known). Connection errors before sending propagate (nothing written).
    """
    if not writes:
        return
    size = request_bytes(zk, writes)
    if size > MAX_REQUEST_BYTES:
        raise TooLargeError(len(writes), size)
    for parent in sorted({w.path.rsplit("/", 1)[0] for w in writes}):
        try:
            zk.retry(zk.ensure_path, parent, acl)
        except NoAuthError:
            raise ZooKeeperAccessError(parent, "creating") from None
    pending = _transaction(zk, writes, acl).commit_async()
    try:
        _check(writes, _answer(pending, ANSWER_TIMEOUT_S))
    except KeyboardInterrupt:
        raise Interrupted(_outcome_after_interrupt(zk, writes, pending)) from None
    except (ConnectionLoss, SessionExpiredError, OperationTimeoutError, KazooTimeoutError):
        if _read_back(zk, writes):
            return
        raise NothingWrittenError("nothing was written (all-or-nothing): the connection to ZooKeeper was lost "
                                  "before it applied the write; run it again") from None


def applied(zk: KazooClient, writes: Sequence[OffsetWrite]) -> Optional[bool]:
    """Whether ``writes`` were applied, as ZooKeeper's nodes show now: ``True`` (all), ``False``
    (none), ``None`` (cannot tell: the nodes changed otherwise, or ZooKeeper did not answer).
    For a caller interrupted somewhere around :func:`write_offsets`."""
    if not writes:
        return False
    try:
        return _read_back(zk, writes)
    except (OutcomeUnknownError, KazooException, KazooTimeoutError):
        return None


def _answer(pending: Any, timeout: float) -> List[Any]:
    """The multi's results; raises what kazoo raises (connection errors, ``KazooTimeoutError``)."""
    results: List[Any] = pending.get(timeout=timeout)
    return results


def _check(writes: Sequence[OffsetWrite], results: Sequence[Any]) -> None:
    """Raise for a refused multi (nothing written): the first operation that failed, and why."""
    for write, result in zip(writes, results):
        if not isinstance(result, Exception) or isinstance(result, RolledBackError):
            continue
        if isinstance(result, NoAuthError):
            raise ZooKeeperAccessError(write.path, "writing", "nothing was written: the write is all-or-nothing")
        if isinstance(result, BadVersionError):
            raise OffsetsChangedError(write, f"changed since the plan (it was {write.previous}, version "
                                             f"{write.version})")
        if isinstance(result, NodeExistsError):
            raise OffsetsChangedError(write, "was created since the plan (it had no offset)")
        if isinstance(result, NoNodeError):
            raise OffsetsChangedError(write, "was deleted since the plan")
        raise OffsetsChangedError(write, f"was refused by ZooKeeper ({type(result).__name__})")
    failed = [r for r in results if isinstance(r, Exception)]
    if failed:  # only RolledBackError: cannot happen; never report success for a refused multi
        raise OffsetsChangedError(writes[0], f"was refused by ZooKeeper ({type(failed[0]).__name__})")


def _outcome_after_interrupt(zk: KazooClient, writes: Sequence[OffsetWrite], pending: Any) -> Optional[bool]:
    """Ctrl-C while awaiting the multi: wait a little more for its answer (a second Ctrl-C ends
    the process); ``True``/``False`` applied or not, ``None`` unknown."""
    if not pending.wait(INTERRUPTED_WAIT_S):
        return None
    try:
        _check(writes, pending.get(timeout=0))
    except (NothingWrittenError, ZooKeeperAccessError):
        return False
    except KazooException:
        return None
    return True


def _read_back(zk: KazooClient, writes: Sequence[OffsetWrite]) -> bool:
    """After a lost connection: whether the multi was applied (``True``) or not (``False``), from
    what the nodes hold now; :class:`OutcomeUnknownError` if neither reading fits."""
    try:
        now = {w.path: _node(zk, w.path) for w in writes}
    except KazooException as exc:
        raise OutcomeUnknownError(f"ZooKeeper could not be read back: {type(exc).__name__}") from None
    if any(w.version == ANY_VERSION for w in writes):  # an overwrite leaves no trace to tell by
        if all(now[w.path] is not None and now[w.path][0] == w.offset for w in writes):  # type: ignore[index]
            return True
        raise OutcomeUnknownError("offsets overwritten whatever their version cannot be told from before")
    after = {w.path: (w.offset, 0 if w.version is None else w.version + 1) for w in writes}
    before = {w.path: None if w.version is None else (w.previous, w.version) for w in writes}
    if all(now[path] == after[path] for path in now):
        return True
    if all(now[path] == before[path] for path in now):
        return False
    changed = [w.describe() for w in writes if now[w.path] not in (after[w.path], before[w.path])]
    raise OutcomeUnknownError(f"nodes changed meanwhile: {', '.join(changed[:3])}")


def _node(zk: KazooClient, path: str) -> Optional[Tuple[int, int]]:
    """``(offset, version)`` of an offset node, ``None`` if absent."""
    try:
        data, stat = zk.retry(zk.get, path)
    except NoNodeError:
        return None
    return zkformat.decode_offset(path, data), stat.version


def read_nodes(zk: KazooClient, paths: Sequence[str]) -> Dict[str, Optional[Tuple[int, int]]]:
    """``(offset, version)`` of each offset node in ``paths`` (``None``: absent), reads pipelined
    (:data:`READ_WINDOW` at a time); a read without a clean answer is made again, retried."""
    found: Dict[str, Optional[Tuple[int, int]]] = {}
    for start in range(0, len(paths), READ_WINDOW):
        batch = [(path, zk.get_async(path)) for path in paths[start:start + READ_WINDOW]]
        for path, pending in batch:
            try:
                data, stat = pending.get()
            except NoNodeError:
                found[path] = None
                continue
            except KazooException:
                found[path] = _node(zk, path)
                continue
            found[path] = (zkformat.decode_offset(path, data), stat.version)
    return found


def planned(zk: KazooClient, group: str, topic: str, partition: int) -> Tuple[Optional[int], Optional[int]]:
    """``(offset, version)`` of an offset node as a plan sees it (``(None, None)``: no node)."""
    found = _node(zk, zkformat.GroupPaths(group).offset(topic, partition))
    return (None, None) if found is None else found


def as_dict(writes: Sequence[OffsetWrite]) -> Dict[str, int]:
    """``{path: offset}`` of ``writes`` (for messages and tests)."""
    return {w.path: w.offset for w in writes}
