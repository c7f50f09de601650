"""Serving a Prometheus registry over HTTP, with a bounded shutdown.

:class:`MetricsServer` wraps :func:`prometheus_client.start_http_server`
(``/metrics`` in the text exposition format) so that :meth:`MetricsServer.close`
stops the server and joins its thread. Port 0 picks a free port; read
:attr:`MetricsServer.port` afterwards.
"""

from __future__ import annotations

import logging
import threading
from typing import Optional

from prometheus_client import CollectorRegistry, start_http_server

from ..errors import ConfigurationError

__all__ = ["MetricsServer"]

log = logging.getLogger(__name__)

#: How long :meth:`MetricsServer.close` waits for the server thread.
JOIN_TIMEOUT_S = 5.0


class MetricsServer:
    """An HTTP server exposing ``registry`` on ``addr:port`` until :meth:`close` (idempotent).

    Raises :class:`~zkconsumer.errors.ConfigurationError` if the port cannot be bound.
    """

    def __init__(self, registry: CollectorRegistry, port: int, addr: str = "0.0.0.0") -> None:
        try:
            self._server, self._thread = start_http_server(port, addr=addr, registry=registry)
        except OSError as exc:
            raise ConfigurationError("metrics_port", f"cannot serve metrics on {addr}:{port}: {exc}") from exc
        self._thread.name = f"zkconsumer-metrics-http-{self.port}"
        self._lock = threading.Lock()
        self._closed = False

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        bound = self._server.server_address[0]
        host = bound.decode() if isinstance(bound, bytes) else str(bound)
        host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        return f"http://{host}:{self.port}/metrics"

    def close(self, timeout_s: Optional[float] = JOIN_TIMEOUT_S) -> None:
        """Stop serving, close the socket and join the thread (within ``timeout_s``)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            log.warning("metrics HTTP server thread did not stop within %ss", timeout_s)
