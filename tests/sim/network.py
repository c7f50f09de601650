"""The network between the simulated clients and the ensemble, and the faults of a member's
process around its client: both drawn by the schedule (see :mod:`.client`)."""

from __future__ import annotations

import random
from typing import Dict, Optional


class Network:
    """Latencies and faults between clients and the ensemble, drawn from the schedule's generator."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.slow_until = 0.0  # replies are slow (seconds) until then
        self.partitioned: Dict[str, float] = {}  # client name -> cut off from ZooKeeper until then

    def latency(self, now: float) -> float:
        if now < self.slow_until and self.rng.random() < 0.3:
            return self.rng.uniform(1.0, 8.0)
        return self.rng.uniform(0.0005, 0.004)

    def cut(self, name: str, now: float) -> bool:
        return self.partitioned.get(name, 0.0) > now

    def cut_until(self, name: str) -> float:
        return self.partitioned.get(name, 0.0)


class ClientFaults:
    """Faults of the process around one client, drawn by the schedule (none by default).

    ``preempt``: the probability that a thread making a request is descheduled between its
    decision (what it read before the call) and the request entering kazoo's queue, for a
    time drawn by :meth:`preemption` (sometimes across a reconnection, or a session expiry
    and a new session). ``callback_lag``: the most a callback thread may lag behind the
    connection thread per callback. Draws come from ``rng`` alone (not the network's), so a
    schedule that draws none of these faults plays as it would without them.
    """

    def __init__(self, rng: Optional[random.Random] = None, preempt: float = 0.0, callback_lag: float = 0.0) -> None:
        self.rng = rng or random.Random(0)
        self.preempt = preempt
        self.callback_lag = callback_lag
        #: While the group is to settle (the faults stopped): only time slices, no descheduling for
        #: seconds, which stands for a fault (a stalled machine) and would keep any attempt of a
        #: large share failing (seeds 3002186, 3103328). The draws stay the same.
        self.calm = False

    def preemption(self) -> float:
        """Seconds the calling thread is descheduled before its request is queued (0: not at all)."""
        if self.preempt <= 0.0 or self.rng.random() >= self.preempt:
            return 0.0
        roll = self.rng.random()
        if roll < 0.6:
            return self.rng.uniform(0.0001, 0.05)  # an ordinary time slice
        if roll < 0.9:
            pause = self.rng.uniform(0.05, 2.0)  # across a reconnection
        else:
            pause = self.rng.uniform(2.0, 10.0)  # across a session expiry and a new session
        return min(pause, 0.05) if self.calm else pause

    def lag(self) -> float:
        return self.rng.uniform(0.0, self.callback_lag) if self.callback_lag > 0.0 else 0.0
