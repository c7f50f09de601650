"""The invariants of switch schedules, across both memberships (see the table in :mod:`.invariants`).

=====================  ========================================================  =======================
name                   property                                                  checked
=====================  ========================================================  =======================
exclusive-across       no partition delivered by two members at once, whichever  after every event that
                       membership each is in: ZooKeeper members count while      ran one of a member's
                       their session is alive and not lost (``exclusive`` ties   tasks
                       what they deliver to their owner nodes), coordinator
                       members while the coordinator lists them in the
                       generation they deliver (the others deliver at most what
                       they queued before, as a ZooKeeper member whose session
                       is gone)
offsets-monotone       the committed offset in Kafka (the authoritative store    at every offset the
                       before, during and after the switch: every member runs    coordinator stores
                       ``offsets.storage=kafka``) never moves backwards
settles                once faults stop, within a bound: every live member on    at quiescence
                       the membership the migration node names; on ZooKeeper:
                       ``settles`` of :mod:`.invariants` and no member at the
                       coordinator; on the coordinator: nothing registered or
                       owned in ZooKeeper, the generation stable with every
                       live member in it, every subscribed partition delivered
                       by exactly one member
=====================  ========================================================  =======================
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Set

from zkconsumer.structs import TopicPartition

from .invariants import PATHS, Violation, check_settled


def check_across(world: Any) -> None:
    """``exclusive-across``."""
    coordinator, ensemble = world.coordinator, world.ensemble
    seen: Dict[TopicPartition, str] = {}
    for m in world.members:
        if m.state != "joined":
            continue
        if m.mode == "zookeeper":
            sid = m.client.sid
            if m.stale or sid is None or not ensemble.alive(sid):
                continue
            what = "ZooKeeper"
        elif m.mode == "kafka" and m.side is not None:
            generation = m.side.generation()
            if generation is None or generation.member_id not in coordinator.members \
                    or generation.generation_id != coordinator.generation:
                continue
            what = f"coordinator generation {generation.generation_id}"
        else:
            continue
        for tp in sorted(m.believed()):
            other = seen.get(tp)
            if other is not None:
                raise Violation("exclusive-across", f"t={world.kernel.now:.3f} {m.name} ({what}) delivers "
                                                    f"{tp[0]}-{tp[1]} while {other} does", tp)
            seen[tp] = f"{m.name} ({what})"


def check_switch_settled(world: Any) -> Optional[str]:
    """``settles`` of a switch schedule: ``None`` if settled, else why not."""
    coordinator = world.coordinator
    live = [m for m in world.members if m.state == "joined"]
    wrong = [m.name for m in live if m.mode != world.intent]
    if wrong:
        return f"{wrong} not on {world.intent} membership"
    if world.intent == "zookeeper":
        if coordinator.members:
            return f"the coordinator still lists {sorted(coordinator.members)}"
        return check_settled(world.members, world.ensemble, world.schedule.strategy)
    tree = world.ensemble.leader.tree
    ids = tree.get(PATHS.ids)
    if ids is not None and ids.children:
        return f"registered in ZooKeeper: {sorted(ids.children)}"
    owners = tree.get(f"{PATHS.root}/owners")
    for topic in sorted(owners.children) if owners is not None else []:
        held = tree.get(f"{PATHS.root}/owners/{topic}")
        if held is not None and held.children:
            return f"owner nodes left under {topic}: {sorted(held.children)}"
    for m in live:
        if not m.settled():
            return f"{m.name} is not in the coordinator's stable generation {coordinator.generation}"
    listed = sorted(m.side.member_id for m in live)
    if listed != sorted(coordinator.members):
        return f"the coordinator lists {sorted(coordinator.members)} but the live members are {listed}"
    wanted: Set[TopicPartition] = set()
    for m in live:
        for topic in m.count.subscription:
            wanted.update((topic, p) for p in range(world.partitions.get(topic, 0)))
    delivered: Dict[TopicPartition, str] = {}
    for m in live:
        for tp in m.believed():
            if tp in delivered:
                return f"{tp} delivered by {delivered[tp]} and {m.name}"
            delivered[tp] = m.name
    if set(delivered) != wanted:
        return f"delivered {sorted(delivered)[:6]}... but subscribed {sorted(wanted)[:6]}..."
    return None
