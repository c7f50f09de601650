"""The steps of one rebalance attempt as a sans-I/O state machine: effects out, results in.

Each step is a generator. It never talks to ZooKeeper, the fetchers, the committer, the
listener, a clock or a lock itself: it *yields an effect*, a frozen dataclass saying what to do
(read the members, claim these partitions, wait up to this long...), and is *sent its result*:
a value, or :class:`Raised` when doing it raised (an exception as data). Between effects it
only decides, with :mod:`zkconsumer.rebalance.decisions`. :func:`drive` runs a step against an
``execute(effect)`` function; the production driver is
:class:`~zkconsumer.rebalance.rebalancer.Rebalancer` (the view: members, topics, assignment)
together with :class:`~zkconsumer.rebalance.ownership.Ownership` (owner nodes, fetchers, offsets,
the listener, waits). The ZooKeeper requests a step orders, and their order, are part of its
contract: ``tests/sim/trace_hashes.py`` pins every request of a thousand simulated schedules.

Steps: :func:`attempt` (one whole attempt, see the rebalancer's module docstring),
made of :func:`pause` (stop what moves, commit, tell the listener) and :func:`take_ownership`
(release, confirm, relabel, claim, wait for peers, read offsets, install), and :func:`lose`
(partitions a fenced commit reported taken, checked against ZooKeeper).

What the member holds (installed partitions, owner nodes, carried offsets) stays in the driver,
where other threads read it under a lock: a step reads a plain copy (:class:`ReadBooks`), keeps
it in step with every change it orders (:class:`Install`, :class:`DropNodes`, ...), and nothing
else changes it while a step runs (every change is made on the rebalancer thread).
What the rebalancer remembers from one attempt to the next is an :class:`AttemptMemory`, plain
data the attempt updates in place (so an attempt that raises leaves it as far as it got).

May import: the standard library's ``typing``, ``enum`` and ``dataclasses``,
:mod:`zkconsumer.structs`, :mod:`zkconsumer.errors`, and of this folder :mod:`.decisions` and
:mod:`.effects` (the effect types); nothing else (no kazoo,
no threads, no clock, no logging: a log line is an effect too).
``tests/unit/rebalance/test_machine.py`` checks the imports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Generator, List, Mapping, Optional, Sequence, Set, Tuple, TypeVar

from ..structs import TopicPartition
from . import decisions as decide
from .effects import (
    DEBUG,
    INFO,
    WARNING,
    Assign,
    AttemptMemory,
    BeforeReleasing,
    BeforeStarting,
    BeginWait,
    Books,
    Carry,
    Changed,
    CheckNewEvent,
    Claim,
    ClaimOne,
    Commit,
    ConfirmHeld,
    Disown,
    DropNodes,
    EndWait,
    Forget,
    Holder,
    Holds,
    Install,
    KnownHolders,
    Log,
    Members,
    Now,
    PartitionsLost,
    Raised,
    ReadBooks,
    ReadMembers,
    ReadOffsets,
    ReadPartitions,
    ReadRevoked,
    ReadTopics,
    RearmWait,
    RecordNodes,
    Register,
    Relabel,
    Release,
    ReleaseMany,
    ReleaseStale,
    Revoke,
    Share,
    Subscribe,
    Subscriptions,
    Wait,
    WatchDeletion,
    WatchTopics,
)

T = TypeVar("T")


Step = Generator[Any, Any, T]


def drive(step: Step[T], execute: Callable[[Any], Any], expected: Tuple[type, ...]) -> T:
    """Run ``step`` to its end: execute each effect it yields and send it the result (an exception
    raised by ``execute`` as :class:`Raised`, ``expected`` if it is one of ``expected``). Returns
    what the step returns; raises what it raises."""
    result: Any = None
    while True:
        try:
            effect = step.send(result)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        try:
            result = execute(effect)
        except BaseException as exc:  # handed to the step, which decides
            result = Raised(exc, isinstance(exc, expected))


def _call(effect: Any) -> Generator[Any, Any, Any]:
    """Yield ``effect``; return its result, or raise what executing it raised."""
    result = yield effect
    if isinstance(result, Raised):
        raise result.error
    return result


def _tried(effect: Any) -> Generator[Any, Any, Any]:
    """Yield ``effect``; return its result, or the :class:`Raised` of an expected error (others are raised)."""
    result = yield effect
    if isinstance(result, Raised) and not result.expected:
        raise result.error
    return result


def _pairs(tps: Sequence[TopicPartition]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(tps))


# ------------------------------------------------------------------ the steps

def attempt(memory: AttemptMemory, consumer_id: str, max_early: int, claim_backoff_s: float, claim_retries: int,
            auto_commit: bool) -> Step[Optional[bool]]:
    """One attempt: ``True`` done, ``False`` failed (claims still conflict), ``None`` superseded by
    a new event (not a failure). Raises what a read or a claim raised (the attempt failed)."""
    members: Members = yield from _call(ReadMembers(fresh=False))
    if memory.needs_register or consumer_id not in members.registrations:
        # A new session, or our node vanished (deleted by hand, a session race).
        yield from _call(Register())
        memory.needs_register = False
        memory.confirm_owners = True
        members = yield from _call(ReadMembers(fresh=True))  # our node's watch event may still be on its way
    need_topics = any(pattern != "static" for pattern in members.patterns.values())
    all_topics = (yield from _call(ReadTopics())) if need_topics else []
    subs: Subscriptions = yield from _call(Subscribe(members, tuple(all_topics)))
    yield from _call(WatchTopics(subs.my_topics))  # armed before the read it guards: a later change fires it
    partitions = yield from _call(ReadPartitions(subs.my_topics))
    share: Share = yield from _call(Assign(subs.consumers_for_topic, partitions))
    mine = share.mine
    pending = yield from _call(CheckNewEvent())
    books: Books = yield from _call(ReadBooks())
    if decide.supersede(pending, memory.early_supersedes, max_early, mine, books.owned):
        # A new event arrived while this view was read: act on the next one instead (no
        # request spent on a stale view; a burst of joins costs one move, not one per join).
        memory.early_supersedes += 1
        return None
    memory.early_supersedes = 0

    step = decide.next_step(mine, books.owned, books.fetching, set(books.nodes), memory.confirm_owners)
    if step is decide.Step.NOTHING or (step is decide.Step.CONFIRM and (yield from reclaim(mine))):
        memory.confirm_owners = False
        yield from _call(Log(DEBUG, f"{consumer_id}: assignment unchanged, nothing to do"))
        return True
    memory.confirm_owners = False  # the full path below claims every assigned partition
    yield from _call(Log(INFO, f"{consumer_id} rebalancing: {len(mine)} partitions assigned to it, "
                               f"{len(books.owned)} owned"))
    yield from pause(consumer_id, mine, auto_commit)
    return (yield from take_ownership(consumer_id, mine, share.assignment, claim_backoff_s, claim_retries))


def reclaim(mine: Mapping[TopicPartition, str]) -> Step[bool]:
    """Confirm our owner nodes after our member node had vanished (one claim each, in order, until
    one is someone else's): ``False`` then. Claiming re-creates owner nodes deleted with the member
    node and confirms those still ours, without pausing delivery."""
    for tp in sorted(mine):
        holder = yield from _call(ClaimOne(tp, mine[tp]))
        if holder is not None:
            return False
    return True


def lose(consumer_id: str, partitions: Sequence[TopicPartition]) -> Step[List[TopicPartition]]:
    """Of ``partitions`` (a fenced commit found them taken), those this session no longer holds,
    ZooKeeper says; they stop counting as owned. A fence can be stale (it compared against a
    snapshot taken before a relabel): a partition we still hold is kept. If ZooKeeper cannot
    tell, it counts as lost: the next attempt's claim decides."""
    lost = yield from _really_lost(consumer_id, partitions)
    yield from _call(Disown(tuple(lost)))
    return lost


def _really_lost(consumer_id: str, partitions: Sequence[TopicPartition]) -> Step[List[TopicPartition]]:
    lost = []
    for tp in sorted(partitions):
        held = yield from _tried(Holds(tp))
        if isinstance(held, Raised):
            yield from _call(Log(INFO, f"{consumer_id}: cannot check ownership of {tp[0]}-{tp[1]} ({held.error}); "
                                       "treating it as lost"))
            held = False
        if held:
            yield from _call(Log(INFO, f"{consumer_id}: {tp[0]}-{tp[1]} is still ours (a commit raced a rebalance); "
                                       "keeping it"))
        else:
            lost.append(tp)
    return lost


def pause(consumer_id: str, mine: Mapping[TopicPartition, str], auto_commit: bool) -> Step[None]:
    """Stop delivering the partitions that move, then commit what was handed out.

    A partition moves when it is not assigned to us any more, goes to another of our streams,
    or was found taken from us. Retained partitions keep fetching, with their queued chunks. A
    failed commit is logged and the rebalance goes on: unwritten offsets stay pending.
    """
    books: Books = yield from _call(ReadBooks())
    taken = {tp for tp in books.delivered if tp not in books.owned}  # found taken from us earlier (lose)
    yield from _call(Revoke(tuple(decide.moving(books.delivered, mine, books.owned))))
    if auto_commit and books.delivered:
        result = yield from _tried(Commit())
        fenced: List[TopicPartition] = []
        if isinstance(result, Raised):
            fenced = list(getattr(result.error, "fenced", []) or [])
            yield from _call(Log(WARNING, f"{consumer_id}: committing offsets before rebalancing failed "
                                          f"({type(result.error).__name__}: {result.error}); going on, they are "
                                          "written at the next commit"))
        else:
            fenced = list(result or [])
        if fenced:  # taken over behind our back: not ours to keep delivering or to retain
            lost = yield from _really_lost(consumer_id, fenced)
            yield from _call(Revoke(tuple(lost)))
            yield from _call(Disown(tuple(lost)))
            for tp in lost:
                books.owned.pop(tp, None)
            taken.update(lost)
    moved: Dict[TopicPartition, int] = yield from _call(ReadRevoked())
    # To another stream of ours: resume where it was.
    yield from _call(Carry(tuple(decide.carried(moved, mine, books.owned))))
    released = [tp for tp in moved if tp not in taken]
    if released:  # handed over in order: their positions were committed above
        yield from _call(BeforeReleasing(_by_topic(released)))
    lost_now = [tp for tp in moved if tp in taken]
    if lost_now:  # another member holds them already: nothing of ours was committed for them since
        yield from _call(PartitionsLost(_by_topic(lost_now)))
    yield from _call(Forget(tuple(moved), update_fetching=True))


def _by_topic(tps: Sequence[TopicPartition]) -> Dict[str, Set[int]]:
    """``[(topic, partition)]`` -> ``{topic: {partition, ...}}``, as the listener takes them."""
    by_topic: Dict[str, Set[int]] = {}
    for topic, partition in tps:
        by_topic.setdefault(topic, set()).add(partition)
    return by_topic


@dataclass
class _Attempt:
    """The working state of :func:`take_ownership`."""

    consumer_id: str
    mine: Mapping[TopicPartition, str]
    books: Books
    #: newly confirmed ours in this attempt, not yet installed
    claimed: List[TopicPartition] = field(default_factory=list)
    #: partitions whose owner node has an armed watch of this attempt
    armed: Set[TopicPartition] = field(default_factory=set)


def take_ownership(consumer_id: str, mine: Mapping[TopicPartition, str], assignment: Mapping[TopicPartition, str],
                   claim_backoff_s: float, claim_retries: int) -> Step[Optional[bool]]:
    """Release what moves away, claim what is new, start fetching; ``False`` if claims still conflict.

    ``None`` (superseded, not a failure): a new event arrived while waiting for a peer to
    release; what was claimed is installed and the caller looks again. On failure, and whatever
    raises, partitions newly claimed in this attempt are released again (or, if ZooKeeper
    refuses that too, kept in the books for the next attempt); retained ones keep being fetched.
    See :meth:`Ownership.take_ownership <zkconsumer.rebalance.ownership.Ownership.take_ownership>`
    for what each costs in requests.
    """
    books: Books = yield from _call(ReadBooks())
    leaving = decide.leaving(set(books.nodes), mine)
    if leaving:
        yield from _call(ReleaseMany(tuple(leaving)))
        yield from _drop_nodes(books, leaving)

    retained = decide.retained(mine, set(books.delivered), books.owned)
    state = _Attempt(consumer_id, mine, books)
    try:
        conflicts: Dict[TopicPartition, Holder] = {}
        holders: Dict[TopicPartition, Optional[Holder]] = {}
        # Still ours: re-read only if its watch fired (one taken behind our back is not kept).
        kept = sorted(retained)
        confirmed = {tp for tp, held in zip(kept, (yield from _call(ConfirmHeld(tuple(kept))))) if held}
        moving = [tp for tp in sorted(mine) if tp in books.nodes and tp not in retained]
        relabelled = {tp for tp, done in zip(moving, (yield from _call(Relabel(tuple((tp, mine[tp])
                                                                                      for tp in moving))))) if done}
        unknown = [tp for tp in sorted(mine) if tp not in confirmed and tp not in relabelled]
        for tp in sorted(mine):
            if tp in relabelled and tp not in confirmed:
                holders[tp] = None  # moved between our own streams: relabelled
        known: Dict[TopicPartition, Holder] = yield from _call(KnownHolders(tuple(unknown)))
        holders.update(known)  # held by a peer, and its node unchanged since: no request
        state.armed.update(known)
        holders.update((yield from _claim_all(state, [tp for tp in unknown if tp not in known], look_first=True)))
        for tp, holder in sorted(holders.items()):
            if holder is None:
                yield from _record(books, [(tp, mine[tp])])
                if tp not in retained:
                    state.claimed.append(tp)
            else:
                conflicts[tp] = holder
                if tp in retained:  # taken from us behind our back
                    retained.discard(tp)
                    yield from _call(Revoke((tp,)))
                    yield from _call(Forget((tp,)))
                    books.forget([tp])
        superseded = bool(conflicts) and (yield from _wait_and_claim(state, conflicts, claim_backoff_s, claim_retries))
        if conflicts:
            yield from _call(Log(INFO, f"{consumer_id}: partitions still owned by others"
                                       f"{' (a new event came: looking again)' if superseded else ''}: "
                                       + ", ".join(f"{t}-{p} ({h.thread_id})" for (t, p), h in sorted(conflicts.items()))))
            if not superseded:
                return False  # the finally clause settles what was claimed

        committed = yield from _call(ReadOffsets(tuple(tp for tp in state.claimed if tp not in books.carried)))
        by_topic: Dict[str, Dict[int, str]] = {}
        for (topic, partition), thread_id in assignment.items():
            by_topic.setdefault(topic, {})[partition] = thread_id
        yield from _call(BeforeStarting(consumer_id, by_topic))
        yield from _install(books, {tp: mine[tp] for tp in state.claimed}, committed)
        state.claimed = []
        return None if conflicts else True
    finally:
        if state.claimed:
            yield from _abandon(state)


def _record(books: Books, nodes: List[Tuple[TopicPartition, str]], overwrite: bool = True) -> Step[None]:
    yield from _call(RecordNodes(tuple(nodes), overwrite))
    for tp, thread_id in nodes:
        if overwrite:
            books.nodes[tp] = thread_id
        else:
            books.nodes.setdefault(tp, thread_id)


def _drop_nodes(books: Books, tps: Sequence[TopicPartition]) -> Step[None]:
    yield from _call(DropNodes(tuple(tps)))
    for tp in tps:
        books.nodes.pop(tp, None)
        books.carried.discard(tp)
    books.forget(tps)


def _install(books: Books, claims: Mapping[TopicPartition, str],
             committed: Mapping[TopicPartition, Optional[int]]) -> Step[None]:
    yield from _call(Install(dict(claims), committed))
    _installed(books, claims)


def _installed(books: Books, claims: Mapping[TopicPartition, str]) -> None:
    for tp, thread_id in claims.items():
        books.carried.discard(tp)
        if tp not in books.delivered:
            books.delivered.append(tp)
        books.owned[tp] = thread_id
    books.fetching = bool(books.delivered)


def _claim_all(state: _Attempt, tps: List[TopicPartition], look_first: bool = False
               ) -> Step[Dict[TopicPartition, Optional[Holder]]]:
    """Claim ``tps`` at once, each with a fresh watch: their holders. If the claims raise part-way,
    the nodes they may have created are released (or kept in the books for the next attempt)
    before the error goes on: no attempt leaves an owner node nobody knows about."""
    result = yield Claim(tuple((tp, state.mine[tp]) for tp in tps), look_first)
    if isinstance(result, Raised):
        yield from _release_or_keep(state, [tp for tp in tps if tp not in state.books.nodes])
        raise result.error
    holders: Dict[TopicPartition, Optional[Holder]] = dict(zip(tps, result))
    state.armed.update(tp for tp, holder in holders.items() if holder is not None)
    state.armed.difference_update(tp for tp, holder in holders.items() if holder is None)
    return holders


def _release_or_keep(state: _Attempt, tps: List[TopicPartition]) -> Step[None]:
    """Release each of ``tps`` if this session holds it; never raises (but what is not a ZooKeeper error).

    At the first release ZooKeeper does not make, that one and the rest stay in the books
    untried (with ZooKeeper away, a hundred tries would hold the rebalancer for minutes); the
    next attempt releases what is left.
    """
    for i, tp in enumerate(tps):
        result = yield from _tried(Release(tp))
        if isinstance(result, Raised):
            yield from _call(Log(WARNING, f"{state.consumer_id}: could not release {tp[0]}-{tp[1]} after a failed "
                                          f"attempt ({result.error}); the next attempt releases it and "
                                          f"{len(tps) - i - 1} more"))
            yield from _record(state.books, [(rest, state.mine[rest]) for rest in tps[i:]], overwrite=False)
            return
        yield from _drop_nodes(state.books, [tp])


def _abandon(state: _Attempt) -> Step[None]:
    """Settle the nodes a failed attempt claimed but did not install: a partition that only moved
    between our own streams stays ours and is fetched from where it was; every other one is released."""
    claimed = state.claimed
    keep = {tp: state.mine[tp] for tp in claimed if tp in state.books.carried}
    if keep:
        result = yield from _tried(Install(keep, {}))
        if isinstance(result, Raised):
            yield from _call(Log(WARNING, f"{state.consumer_id}: could not resume {_pairs(list(keep))} "
                                          f"({result.error}); releasing them"))
        else:
            _installed(state.books, keep)
            claimed = [tp for tp in claimed if tp not in keep]
    yield from _release_or_keep(state, claimed)


def _wait_and_claim(state: _Attempt, conflicts: Dict[TopicPartition, Holder], claim_backoff_s: float,
                    claim_retries: int) -> Step[bool]:
    """Retry conflicting claims as their owner nodes are deleted; ``True`` if a new event ended the wait.

    Moves each partition it manages to claim from ``conflicts`` to ``state.claimed`` at once
    (so a later failure still releases it). A peer still releasing is waited for up to
    ``claim_backoff_s`` × ``claim_retries`` (:func:`decisions.claim_deadline`); a new event ends
    the wait at once (the view is stale). One watch per conflicting node, armed by the claim
    that met it: a wake-up retries only the nodes that changed.
    """
    deadline = decide.claim_deadline((yield from _call(Now())), claim_backoff_s, claim_retries)
    stale_checked: Set[TopicPartition] = set()
    yield from _call(BeginWait())
    try:
        while conflicts:
            if (yield from _call(RearmWait())):
                return True
            for tp, holder in sorted(conflicts.items()):
                if tp not in stale_checked and holder.ours:
                    # Our own node from an earlier, expired session (ZOOKEEPER-1740); its deletion fires the watch.
                    yield from _call(ReleaseStale(tp, holder.thread_id))
                stale_checked.add(tp)
                if tp not in state.armed:
                    state.armed.add(tp)
                    yield from _call(WatchDeletion(tp))
            changed: List[TopicPartition] = yield from _call(Changed(tuple(sorted(conflicts))))
            if not changed:
                remaining = deadline - (yield from _call(Now()))
                if remaining <= 0:
                    break
                yield from _call(Wait(remaining))
                continue
            got: List[Tuple[TopicPartition, str]] = []
            for tp, still_held_by in (yield from _claim_all(state, changed)).items():
                if still_held_by is None:
                    got.append((tp, state.mine[tp]))
                    state.claimed.append(tp)
                    del conflicts[tp]
                else:
                    conflicts[tp] = still_held_by
            yield from _record(state.books, got)
    finally:
        yield from _call(EndWait())
    return False
