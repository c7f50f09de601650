"""What every simulated group member is as a process: its tasks, its client, kill -9 and a clean exit."""

from __future__ import annotations

import random
from typing import Callable

from .client import SimKazoo
from .kernel import Kernel, SimTask
from .network import Network
from .zkmodel import Ensemble

GROUP = "g"


class SimProcess:
    """Base of :class:`~.member.Member` and :class:`~.kafka_member.KafkaMember`."""

    kernel: Kernel
    name: str
    client: SimKazoo
    #: new, joining, joined, join-failed, leaving, left, killed
    state: str

    def __init__(self, kernel: Kernel, ensemble: Ensemble, network: Network, kind: str, index: int,
                 incarnation: int, seed: int, trace: Callable[[str], None], session_timeout: float) -> None:
        self.kernel = kernel
        self.index = index
        self.name = f"{kind}{index}.{incarnation}"
        # Kafka's ids sort as strings: vary the prefix so neither join order nor index decides it.
        prefix = {"m": "h"}.get(kind, kind)  # zkconsumer's members keep the ids the fixed seeds were found with
        self.consumer_id = f"{GROUP}_{prefix}{(index * 7919 + incarnation * 104729) % 1000:03d}-{index}-{incarnation}"
        self.trace = trace
        self.rng = random.Random(seed)
        self.client = SimKazoo(kernel, ensemble, network, self.name, session_timeout, trace)
        self.state = "new"

    def spawn(self, target: Callable[[], None], what: str) -> SimTask:
        """Start one of this process's threads (a task that kill -9 stops)."""
        return SimTask(self.kernel, target, f"{what}-{self.name}", self.name)

    def exit(self, done: Callable[[], None]) -> None:
        """The end of a clean shutdown: close the session (its ephemeral nodes go at once)."""
        self.client.stop()
        self.state = "left"
        done()

    def kill(self) -> None:
        """kill -9: every task of this process stops where it is; its session expires on its own."""
        self.state = "killed"
        self.client.kill()
        for task in list(self.kernel.tasks):
            if task.owner == self.name:
                task.kill()

    @property
    def live(self) -> bool:
        return self.state in ("joining", "joined", "leaving")
