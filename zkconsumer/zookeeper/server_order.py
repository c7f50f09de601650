"""Which ZooKeeper server a member's client tries after a connection ends: never the one it left.

kazoo tries the servers of the connect string in rounds: each round is a fresh shuffle of
the whole list, and a connection that drops moves on to the next server of the current
round. When the server it left was the last one of its round, the next round is shuffled
again, and with ``n`` servers it starts on that same server one time in ``n``. After a
server that hangs (a SIGSTOPped or wedged node: TCP still accepts, nothing answers), that
draw costs a handshake timeout of ``T / n`` (``T`` the session timeout) spent on the hung
server, on top of the time it took to notice the hang (2T/3 after the last byte by default,
so T/3 is left to reach another server; with the opt-in quiet heartbeat up to 0.9 T after the
last packet, and the session is then lost). ZooKeeper's Java client, the
one Kafka's consumer uses, shuffles its list once and cycles through it, so it tries every
other server before it returns to the one it left.

:func:`install` keeps kazoo's rounds and shuffles, and moves the server the client last
tried to the end of each new round: a client returns to it only after every other server
failed too (alone in the connect string, it is still tried at once).
"""

from __future__ import annotations

import logging
from typing import Any, List, Optional, Sequence, Tuple, TypeVar

log = logging.getLogger(__name__)

__all__ = ["install", "last_server_last"]

#: kazoo's expanded host entry: (host name as written, resolved address, port)
HostEntry = TypeVar("HostEntry", bound=Tuple[Any, ...])


def last_server_last(hosts: Sequence[HostEntry], left: Optional[Tuple[str, int]]) -> List[HostEntry]:
    """``hosts`` (kazoo's ``(host, address, port)`` entries) in order, but those at ``left``
    (``(address, port)``, or ``None``) moved to the end. Pure."""
    if left is None:
        return list(hosts)
    elsewhere = [entry for entry in hosts if (entry[1], entry[2]) != left]
    return elsewhere + [entry for entry in hosts if (entry[1], entry[2]) == left]


def install(client: Any) -> bool:
    """Make ``client`` (a kazoo client, or a wrapper with the raw one as ``raw``) start each new
    round of connection attempts away from the server it last tried; before ``client.start()``.

    Wraps two methods of kazoo's connection handler on that instance, both called only on
    kazoo's connection thread: ``_connect_attempt`` (records the server) and
    ``_expand_client_hosts`` (a round's list). Returns ``False``, logging a warning and changing
    nothing, on a kazoo without them.
    """
    raw = getattr(client, "raw", client)
    connection: Any = getattr(raw, "_connection", None)
    attempt = getattr(connection, "_connect_attempt", None)
    expand = getattr(connection, "_expand_client_hosts", None)
    if not callable(attempt) or not callable(expand):
        log.warning("cannot order this kazoo's connection attempts: it may return at once to a server it left")
        return False
    left: List[Optional[Tuple[str, int]]] = [None]  # written and read on kazoo's connection thread only

    def remembering_attempt(host: Any, hostip: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        left[0] = (hostip, port)
        return attempt(host, hostip, port, *args, **kwargs)

    def round_away_from_the_last_server() -> Any:
        return last_server_last(expand(), left[0])

    connection._connect_attempt = remembering_attempt
    connection._expand_client_hosts = round_away_from_the_last_server
    return True
