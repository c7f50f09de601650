"""ZooKeeper calls that never wait longer than a deadline.

kazoo's synchronous calls (``client.get(path)``...) wait for the answer without
a time limit. While the client is disconnected (ZooKeeper paused, killed,
restarted, unreachable) a request is queued until the connection comes back,
so the calling thread blocks for as long as ZooKeeper is away: a rebalancer,
an offset commit or ``shutdown()`` would hang with it.

:class:`BoundedZooKeeper` wraps a :class:`~kazoo.client.KazooClient` with the
same method names for the calls zkconsumer makes, each waiting at most until
the calling thread's current deadline (:meth:`BoundedZooKeeper.deadline`), or
``default_timeout_s`` without one. Contract of every call:

* answered in time: the result, or kazoo's exception for it (``NoNodeError``,
  ``NodeExistsError``, ``ConnectionLoss``, ``SessionExpiredError``, ...);
* not answered in time: :class:`kazoo.exceptions.OperationTimeoutError` (a
  transient error: the caller's retry may try again). The request stays
  queued in kazoo and may still run when the connection returns, on the same
  session (on a new session kazoo fails it). Callers therefore only issue
  repeat-safe steps, whose late execution is harmless: a write fenced by a
  version, a create of a node that is ours anyway;
* denied (``NoAuthError``, a failed authentication): a non-retriable
  :class:`~zkconsumer.errors.ZooKeeperAccessError` naming the node and the
  operation (also when a multi-operation's result holds a ``NoAuthError``).

Anything else (``client_id``, ``state``, listeners...) is passed through to the
wrapped client unchanged.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import AuthFailedError, NoAuthError, OperationTimeoutError

from .. import kerberos
from ..errors import ZooKeeperAccessError

T = TypeVar("T")

__all__ = ["BoundedZooKeeper"]


class BoundedZooKeeper:
    """A :class:`KazooClient` whose calls wait at most until a deadline; see the module docstring."""

    def __init__(self, client: KazooClient, default_timeout_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.raw = client
        self.default_timeout_s = default_timeout_s
        self._clock = clock  # deadlines are measured on it (a simulation passes its virtual clock)
        # The calling thread's deadline. A context variable, not a threading.local: each thread has
        # its own context (so it is per thread here), and so does each task of a simulation's runtime.
        self._deadline: contextvars.ContextVar[Optional[float]] = contextvars.ContextVar(
            f"zkconsumer-deadline-{id(self):x}", default=None)

    # ------------------------------------------------------------------ deadlines

    @contextlib.contextmanager
    def deadline(self, seconds: float) -> Iterator[None]:
        """Within the block, this thread's calls wait at most until ``seconds`` from now (in total).

        Nested blocks keep the earlier of the two deadlines.
        """
        previous = self._deadline.get()
        mine = self._clock() + seconds
        self._deadline.set(mine if previous is None else min(previous, mine))
        try:
            yield
        finally:
            self._deadline.set(previous)

    def remaining(self) -> Optional[float]:
        """Seconds left before this thread's deadline (``None`` without one; may be negative)."""
        deadline = self._deadline.get()
        return None if deadline is None else deadline - self._clock()

    def _wait(self, what: str, path: str, result: Any) -> Any:
        deadline = self._deadline.get()
        timeout = self.default_timeout_s if deadline is None else deadline - self._clock()
        try:
            return result.get(timeout=max(timeout, 0.001))
        except self.raw.handler.timeout_exception as exc:
            raise OperationTimeoutError(f"ZooKeeper did not answer {what} {path} in time") from exc
        except NoAuthError as exc:
            raise ZooKeeperAccessError(path, what) from exc
        except AuthFailedError as exc:
            raise ZooKeeperAccessError(path, what, self._auth_failed()) from exc

    def _auth_failed(self) -> str:
        """The detail of an AUTH_FAILED session: with SASL (kazoo's connection has ``sasl_options``), ZooKeeper
        refused the Kerberos ticket of a reconnection; else ``zookeeper.auth``."""
        sasl = getattr(getattr(self.raw, "_connection", None), "sasl_options", None)
        if not sasl:
            return "authentication failed: check zookeeper.auth"
        service = sasl.get("service", "zookeeper") if isinstance(sasl, dict) else "zookeeper"
        return ("ZooKeeper refused our Kerberos ticket (AUTH_FAILED): "
                + kerberos.refused_ticket_causes("zookeeper.sasl.service.name", str(service)))

    def _send(self, what: str, path: str, send: Callable[[], Any]) -> Any:
        """``send()`` the request and wait for it as :meth:`_wait` does; past this thread's deadline,
        :class:`OperationTimeoutError` without sending: nothing may be left on its way, maybe applied
        and never answered, by a caller that gave up (a shutdown's last commit), and no thread
        descheduled on its way into kazoo stretches a bounded block by one more call."""
        self.check_deadline(what, path)
        return self._wait(what, path, send())

    def check_deadline(self, what: str, path: str) -> None:
        """Raise :class:`OperationTimeoutError` if this thread's deadline has passed (see :meth:`_send`)."""
        remaining = self.remaining()
        if remaining is not None and remaining <= 0:
            raise OperationTimeoutError(f"ZooKeeper did not answer {what} {path} in time (the deadline passed "
                                        "before it was sent)")

    def gather(self, what: str, calls: Sequence[Tuple[str, Any]]) -> List[Any]:
        """Wait for requests already sent together (``(path, async result)`` pairs, in order).

        Pipelining: the caller sends every request first (kazoo's ``*_async``
        calls) and the server answers them in order on the session, so ``n``
        requests take about one round trip instead of ``n``. Returns, per
        call, its result or the exception it raised (not raised here), mapped
        as the single calls map them: ``OperationTimeoutError`` past the
        deadline (all of them share it), ``ZooKeeperAccessError`` when denied.
        """
        outcomes: List[Any] = []
        for path, result in calls:
            try:
                outcomes.append(self._wait(what, path, result))
            except Exception as exc:  # returned per call: the caller decides what each one means
                outcomes.append(exc)
        return outcomes

    # ------------------------------------------------------------------ the calls zkconsumer makes

    def get(self, path: str, watch: Optional[Callable[..., Any]] = None) -> Any:
        return self._send("reading", path, lambda: self.raw.get_async(path, watch=watch))

    def exists(self, path: str, watch: Optional[Callable[..., Any]] = None) -> Any:
        return self._send("checking", path, lambda: self.raw.exists_async(path, watch=watch))

    def get_children(self, path: str, watch: Optional[Callable[..., Any]] = None, include_data: bool = False) -> Any:
        """The children's names (with ``include_data``: ``(names, stat)`` of ``path``)."""
        return self._send("listing", path,
                          lambda: self.raw.get_children_async(path, watch=watch, include_data=include_data))

    def create(self, path: str, value: bytes = b"", acl: Optional[List[Any]] = None, ephemeral: bool = False,
               sequence: bool = False, makepath: bool = False) -> str:
        """The path created (with ``sequence``: the name ZooKeeper gave it)."""
        created: str = self._send("creating", path, lambda: self.raw.create_async(
            path, value, acl=acl, ephemeral=ephemeral, sequence=sequence, makepath=makepath))
        return created

    def set(self, path: str, value: bytes, version: int = -1) -> Any:
        return self._send("writing", path, lambda: self.raw.set_async(path, value, version=version))

    def delete(self, path: str, version: int = -1) -> Any:
        return self._send("deleting", path, lambda: self.raw.delete_async(path, version=version))

    def ensure_path(self, path: str, acl: Optional[List[Any]] = None) -> Any:
        return self._send("creating", path, lambda: self.raw.ensure_path_async(path, acl=acl))

    def sync(self, path: str) -> Any:
        """ZooKeeper's ``sync``: the server this client is connected to catches up with the leader
        before answering, and so before any later request of this session."""
        return self._send("syncing", path, lambda: self.raw.sync_async(path))

    def transaction(self) -> "_BoundedTransaction":
        return _BoundedTransaction(self, self.raw.transaction())

    # ------------------------------------------------------------------ the session

    @property
    def session_id(self) -> Optional[int]:
        """The ZooKeeper session this client holds, also while the connection is SUSPENDED.

        kazoo's public ``client_id`` is ``None`` whenever the connection is not live,
        although the session is: a blip (a leader election, a server restart, a
        network hiccup) does not end it, and kazoo reconnects with the same id. The
        id kazoo keeps for that (``_session_id``: set from the server's answer at
        connect, kept across SUSPENDED, cleared when the session is LOST or the
        client closed) is the one that says whose nodes are whose. ``None`` before
        the first session, after a loss until the next one, and after ``close()``.
        A client without that attribute (another implementation) falls back to
        ``client_id``.
        """
        try:
            session: Optional[int] = self.raw._session_id
        except AttributeError:
            client_id = self.raw.client_id
            session = client_id[0] if client_id else None
        return session or None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


class _BoundedTransaction:
    """A kazoo ``TransactionRequest`` whose ``commit()`` is bounded like the other calls."""

    def __init__(self, owner: BoundedZooKeeper, request: Any) -> None:
        self._owner = owner
        self._request = request
        self._paths: List[str] = []

    def check(self, path: str, version: int) -> None:
        self._paths.append(path)
        self._request.check(path, version)

    def create(self, path: str, value: bytes = b"", acl: Optional[List[Any]] = None, ephemeral: bool = False,
               sequence: bool = False) -> None:
        self._paths.append(path)
        self._request.create(path, value, acl=acl, ephemeral=ephemeral, sequence=sequence)

    def set_data(self, path: str, value: bytes, version: int = -1) -> None:
        self._paths.append(path)
        self._request.set_data(path, value, version=version)

    def delete(self, path: str, version: int = -1) -> None:
        self._paths.append(path)
        self._request.delete(path, version=version)

    def commit(self) -> List[Any]:
        """The per-operation results (exceptions as values, as kazoo returns them)."""
        what = "a multi-operation on"
        paths = ", ".join(self._paths)
        results: List[Any] = self._owner._send(what, paths, self._request.commit_async)
        for path, result in zip(self._paths, results):
            if isinstance(result, NoAuthError):
                raise ZooKeeperAccessError(path, what)
        return results
