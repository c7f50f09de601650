"""A live group-wide seek: ask a *running* group (ZooKeeper membership) to move to a position.

Kafka's tools (and :mod:`.reset`) require the group to be stopped. Here the command
resolves each partition's target (as a reset plans it: an offset, earliest, latest or a
time, clamped into the log), writes one request node, ``/consumers/<g>/seek``
(:mod:`zkconsumer.zookeeper.seek_nodes`), and each owner applies it at a safe point and
acknowledges it (:mod:`zkconsumer.consumer.seeking`); a member that claims a partition while
the request is pending starts it from the target. :func:`wait_for_seek` waits (bounded)
for every partition's acknowledgement; :func:`finish_seek` then removes the request. A
request left pending (timed out) is still applied by the partitions' next owners until
:func:`cancel_seek` removes it.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError, NotEmptyError, RolledBackError, RuntimeInconsistency
from kazoo.protocol.serialization import Transaction

from ..errors import MalformedZnodeError
from ..structs import TopicPartition
from ..zookeeper import seek_nodes, zkformat
from . import reads
from .atomic import MAX_REQUEST_BYTES
from .errors import AdminError
from .reset import ResetPlan

__all__ = ["SeekProgress", "start_seek", "seek_progress", "wait_for_seek", "finish_seek", "cancel_seek",
           "pending_seek"]


def _path(group: str) -> str:
    return seek_nodes.seek_path(zkformat.GroupPaths(group).root)


def pending_seek(zk: KazooClient, group: str) -> Optional[seek_nodes.SeekRequest]:
    """The group's pending seek request, if any."""
    got = reads.get(zk, _path(group))
    return None if got is None else seek_nodes.decode_request(_path(group), got[0])


def start_seek(zk: KazooClient, plan: ResetPlan) -> seek_nodes.SeekRequest:
    """Write the request of ``plan`` (every row's new offset, changed or not: members' positions may be
    ahead of the committed offsets). Refuses (:class:`AdminError`) a group without live members (use a
    reset) and a group with a seek pending (wait for it, or cancel it)."""
    if plan.target.kind == "shift":
        raise AdminError("a live seek takes an offset, earliest, latest or a time, not a shift (the committed "
                         "offsets of a running group move)")
    if not reads.live_members(zk, plan.group):
        raise AdminError(f"group {plan.group} has no live members: nothing would apply a seek; "
                         "use 'zkconsumer offsets reset' on a stopped group")
    offsets = {(r.topic, r.partition): r.new for r in plan.rows if r.new is not None}
    request = seek_nodes.SeekRequest(uuid.uuid4().hex, offsets, str(plan.target))
    try:
        zk.retry(zk.create, _path(plan.group), seek_nodes.encode_request(request), makepath=True)
    except NodeExistsError:
        pending = pending_seek(zk, plan.group)
        raise AdminError(f"group {plan.group} has a seek pending ({pending.id if pending else '?'}, to "
                         f"{pending.target if pending else '?'}): wait for it or cancel it with "
                         "'zkconsumer offsets seek --cancel'") from None
    return request


@dataclass
class SeekProgress:
    """Where a seek is: per partition of the request, who acknowledged it (``acked``: partition ->
    consumer thread id) and the current owner of those not acknowledged (``None``: no owner)."""

    request: seek_nodes.SeekRequest
    acked: Dict[TopicPartition, str] = field(default_factory=dict)
    owners: Dict[TopicPartition, Optional[str]] = field(default_factory=dict)
    gone: bool = False  # the request node was removed (finished or cancelled elsewhere)

    @property
    def done(self) -> bool:
        return set(self.acked) >= set(self.request.offsets)

    @property
    def missing(self) -> Dict[TopicPartition, Optional[str]]:
        return {tp: self.owners.get(tp) for tp in sorted(self.request.offsets) if tp not in self.acked}


def seek_progress(zk: KazooClient, group: str, request: seek_nodes.SeekRequest) -> SeekProgress:
    """Read the acknowledgements of ``request`` (and the owners of the partitions without one)."""
    path = _path(group)
    progress = SeekProgress(request)
    try:
        names = zk.retry(zk.get_children, path)
    except NoNodeError:
        progress.gone = True
        return progress
    for name in names:
        parsed = seek_nodes.parse_ack_name(name)
        if parsed is None or parsed[0] != request.id or parsed[1] not in request.offsets:
            continue
        got = reads.get(zk, f"{path}/{name}")
        consumer = "?"
        if got is not None:
            try:
                consumer = str(json.loads(got[0].decode("utf-8")).get("consumer", "?"))
            except (ValueError, UnicodeDecodeError, AttributeError):
                pass
        progress.acked[parsed[1]] = consumer
    paths = zkformat.GroupPaths(group)
    missing = [tp for tp in sorted(request.offsets) if tp not in progress.acked]
    owner_paths = {tp: paths.owner(*tp) for tp in missing}
    found = reads.get_many(zk, list(owner_paths.values()))
    for tp, owner_path in owner_paths.items():
        raw = found.get(owner_path)
        progress.owners[tp] = None if raw is None else raw.decode("utf-8", "replace")
    return progress


def wait_for_seek(zk: KazooClient, group: str, request: seek_nodes.SeekRequest, timeout_s: float,
                  poll_s: float = 0.2, on_progress: Optional[Callable[[SeekProgress], None]] = None,
                  clock: Callable[[], float] = time.monotonic) -> SeekProgress:
    """Poll until every partition acknowledged ``request`` (or the request is gone), at most ``timeout_s``."""
    deadline = clock() + timeout_s
    while True:
        progress = seek_progress(zk, group, request)
        if on_progress is not None:
            on_progress(progress)
        if progress.done or progress.gone or clock() >= deadline:
            return progress
        time.sleep(min(poll_s, max(0.0, deadline - clock())))


def finish_seek(zk: KazooClient, group: str, request: seek_nodes.SeekRequest) -> bool:
    """Remove ``request`` and its acknowledgements if it is still the pending one; whether it was."""
    pending = pending_seek(zk, group)
    if pending is None or pending.id != request.id:
        return False
    _remove_request(zk, _path(group))
    return True


def cancel_seek(zk: KazooClient, group: str) -> Optional[seek_nodes.SeekRequest]:
    """Remove the group's pending seek (partitions not acknowledged stay where they are); the request removed."""
    try:
        pending = pending_seek(zk, group)
    except MalformedZnodeError:  # removed all the same
        pending = seek_nodes.SeekRequest("?", {}, "(malformed)")
    return pending if _remove_request(zk, _path(group)) else None


#: How many times :func:`_remove_request` lists the acknowledgements again after members added one.
REMOVE_TRIES = 20


def _remove_request(zk: KazooClient, path: str) -> bool:
    """Remove the request node ``path`` and its acknowledgements in one ZooKeeper multi-operation; ``False``
    if it was gone already.

    All at once, so a member reads the request with every acknowledgement or no request at all. Removed
    one by one (kazoo's recursive delete), a member claiming a partition at a rebalance meanwhile found the
    request without that partition's acknowledgement and moved it back to the target; and a member
    acknowledging between the listing and the parent's delete failed the whole removal (``NotEmptyError``:
    the command exited 1 after every partition had applied the seek). Such an acknowledgement now fails
    the multi, nothing removed, and the children are listed again, at most :data:`REMOVE_TRIES` times
    (:class:`AdminError` after that). A request whose multi would not fit one ZooKeeper request
    (thousands of partitions) is removed child by child, as before, with the same retries.
    """
    for _ in range(REMOVE_TRIES):
        try:
            children = zk.retry(zk.get_children, path)
        except NoNodeError:
            return False
        try:
            results = zk.retry(_remove_listed, zk, path, [f"{path}/{child}" for child in children])
        except NotEmptyError:  # the child-by-child removal of a large request: an acknowledgement came in
            continue
        # a failed multi answers the failing operation's error, RolledBackError before it, RuntimeInconsistency after
        failures = [r for r in results
                    if isinstance(r, Exception) and not isinstance(r, (RolledBackError, RuntimeInconsistency))]
        if not failures:
            return True
        if not all(isinstance(f, (NotEmptyError, NoNodeError)) for f in failures):
            raise failures[0]
        # NotEmptyError: a member acknowledged after the listing; NoNodeError: a node listed is gone (another
        # removal, or a connection lost after the multi applied): list again
    raise AdminError(f"{path}: members kept acknowledging the seek while it was being removed; not removed "
                     f"after {REMOVE_TRIES} tries")


def _remove_listed(zk: KazooClient, path: str, children: List[str]) -> List[Any]:
    """One try of :func:`_remove_request`: the multi's results (an exception instance per failed operation)."""
    transaction = zk.transaction()
    for child in children:
        transaction.delete(child)
    transaction.delete(path)
    if len(Transaction(transaction.operations).serialize()) > MAX_REQUEST_BYTES:
        zk.delete(path, recursive=True)
        return [True]
    return list(transaction.commit())
