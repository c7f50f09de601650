"""ZooKeeper watches that turn group and topic changes into rebalance requests.

What is watched:

* member changes: the children of ``/consumers/<g>/ids``;
* partition-count changes: the data of ``/brokers/topics/<t>`` for every topic
  this member subscribes (including a topic being created later);
* wildcard subscriptions: the children of ``/brokers/topics``, signalling only
  when the set of *matching* topics changed.

Contract of every watch (:class:`PathWatch`):

* **Armed before the read it guards.** Arming sends the request that sets the
  watch before it returns. ZooKeeper answers one session's requests in order,
  so a caller that arms first and reads afterwards on the same client sees
  every change either in its read or as a signal; nothing falls in between.
  The first value a watch sees is its baseline and signals nothing.
* **Every later change signals**: different children or data, the node's
  deletion, its re-creation.
* **It survives its node.** When the node is deleted (``zkconsumer groups
  delete``, an operator's ``rmr``) the watch signals and waits for the node to
  be created again (an exists-watch), then watches it as before. (kazoo's
  ``ChildrenWatch`` stops for good on a missing node.)
* **What it last read stands in for a read** (:meth:`PathWatch.snapshot`) while the
  watch that read set has not fired and the connection was not lost: any change
  since fires it. A children watch reads with the node's stat (its ``cversion``),
  so the group's member list costs no request of its own in a rebalance.
* **It survives connection and session loss.** kazoo drops every watch when
  the connection drops. After reconnecting, each watch is armed again and
  compares what it reads with the last value it saw: a change made in the gap
  signals, an unchanged node does not (a member that merely moved to another
  ZooKeeper server does not rebalance). A children watch also compares the
  node's ``cversion``: a member that left and registered again under the same
  id leaves the same names, and is a change. After a session expiry every watch
  signals once, whatever it reads.

Threads: callbacks run on kazoo's threads (watch events, request completions,
connection-state listeners). They only send asynchronous requests (which do
not wait for ZooKeeper) and call ``signal(reason)``, which must itself return
at once (as :meth:`Rebalancer.request` does). Nothing here blocks kazoo.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Dict, Iterable, List, Optional, Tuple, Union

from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.states import EventType, KazooState, WatchedEvent, ZnodeStat

from . import zkformat

log = logging.getLogger(__name__)

#: What a watch reads: sorted children, or data; ``None`` when the node does not exist.
Value = Union[Tuple[str, ...], bytes, None]
#: ``describe(previous, current)``: the reason to signal, or ``None`` when the change does not matter.
Describe = Callable[[Value, Value], Optional[str]]

_UNSET = object()
_CONNECTION = "connection"
_SESSION = "session"
#: Failures after which the same request may succeed once the connection is back.
_CONNECTION_ERRORS = (ConnectionLoss, OperationTimeoutError, SessionExpiredError)


class PathWatch:
    """Watches the children (``children=True``) or the data of one znode until :meth:`stop`.

    See the module docstring for the contract. ``describe`` turns a change into
    a signal reason (or ``None``: no signal); it runs on kazoo's threads and
    must be quick and pure. ``name`` names the watch in reasons and logs.
    ``keep`` (optional) is handed every value a read returns, the baseline
    included (``None``: no node), in the order read and before the signal that
    read may cause; it runs on kazoo's completion thread and must not block.
    """

    def __init__(
        self,
        client: KazooClient,
        path: str,
        *,
        children: bool,
        describe: Describe,
        signal: Callable[[str], None],
        name: str,
        keep: Optional[Callable[[Value], None]] = None,
    ) -> None:
        self._client = client
        self._path = path
        self._children = children
        self._describe = describe
        self._signal = signal
        self._name = name
        self._keep = keep
        self._lock = threading.Lock()
        self._last: object = _UNSET
        # A children watch's last cversion (ZooKeeper adds one per child created or deleted):
        # a member that left and registered again under the same id between a watch event and
        # the read it causes leaves the same names, but not the same cversion.
        self._last_cversion: Optional[int] = None
        # Why the watch may have been lost: None (it was not), _CONNECTION (the connection dropped or a
        # request failed; the session lives on) or _SESSION (the session expired).
        self._gap: Optional[str] = None
        self._started = False
        self._stopped = False
        # snapshot(): the last read and its stat, while the watch it set is armed. _generation
        # counts the ways that watch can be lost (fired, connection lost); a read answered after
        # one of those (the callbacks of answers and of events run on different kazoo threads)
        # is not a snapshot.
        self._generation = 0
        self._snapshot: Optional[Tuple[Value, ZnodeStat]] = None

    def snapshot(self) -> Optional[Tuple[Value, ZnodeStat]]:
        """The value (and stat) of the last read, if the watch it set has not fired since, nor the
        connection dropped; else ``None``. Reading the node now could only give a value whose
        change is already on its way as a signal."""
        with self._lock:
            return self._snapshot

    def _invalidate(self) -> None:
        with self._lock:
            self._generation += 1
            self._snapshot = None

    def start(self) -> None:
        """Arm the watch: the request is sent before this returns; its answer becomes the baseline."""
        with self._lock:
            if self._started or self._stopped:
                return
            self._started = True
        self._client.add_listener(self._on_state)
        self._arm()

    def stop(self) -> None:
        """Make every later callback a no-op (idempotent; does not wait for ZooKeeper)."""
        with self._lock:
            self._stopped = True
            self._snapshot = None
        self._client.remove_listener(self._on_state)

    # ------------------------------------------------------------ requests

    def _arm(self) -> None:
        """Send the read that (re)sets the watch; the answer arrives on kazoo's completion thread."""
        if self._stopped:
            return
        with self._lock:
            generation = self._generation
        if self._children:
            result = self._client.get_children_async(self._path, watch=self._on_event, include_data=True)
        else:
            result = self._client.get_async(self._path, watch=self._on_event)
        result.rawlink(lambda answered: self._on_read(answered, generation))

    def _on_read(self, result: IAsyncResult, generation: int) -> None:
        try:
            answer = result.get()
        except NoNodeError:
            # Wait for the node's creation; exists() sets a watch on a missing node.
            if not self._stopped:
                with self._lock:
                    sent = self._generation
                self._client.exists_async(self._path, watch=self._on_event).rawlink(
                    lambda answered: self._on_exists(answered, sent))
            return
        except KazooException as exc:
            self._failed(exc)
            return
        value: Value = tuple(sorted(answer[0])) if self._children else answer[0]
        with self._lock:
            current = generation == self._generation
            if current and not self._stopped:
                self._snapshot = (value, answer[1])
        self._deliver(value, answer[1].cversion if self._children else None, generation)

    def _on_exists(self, result: IAsyncResult, generation: int) -> None:
        try:
            stat = result.get()
        except KazooException as exc:
            self._failed(exc)
            return
        if stat is None:
            self._deliver(None, None, generation)
        else:
            self._arm()  # created between our read and exists(): read it again

    def _failed(self, exc: KazooException) -> None:
        """A request failed: the watch may not be set. Re-arm now or when the connection is back."""
        if isinstance(exc, ConnectionClosedError) or self._stopped:
            return  # the client is closing
        with self._lock:
            self._gap = self._gap or _CONNECTION
        if isinstance(exc, _CONNECTION_ERRORS):
            if self._client.connected:  # the reconnection listener may have run already
                self._arm()
            return
        log.error("cannot watch %s (%s): %r; retrying after the next reconnection", self._path, self._name, exc)

    def _deliver(self, value: Value, cversion: Optional[int], generation: int) -> None:
        """Signal if ``value`` differs from the last one seen, or (a children watch) the node's
        children were created or deleted since (``cversion``), even into the same names.

        ``generation``: the :attr:`_generation` when the read that set the watch was sent. Only
        a read whose watch still stands ends a gap. kazoo runs the read's callback on its
        completion thread, possibly after the connection dropped again (``_on_state`` then
        bumped the generation and noted the gap): the watch that read set is gone with that
        connection, and the reconnection must re-arm it. Ending the gap there left the watch
        unarmed for good (the simulator, seed 1027021: a partition-count change never seen).
        """
        with self._lock:
            if self._stopped:
                return
            previous, self._last = self._last, value
            previous_cversion, self._last_cversion = self._last_cversion, cversion
            gap = self._gap
            if generation == self._generation:
                self._gap = None
            else:
                gap = None  # still open: compared as a plain change; the re-arming read closes it
        if self._keep is not None:
            self._keep(value)
        recreated = cversion is not None and previous_cversion is not None and cversion != previous_cversion
        if gap == _SESSION or (gap is not None and previous is _UNSET):
            # A new session (the group is rejoined anyway), or no baseline: what changed is unknown.
            self._signal(f"{self._name}: watch re-armed after it was lost")
        elif previous is not _UNSET and (previous != value or recreated):
            reason = self._describe(previous, value)  # type: ignore[arg-type]
            if reason is not None:
                self._signal(reason)

    # ----------------------------------------------------------- callbacks

    def _on_event(self, event: WatchedEvent) -> None:
        """kazoo's watch thread: a change fired the watch (re-arm and read), or kazoo dropped it.

        A dropped watch (``EventType.NONE``) is ignored: :meth:`_on_state` has already handled
        its loss. kazoo tells the state listeners SUSPENDED or LOST on the connection thread
        *before* ``_reset_watchers`` queues the ``NONE`` events to the callback thread
        (``KazooClient._session_callback``), and that thread may run them late: after the
        connection came back, the watch was re-armed and even after the re-arming read was
        answered. Taken then as the loss of the *current* watch, such an event discarded the
        fresh snapshot (so the signal of a change read by that read carried no map, and the
        rebalance fell back to a cache whose own watch was dropped but whose ``NONE`` callback
        had not run yet: the old partition count, for good) and set a gap that nothing re-armed.
        """
        if self._stopped or event.type == EventType.NONE:
            return
        self._invalidate()
        self._arm()

    def _on_state(self, state: str) -> None:
        """kazoo's connection thread: note a lost connection, re-arm once it is back."""
        if self._stopped:
            return
        if state in (KazooState.SUSPENDED, KazooState.LOST):
            self._invalidate()
            with self._lock:
                self._gap = _SESSION if state == KazooState.LOST else (self._gap or _CONNECTION)
        elif state == KazooState.CONNECTED and self._gap:
            self._arm()


class GroupWatcher:
    """Owns the watches of one member; :meth:`stop` makes every callback a no-op.

    Call :meth:`start` before the first read of the group's members (and, for
    a wildcard subscription, of the topic list), and :meth:`watch_topics`
    before reading those topics' partition maps.
    """

    def __init__(
        self,
        client: KazooClient,
        paths: zkformat.GroupPaths,
        signal: Callable[[str], None],
        topic_allowed: Optional[Callable[[str], bool]] = None,
    ) -> None:
        self._client = client
        self._paths = paths
        self._signal = signal
        self._topic_allowed = topic_allowed
        self._lock = threading.Lock()
        self._stopped = False
        self._topic_watches: Dict[str, PathWatch] = {}
        self._watches: List[PathWatch] = []
        self._members: Optional[PathWatch] = None

    def member_list(self) -> Optional[Tuple[List[str], ZnodeStat]]:
        """The group's member ids and the ids node's stat as the members' watch last read them, while
        that read stands (:meth:`PathWatch.snapshot`); else ``None`` (read them yourself)."""
        snapshot = self._members.snapshot() if self._members is not None else None
        if snapshot is None or snapshot[0] is None:
            return None
        return [str(child) for child in snapshot[0]], snapshot[1]

    def topic_data(self, topic: str) -> Optional[bytes]:
        """The partition map of ``topic`` as its watch last read it, while that read stands
        (:meth:`PathWatch.snapshot`); else ``None`` (read it yourself).

        A change to the node is signalled only after the watch has read the new
        map and kept it here (one thread does both), so a rebalance that the
        signal starts reads the new map, whatever other callbacks kazoo's
        callback thread has not run yet.
        """
        with self._lock:
            watch = self._topic_watches.get(topic)
        snapshot = watch.snapshot() if watch is not None else None
        if snapshot is None or not isinstance(snapshot[0], bytes):
            return None
        return snapshot[0]

    def start(self) -> None:
        """Arm the watch of the group's members and, for a wildcard subscription, of the topic list."""
        self._members = PathWatch(self._client, self._paths.ids, children=True, describe=self._members_changed,
                                  signal=self._signal, name=f"members of {self._paths.ids}")
        self._add(self._members)
        if self._topic_allowed is not None:
            self._add(PathWatch(self._client, zkformat.BROKER_TOPICS_PATH, children=True,
                                describe=self._topics_changed, signal=self._signal, name="topic list"))

    def watch_topics(self, topics: Iterable[str]) -> None:
        """Arm a watch of the partition map of each of ``topics`` not watched yet (idempotent)."""
        for topic in topics:
            with self._lock:
                if self._stopped or topic in self._topic_watches:
                    continue
                watch = PathWatch(self._client, zkformat.topic_path(topic), children=False,
                                  describe=_topic_changed(topic), signal=self._signal, name=f"topic {topic}")
                self._topic_watches[topic] = watch
                self._watches.append(watch)
            watch.start()

    def stop(self) -> None:
        """Make every callback a no-op and remove the watches' connection listeners (idempotent)."""
        with self._lock:
            self._stopped = True
            watches = list(self._watches)
        for watch in watches:
            watch.stop()

    def _add(self, watch: PathWatch) -> None:
        with self._lock:
            if self._stopped:
                return
            self._watches.append(watch)
        watch.start()

    # Describe functions: kazoo's threads; pure.

    def _members_changed(self, previous: Value, current: Value) -> Optional[str]:
        if current is None:
            return f"group node {self._paths.ids} deleted"
        if previous is None:
            return f"group node {self._paths.ids} created again ({len(current)} registered)"
        return f"group members changed ({len(current)} registered)"

    def _topics_changed(self, previous: Value, current: Value) -> Optional[str]:
        assert self._topic_allowed is not None
        allowed = self._topic_allowed
        before = {str(t) for t in (previous or ()) if allowed(str(t))}
        after = {str(t) for t in (current or ()) if allowed(str(t))}
        if before == after:
            return None
        return f"matching topics changed (new: {', '.join(sorted(after - before)) or 'none'})"


def _topic_changed(topic: str) -> Describe:
    def describe(previous: Value, current: Value) -> Optional[str]:
        if current is None:
            return f"topic {topic} deleted"
        if previous is None:
            return f"topic {topic} created"
        return f"partitions of topic {topic} changed"

    return describe
