"""Pushing a registry to a Prometheus Pushgateway, for members too short-lived or too many to scrape
(e.g. the members a Spark ``foreach_stream`` job runs in its tasks).

:class:`Pusher` pushes (HTTP PUT, replacing the previous push of the same
grouping key) every ``interval_s`` on its own thread and once more on
:meth:`Pusher.stop`, so the last counters of a member that ends are kept.
Push failures are logged and counted, never raised: monitoring must not stop a
consumer.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Dict, Optional

from prometheus_client import CollectorRegistry, push_to_gateway

from ..threads import ShutdownableThread

__all__ = ["Pusher", "DEFAULT_PUSH_INTERVAL_S"]

log = logging.getLogger(__name__)

DEFAULT_PUSH_INTERVAL_S = 10.0
JOIN_TIMEOUT_S = 10.0


class Pusher:
    """Push ``registry`` to ``gateway`` (``host:port`` or a URL) under ``job`` and ``grouping_key``."""

    def __init__(self, registry: CollectorRegistry, gateway: str, *, job: str = "zkconsumer",
                 grouping_key: Optional[Dict[str, str]] = None, interval_s: float = DEFAULT_PUSH_INTERVAL_S,
                 timeout_s: float = 5.0, push: Callable[..., None] = push_to_gateway) -> None:
        if interval_s <= 0:
            raise ValueError(f"the push interval must be positive, got {interval_s}")
        self._registry = registry
        self._gateway = gateway
        self._job = job
        self._grouping_key = dict(grouping_key or {})
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._push = push
        self._lock = threading.Lock()
        self.pushes = 0
        self.failures = 0
        self._thread = ShutdownableThread(f"zkconsumer-metrics-push-{job}", self._run)
        self._stopped = False

    def start(self) -> "Pusher":
        self._thread.start()
        return self

    def push_once(self) -> bool:
        """Push now on the calling thread; ``False`` (logged) if the gateway refused or was unreachable."""
        try:
            self._push(self._gateway, job=self._job, registry=self._registry, grouping_key=self._grouping_key,
                       timeout=self._timeout_s)
        except Exception as exc:  # noqa: BLE001 - urllib/HTTP errors of every kind
            with self._lock:
                self.failures += 1
            log.warning("could not push metrics to the Pushgateway %s: %s", self._gateway, exc)
            return False
        with self._lock:
            self.pushes += 1
        return True

    def _run(self) -> None:
        while not self._thread.wait(self._interval_s):
            self.push_once()

    def stop(self, timeout: Optional[float] = JOIN_TIMEOUT_S) -> bool:
        """Stop the thread (joined within ``timeout``), then push a last time; ``True`` once the thread ended.

        Idempotent: a second call neither joins nor pushes again.
        """
        with self._lock:
            if self._stopped:
                return not self._thread.is_alive()
            self._stopped = True
        ended = self._thread.stop(timeout)
        self.push_once()
        return ended
