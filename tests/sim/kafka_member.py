"""A model of Kafka 0.8.2's own high-level consumer as a group member (its rebalance loop).

Written from ``ZookeeperConsumerConnector.scala`` (its ``ZKRebalancerListener``,
``ZKSessionExpireListener`` and offset commits to ZooKeeper) and ZkClient's behaviour:

* a *watcher executor* thread waits (1 s at a time) for a trigger, then runs
  ``syncedRebalance`` under the rebalance lock; a ``ConsumerRebalanceFailedException``
  is logged and the thread waits for the next trigger (partitions stay unowned meanwhile);
* ``syncedRebalance``: up to ``rebalance.max.retries`` attempts; after a failed one, the
  fetchers are closed (queues cleared, offsets committed) and it sleeps ``rebalance.backoff.ms``;
* one attempt (``rebalance``): close the fetchers (auto-commit), **delete every owner node
  it had** (unconditionally: ``deletePath``), compute the assignment from the members'
  registrations, read the offsets, then create each owner node (``createEphemeralPathExpectConflict``:
  a node that already holds the same thread id counts as ours, whichever session made it);
  if any create met another's node, delete the ones it created and fail;
* commits write ``/offsets`` unconditionally (``updatePersistentPath``), skipping unchanged values;
* ZkClient retries every operation until connected; after a session expiry it opens a new
  session and calls ``handleNewSession``: forget the registry (without releasing), register
  again, and run ``syncedRebalance`` at once (on ZkClient's event thread);
* watches: the group's ids (children), the subscribed topics (data), re-armed on every read;
  unlike kazoo's, ZooKeeper's Java client keeps them across a reconnection (SetWatches).

The assignment is computed by :mod:`.expected` (Kafka's definition), not by zkconsumer's code.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Optional, Tuple

from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, NodeExistsError, NoNodeError, SessionExpiredError
from kazoo.protocol.states import KazooState

from zkconsumer.structs import TopicPartition
from zkconsumer.zookeeper import zkformat

from .expected import expected
from .kernel import Kernel, SimEvent, SimLock, SimTask
from .network import Network
from .process import SimProcess
from .threads import SimTimeoutError
from .zkmodel import Ensemble

GROUP = "g"
PATHS = zkformat.GroupPaths(GROUP)


class RebalanceFailed(Exception):
    """``ConsumerRebalanceFailedException``."""


class _Shutdown(Exception):
    pass


class KafkaMember(SimProcess):
    """Kafka 0.8.2's consumer in the simulation: same surface as :class:`~.member.Member` for the world."""

    kafka = True

    def __init__(self, kernel: Kernel, ensemble: Ensemble, network: Network, index: int, incarnation: int,
                 subscription: Dict[str, int], strategy: str, seed: int, trace: Callable[[str], None],
                 session_timeout: float = 6.0) -> None:
        super().__init__(kernel, ensemble, network, "k", index, incarnation, seed, trace, session_timeout)
        self.subscription = dict(subscription)
        self.strategy = strategy
        self.client.kafka = True  # type: ignore[attr-defined]
        self.client.add_listener(self._on_state)
        self.registration = zkformat.encode_registration(self.subscription, "static", 1_700_000_000_000 + index)
        self.registry: Dict[TopicPartition, int] = {}  # topicRegistry: partition -> consumed offset
        self.checkpointed: Dict[TopicPartition, int] = {}
        self.fetching = False
        self.triggered = False
        self.trigger = SimEvent(kernel)
        self.rebalance_lock = SimLock(kernel)
        self.shutting_down = False
        self.gave_up = False
        self.ever_gave_up = False
        self.state = "new"
        self.stale = False
        self.failures: List[BaseException] = []
        self.committing = False
        self._watched_topics: set = set()  # type: ignore[type-arg]

    # ------------------------------------------------------------- ZkClient

    def _zk(self, send: Callable[[], Any]) -> Any:
        """ZkClient's ``retryUntilConnected``: retry on connection loss until it answers."""
        while True:
            if self.shutting_down and self.state == "left":
                raise _Shutdown()
            try:
                return send().get(timeout=self.client.timeout)
            except (ConnectionLoss, SimTimeoutError, SessionExpiredError):
                self.kernel.sleep(0.1)
            except ConnectionClosedError:
                raise _Shutdown() from None

    def _watch(self, path: str, children: bool) -> None:
        """A ZkClient listener: fires a rebalance trigger on every change, re-subscribes by reading."""
        def on_event(event: Any) -> None:
            if self.state != "joined" or event.type == "NONE":
                return  # the connection dropped: re-armed once connected again (_on_state)
            # ZkClient's event thread re-reads (re-subscribing) before it calls the listener, which
            # triggers the rebalance: a change after the trigger's read fires the watch again.
            self._rearm(path, children, then=self.rebalance_event)
        self._callbacks[(path, children)] = on_event
        self._rearm(path, children)

    def _rearm(self, path: str, children: bool, then: Optional[Callable[[], None]] = None,
               handshake: bool = False) -> None:
        callback = self._callbacks[(path, children)]
        if handshake:
            # The Java client's SetWatches, part of the reconnection (set_watch_now): armed before the
            # rebalance it triggers reads anything. Sent as an ordinary call, a preempted thread could
            # leave the watches unset for seconds while the rebalance read an older group, and the
            # changes meanwhile never fired (seed 2011709: a Kafka member kept a stale assignment).
            self.client.set_watch_now(path, callback, children)
            return
        if children:
            result = self.client.get_children_async(path, watch=callback)
        else:
            result = self.client.exists_async(path, watch=callback)
        if then is not None:
            result.rawlink(lambda _answered: then())

    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST:
            self.stale = True
        if state == KazooState.CONNECTED and not self.stale and self.state == "joined":
            # ZooKeeper's Java client (under ZkClient) keeps a session's watches across a reconnection
            # and reports what changed meanwhile (kazoo drops them): re-arm, and look again.
            for key in list(self._callbacks):
                self._rearm(*key, handshake=True)
            self.rebalance_event()
        if state == KazooState.CONNECTED and self.stale and self.state == "joined":
            # ZkClient: handleNewSession on its event thread, and every listener fires.
            SimTask(self.kernel, self._new_session, f"zkclient-{self.name}", self.name)

    def _new_session(self) -> None:
        try:
            self.registry.clear()  # resetState: without releasing (the old session's nodes are gone)
            self.fetching = False
            self._register()
            for key in list(self._callbacks):
                self._rearm(*key)
            self.synced_rebalance()
        except RebalanceFailed:
            self.gave_up = self.ever_gave_up = True
        except _Shutdown:
            pass

    # ------------------------------------------------------------- joining

    def join(self) -> None:
        self.state = "joining"
        self._callbacks: Dict[Tuple[str, bool], Callable[[Any], None]] = {}
        self.client.start()

        def run() -> None:
            try:
                self._register()
            except _Shutdown:
                return
            if self.state != "joining":  # asked to leave meanwhile: the leave has closed it
                return
            self.state = "joined"
            self._watch(PATHS.ids, True)
            for topic in sorted(self.subscription):
                self._watch(zkformat.topic_path(topic), False)
            self.rebalance_event()
            self._watcher_executor()
        self.spawn(run, "watcher")

    def _register(self) -> None:
        path = PATHS.member(self.consumer_id)
        while True:  # createEphemeralPathExpectConflictHandleZKBug
            try:
                self._zk(lambda: self.client.create_async(path, self.registration, ephemeral=True, makepath=True))
                return
            except NodeExistsError:
                try:
                    data, stat = self._zk(lambda: self.client.get_async(path))
                except NoNodeError:
                    continue
                if data == self.registration and stat.ephemeralOwner == self.client.sid:
                    return
                self.kernel.sleep(1.0)  # an earlier session's node: wait for ZooKeeper to delete it

    def rebalance_event(self) -> None:
        self.triggered = True
        self.trigger.set()

    def _watcher_executor(self) -> None:
        while not self.shutting_down:
            if not self.triggered:
                self.trigger.wait(1.0)
            self.trigger.clear()
            go, self.triggered = self.triggered, False
            if go and not self.shutting_down:
                try:
                    self.synced_rebalance()
                except RebalanceFailed:
                    self.gave_up = self.ever_gave_up = True
                    self.trace(f"{self.name} ConsumerRebalanceFailedException")
                except _Shutdown:
                    return

    # ------------------------------------------------------------- the rebalance

    def synced_rebalance(self) -> None:
        with self.rebalance_lock:
            for _ in range(4):  # rebalance.max.retries
                if self.shutting_down:
                    return
                try:
                    done = self._rebalance()
                except (NoNodeError, NodeExistsError, ValueError, KeyError) as exc:
                    self.trace(f"{self.name} exception during rebalance: {exc!r}")
                    done = False
                if done:
                    self.gave_up = False
                    self.stale = False
                    return
                self._close_fetchers()
                self.kernel.sleep(2.0)  # rebalance.backoff.ms
        raise RebalanceFailed(self.consumer_id)

    def _close_fetchers(self) -> None:
        self.fetching = False
        self.commit_now()

    def _rebalance(self) -> bool:
        own = self._zk(lambda: self.client.get_async(PATHS.member(self.consumer_id)))  # constructTopicCount
        json.loads(own[0])
        self._close_fetchers()
        for tp in sorted(self.registry):  # releasePartitionOwnership: deletePath, whoever holds it
            self._delete(PATHS.owner(*tp))
        self.registry = {}
        ids = self._zk(lambda: self.client.get_children_async(PATHS.ids))
        registrations = {}
        for consumer_id in sorted(ids):
            try:
                registrations[consumer_id] = self._zk(lambda c=consumer_id: self.client.get_async(PATHS.member(c)))[0]
            except NoNodeError:
                continue
        partitions = {}
        for topic in sorted(self.subscription):
            try:
                data = self._zk(lambda t=topic: self.client.get_async(zkformat.topic_path(t)))[0]
            except NoNodeError:
                continue
            partitions[topic] = len(zkformat.decode_topic_partitions(zkformat.topic_path(topic), data))
        assignment = expected(self.strategy, registrations, partitions)
        if assignment is None:
            raise ValueError("RoundRobin requires identical subscriptions")
        mine = {tp: thread for tp, thread in assignment.items() if thread.startswith(self.consumer_id + "-")}
        offsets = {}
        for tp in sorted(mine):
            try:
                offsets[tp] = int(self._zk(lambda tp=tp: self.client.get_async(PATHS.offset(*tp)))[0])
            except NoNodeError:
                offsets[tp] = -1
        if self.shutting_down:
            return False
        owned: List[TopicPartition] = []
        failed = False
        for tp in sorted(mine):  # reflectPartitionOwnershipDecision
            path, data = PATHS.owner(*tp), mine[tp].encode()
            try:
                self._zk(lambda p=path, d=data: self.client.create_async(p, d, ephemeral=True, makepath=True))
                owned.append(tp)
            except NodeExistsError:
                try:
                    stored = self._zk(lambda p=path: self.client.get_async(p))[0]
                except NoNodeError:
                    stored = None
                if stored == data:
                    owned.append(tp)  # "the same data": taken as ours, whichever session wrote it
                else:
                    failed = True
        if failed:
            for tp in owned:
                self._delete(PATHS.owner(*tp))
            return False
        self.registry = {tp: (offsets[tp] if offsets[tp] >= 0 else 0) for tp in mine}
        self.checkpointed.update({tp: o for tp, o in offsets.items() if o >= 0})
        self.fetching = True
        return True

    def _delete(self, path: str) -> None:
        try:
            self._zk(lambda: self.client.delete_async(path))
        except NoNodeError:
            pass

    # ------------------------------------------------------------- the application

    def commit_now(self) -> None:
        """``commitOffsets``: every changed offset of the registry, written unconditionally."""
        for tp, offset in sorted(self.registry.items()):
            if self.checkpointed.get(tp) == offset:
                continue
            path, data = PATHS.offset(*tp), str(offset).encode()
            try:
                self._zk(lambda p=path, d=data: self.client.set_async(p, d))
            except NoNodeError:
                try:
                    self._zk(lambda p=path, d=data: self.client.create_async(p, d, makepath=True))
                except NodeExistsError:
                    self._zk(lambda p=path, d=data: self.client.set_async(p, d))
            self.checkpointed[tp] = offset

    def commit(self) -> None:
        if self.state != "joined" or self.committing:
            return
        self.committing = True

        def run() -> None:
            try:
                self.commit_now()
            except _Shutdown:
                pass
            finally:
                self.committing = False
        self.spawn(run, "commit")

    def consume(self) -> Optional[Tuple[TopicPartition, int]]:
        if not self.fetching or not self.registry:
            return None
        tp = self.rng.choice(sorted(self.registry))
        offset = self.registry[tp]
        self.registry[tp] = offset + 1
        return tp, offset

    def leave(self, done: Callable[[], None]) -> None:
        self.state = "leaving"
        self.shutting_down = True
        self.trigger.set()

        def run() -> None:
            try:
                with self.rebalance_lock:
                    self.fetching = False
                    self.commit_now()
            except _Shutdown:
                pass
            self.exit(done)
        self.spawn(run, "leave")

    # ------------------------------------------------------------- what the invariants look at

    def settled(self) -> bool:
        return not self.triggered and not self.rebalance_lock.locked() and self.fetching

    def believed(self) -> Dict[TopicPartition, str]:
        return {}  # not checked for exclusivity: Kafka's own behaviour is recorded, not judged
