"""Opening a member's ZooKeeper session: the client, its heartbeat, the first checks.

:func:`connect_zookeeper` is what a connector does before anything else: a kazoo client
that retries forever (shutdown closes it), the session heartbeat
(:mod:`zkconsumer.zookeeper.heartbeat`) and the server order after a drop installed, the
ACL/TLS settings checked before any session is opened, ``/consumers`` prepared (a wrong
``zookeeper.auth`` fails here). Whatever fails, nothing is left open.
"""

from __future__ import annotations

import logging
from typing import Tuple

from kazoo.client import KazooClient
from kazoo.exceptions import AuthFailedError, KazooException, NoAuthError
from kazoo.handlers.threading import KazooTimeoutError

from .. import kerberos
from ..config import ConsumerConfig
from ..errors import ZooKeeperAccessError, ZooKeeperUnavailableError
from ..security import check_config
from ..zookeeper import server_order
from ..zookeeper.acl import prepare_zookeeper, zookeeper_auth_data
from ..zookeeper.heartbeat import SessionHeartbeat, close_client
from ..zookeeper.reachability import diagnose

log = logging.getLogger(__name__)


def connect_zookeeper(cfg: ConsumerConfig, consumer_id: str) -> Tuple[KazooClient, SessionHeartbeat]:
    """A started client with a live session, and its heartbeat.

    Raises :class:`ZooKeeperUnavailableError` naming ``zookeeper.connect`` if no session
    within ``zookeeper.connection.timeout.ms`` (or ZooKeeper fails while preparing), and
    :class:`ZooKeeperAccessError` if ``zookeeper.auth`` is refused; the client is closed then.
    """
    try:
        check_config(cfg)  # bad ACL/TLS/Kerberos settings fail before a session is opened
    except kerberos.KdcUnavailableError as exc:
        raise ZooKeeperUnavailableError(f"{exc} (zookeeper.sasl.enabled / security.protocol need tickets)") from exc
    client = KazooClient(
        hosts=cfg.zookeeper_connect,
        timeout=cfg.zookeeper_session_timeout_ms / 1000.0,
        connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 2.0},
        auth_data=zookeeper_auth_data(cfg),
        sasl_options=kerberos.zookeeper_sasl_options(cfg),
    )
    heartbeat = SessionHeartbeat.install(client, cfg.zookeeper_heartbeat)
    server_order.install(client)  # after a drop, every other server before the one just left
    try:
        client.start(timeout=cfg.zookeeper_connection_timeout_ms / 1000.0)
    except KazooTimeoutError as exc:
        close_client(client, heartbeat, consumer_id)
        raise ZooKeeperUnavailableError(
            f"could not connect to ZooKeeper at zookeeper.connect={cfg.zookeeper_connect!r} within "
            f"zookeeper.connection.timeout.ms={cfg.zookeeper_connection_timeout_ms}: "
            f"{diagnose(cfg.zookeeper_connect)}"
        ) from exc
    try:
        try:
            prepare_zookeeper(client, cfg)  # open /consumers; a wrong zookeeper.auth fails here
        except NoAuthError as exc:
            raise ZooKeeperAccessError("/consumers", "preparing") from exc
        except AuthFailedError as exc:
            if cfg.zookeeper_sasl_enabled:
                kerberos.login_for(cfg).refused()  # the next attempt logs in afresh (see KerberosLogin.refused)
            raise ZooKeeperUnavailableError(auth_failed_text(cfg, exc)) from exc
        except KazooException as exc:
            raise ZooKeeperUnavailableError(
                f"ZooKeeper at zookeeper.connect={cfg.zookeeper_connect!r} failed while connecting: {exc!r}"
            ) from exc
    except BaseException:
        close_client(client, heartbeat, consumer_id)
        raise
    log.info("%s: ZooKeeper session 0x%x, timeout %.1fs, heartbeat %s (zookeeper.heartbeat=%s)",
             consumer_id, client.client_id[0] if client.client_id else 0,
             heartbeat.negotiated_timeout() or cfg.zookeeper_session_timeout_ms / 1000.0, heartbeat.effective,
             cfg.zookeeper_heartbeat)
    return client, heartbeat


def auth_failed_text(cfg: ConsumerConfig, exc: AuthFailedError) -> str:
    """The error text of ZooKeeper's AUTH_FAILED while connecting: with ``zookeeper.sasl.enabled`` it refused
    the Kerberos ticket we got (the login and service ticket were checked first), which it does not explain."""
    where = f"ZooKeeper at zookeeper.connect={cfg.zookeeper_connect!r}"
    if not cfg.zookeeper_sasl_enabled:
        return f"{where} failed while connecting: {exc!r}"
    return (f"{where} refused our Kerberos ticket (AUTH_FAILED, {exc!r}): "
            f"{kerberos.refused_ticket_causes('zookeeper.sasl.service.name', cfg.zookeeper_sasl_service_name)}")
