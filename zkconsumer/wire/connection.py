"""One blocking TCP (optionally TLS) connection to one Kafka broker.

:class:`BrokerConnection` is Kafka's ``SimpleConsumer``/``BlockingChannel`` in
Python: it connects lazily, sends one request at a time and reads its response.
Contract:

* Any socket error, timeout (``socket_timeout_ms``, or a request's own ``timeout_ms``,
  without progress: per socket operation; the C receive loop, which asks the kernel to wake it only once most of a
  response is there, still looks for bytes every second, so it notices a stop within
  a second more),
  short read, or a response whose correlation id is not the request's, closes
  the connection and raises :class:`~zkconsumer.errors.BrokerUnavailableError`
  (retriable) naming ``host:port``. The next call reconnects.
* Broker error *codes* inside a well-formed response are not raised here,
  except by the convenience :meth:`BrokerConnection.list_offsets`.
* Thread-safe: requests are serialised by a lock. :meth:`abort` may be called
  from any thread to make an in-flight or later request fail at once (used to
  stop a fetcher blocked in a long fetch).

Responses are read with ``recv_into`` into one buffer allocated at the
response's announced size, so a large fetch response costs no repeated
concatenation; fetch message sets are read-only views into that buffer. Read-only
matters: the C decoder copies a large message set into its chunk with the GIL
released only from a buffer nobody can write meanwhile (a fetcher's reused buffer
is written only by that fetcher's next request, after the decode).
"""

from __future__ import annotations

import itertools
import logging
import socket
import ssl
import threading
from typing import Any, Callable, Optional, Sequence, TypeVar

from ..errors import BrokerUnavailableError
from .fetch_walk import FetchWalk, Requested, WalkedFetchRequest
from .messageset import speedups
from .protocol import (
    FetchPartition,
    FetchPartitionResponse,
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    MetadataRequest,
    MetadataResponse,
    Request,
    decode_response_header,
    encode_request,
)

__all__ = ["BrokerConnection"]

log = logging.getLogger(__name__)

R = TypeVar("R")

#: Refuse absurd response sizes (a desynchronised stream reads garbage as a size).
MAX_RESPONSE_BYTES = 1 << 30

#: The C extension's GIL-free receive loop (plain TCP only), or ``None``.
_recv_exactly = speedups.recv_exactly if speedups is not None else None
_recv_frame = speedups.recv_frame if speedups is not None else None
#: The C extension's Fetch writer and response walk (see :meth:`BrokerConnection._walk_on_open_socket`), or ``None``.
_fetch_request: Optional[Callable[..., Optional[bytes]]] = speedups.fetch_request if speedups is not None else None
_fetch_walk: Optional[Callable[..., Any]] = getattr(speedups, "fetch_walk", None)


class _SaslRefused(EOFError):
    """The broker closed the connection during the ``authenticate`` exchange."""


def _check_size(size: int) -> None:
    """Refuse a response size no broker sends (a desynchronised stream reads garbage as a size)."""
    if size < 4 or size > MAX_RESPONSE_BYTES:
        raise EOFError(f"implausible response size {size}")


class BrokerConnection:
    """A lazily connected, blocking connection to the broker at ``host:port``.

    ``socket_timeout_ms`` bounds connecting and every send/receive;
    ``receive_buffer_bytes`` sets ``SO_RCVBUF`` when positive; ``ssl_context``,
    if given, wraps the socket in TLS (``server_hostname=host``). ``authenticate``, if
    given, is called as ``authenticate(sock, host)`` on every new connection (after TLS)
    before the first request: the SASL exchange of ``security.protocol=SASL_*`` (see
    :func:`zkconsumer.kerberos.broker_authenticator`). An ``OSError``/``EOFError`` from it
    is a connection failure (BrokerUnavailableError, retriable); any other error
    (a ConfigurationError naming the property to fix) propagates as is.

    ``reuse_buffer=True`` reads every fetch response into one buffer kept by the
    connection (grown when a response is larger), instead of a new one each
    time: the message sets of a fetch response are then valid only until the next
    fetch on this connection, so the caller must be done with a response, or
    have copied what it keeps, before it fetches again. A fetcher thread
    does (the decoders copy every message out); it spares allocating and
    zero-filling a buffer of several MB per fetch.
    """

    def __init__(self, host: str, port: int, client_id: str, socket_timeout_ms: int,
                 receive_buffer_bytes: int, ssl_context: Optional[ssl.SSLContext] = None,
                 reuse_buffer: bool = False,
                 authenticate: Optional[Callable[[socket.socket, str], None]] = None) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.socket_timeout_ms = socket_timeout_ms
        self.receive_buffer_bytes = receive_buffer_bytes
        self.ssl_context = ssl_context
        self.authenticate = authenticate
        self._sock: Optional[socket.socket] = None
        self._lock = threading.Lock()
        self._correlation_ids = itertools.count(1)
        self._aborted = False
        self._interrupted = False  # interrupt(): the request in flight fails without a retry
        self._reuse_buffer = reuse_buffer
        self._buffer = bytearray(0)  # the reused response buffer (reuse_buffer=True)
        self._lowat = 1  # the socket's SO_RCVLOWAT as recv_frame left it (see _plain_mark)

    @property
    def address(self) -> str:
        """``host:port``, as used in error messages."""
        return f"{self.host}:{self.port}"

    @property
    def connected(self) -> bool:
        """Whether a socket is open right now (requests connect on demand anyway)."""
        return self._sock is not None

    def __repr__(self) -> str:
        return f"BrokerConnection({self.address}, client_id={self.client_id!r}, connected={self.connected})"

    def __enter__(self) -> "BrokerConnection":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ requests

    def send(self, request: Request[R]) -> R:
        """Send ``request`` and return its decoded response.

        Raises BrokerUnavailableError on any connection problem (see module docstring).
        """
        return self._send(request, shared_buffer=False)

    def _send(self, request: Request[R], shared_buffer: bool, timeout_ms: Optional[int] = None) -> R:
        """``timeout_ms``: this request's bound per socket operation (connecting included), instead
        of ``socket_timeout_ms``."""
        wait_ms = self.socket_timeout_ms if timeout_ms is None else timeout_ms
        with self._lock:
            if self._aborted:
                raise BrokerUnavailableError(f"connection to broker {self.address} was aborted")
            correlation_id = next(self._correlation_ids) & 0x7FFFFFFF
            frame = encode_request(request, correlation_id, self.client_id)
            try:
                payload = self._round_trip(frame, shared_buffer, wait_ms)
            except (OSError, EOFError) as exc:
                raise self._failed(exc, wait_ms) from exc
            finally:
                self._interrupted = False
            body = self._body(payload, correlation_id)
        return request.decode_response(body)

    def fetch(self, partitions: Sequence[FetchPartition], max_wait_ms: int, min_bytes: int,
              timeout_ms: Optional[int] = None) -> FetchResponse:
        """Fetch v0 for ``partitions``; message sets in the result are views into one buffer.

        With ``reuse_buffer`` that buffer is the connection's own: the views are
        valid until the next fetch (other requests use buffers of their own, so
        e.g. an offset lookup while processing a response leaves it intact).
        ``timeout_ms`` (positive), if given, bounds this request's socket operations
        instead of ``socket_timeout_ms`` (a consumer's own deadline); a timeout raises
        BrokerUnavailableError with ``timed_out`` set, and closes the connection as any
        timeout does (the answer may still come: the next request reconnects).
        """
        return self._send(FetchRequest(max_wait_ms, min_bytes, tuple(partitions)), self._reuse_buffer, timeout_ms)

    def fetch_walked(self, requested: Requested, max_wait_ms: int, min_bytes: int, max_bytes: int,
                     timeout_ms: Optional[int] = None) -> FetchWalk:
        """:meth:`fetch` of ``requested``'s partitions (``(topic, partition) -> (state, offset)``), each with
        ``max_bytes``, its response walked for the fetcher (:mod:`zkconsumer.wire.fetch_walk`). Same buffer,
        bound and errors as :meth:`fetch`."""
        request = WalkedFetchRequest(max_wait_ms, min_bytes, max_bytes, requested)
        if self._reuse_buffer:
            walked = self._walk_on_open_socket(request, timeout_ms)
            if walked is not None:
                return walked
        return self._send(request, self._reuse_buffer, timeout_ms)

    def _walk_on_open_socket(self, request: WalkedFetchRequest, timeout_ms: Optional[int]) -> Optional[FetchWalk]:
        """:meth:`fetch_walked`'s common case, a fetcher's every round, in one frame (issue 44: each Python frame of
        a round costs CPU at the rates most members run at): the socket of an earlier request open on plain TCP,
        the request written, sent and answered into the connection's buffer and walked by the C extension. The
        same frame, buffer, retry, bound and errors as :meth:`_send`. ``None``, having sent nothing, when it is
        not that case (no extension, no socket open, TLS, aborted, a request the C writer does not take):
        :meth:`_send` then does it all."""
        write, recv_frame, walk = _fetch_request, _recv_frame, _fetch_walk
        if write is None or recv_frame is None or walk is None:
            return None
        wait_ms = self.socket_timeout_ms if timeout_ms is None else timeout_ms
        with self._lock:
            sock = self._sock
            if sock is None or self._aborted or isinstance(sock, ssl.SSLSocket):
                return None
            correlation_id = next(self._correlation_ids) & 0x7FFFFFFF
            frame = write(correlation_id, self.client_id, request.max_wait_ms, request.min_bytes, request.requested,
                          request.max_bytes)
            if frame is None:
                return None
            buffer = self._buffer
            try:
                try:
                    state, size, got, self._lowat = recv_frame(sock.fileno(), buffer, wait_ms if wait_ms > 0 else -1,
                                                               frame, self._lowat)
                    if state == 0 and got == size and 4 <= size <= len(buffer):
                        payload = memoryview(buffer)[:size].toreadonly()
                    else:  # a timeout, EOF, an implausible size or one over the buffer: _exchange's rules
                        payload = self._native_frame(sock, state, size, got, wait_ms)
                except (OSError, EOFError) as exc:  # the socket was kept from an earlier request
                    payload = self._again(exc, frame, True, wait_ms)
            except (OSError, EOFError) as exc:
                raise self._failed(exc, wait_ms) from exc
            finally:
                self._interrupted = False
            body = self._body(payload, correlation_id)
        walked = walk(body, FetchPartitionResponse, request.requested)
        return tuple.__new__(FetchWalk, walked) if walked is not None else request.decode_response(body)

    def metadata(self, topics: Sequence[str]) -> MetadataResponse:
        """Metadata v0 for ``topics`` (empty: every topic)."""
        return self.send(MetadataRequest(tuple(topics)))

    def list_offsets(self, topic: str, partition: int, time: int, timeout_ms: Optional[int] = None) -> int:
        """The offset of ``topic``/``partition`` before ``time`` (:data:`EARLIEST_TIME`, :data:`LATEST_TIME`).

        Raises the partition's broker error (a :class:`~zkconsumer.wire.broker_errors.KafkaProtocolError`)
        if the broker reports one. ``timeout_ms``: as for :meth:`fetch`.
        """
        return self._send(ListOffsetsRequest(((topic, partition, time),)), False, timeout_ms).offset(topic, partition)

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Close the socket (idempotent). A later request reconnects unless :meth:`abort` was called."""
        with self._lock:
            self._close_locked()

    def interrupt(self) -> None:
        """From any thread: fail the in-flight request now, without the retry on a new connection
        (or the next request, if none is in flight). Unlike :meth:`abort`, later requests reconnect."""
        self._interrupted = True
        self._shut_down()

    def abort(self) -> None:
        """From any thread: fail the in-flight request now and every later one.

        Shuts the socket down without waiting for the request lock (a blocked
        ``recv`` then returns at once); the requesting thread closes it.
        """
        self._aborted = True
        self._shut_down()

    def _shut_down(self) -> None:
        """Shut the socket down, if there is one, without the request lock (a blocked ``recv`` returns at once)."""
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    # ------------------------------------------------------------------ internals

    def _round_trip(self, frame: bytes, shared_buffer: bool, timeout_ms: int) -> memoryview:
        """Send ``frame`` and read the response (caller holds the lock).

        A connection kept from an earlier request may have been closed by the
        broker meanwhile (``connections.max.idle.ms``): if it fails at once, the
        request is sent again once on a fresh connection, as Kafka's
        SimpleConsumer does. Every request here only reads, so a repeat is safe.
        Timeouts are not retried.
        """
        reused = self._sock is not None
        try:
            sock = self._sock or self._connect(timeout_ms)
            return self._exchange(sock, shared_buffer, frame, timeout_ms)
        except (OSError, EOFError) as exc:
            if not reused:
                raise
            return self._again(exc, frame, shared_buffer, timeout_ms)

    def _again(self, exc: BaseException, frame: bytes, shared_buffer: bool, timeout_ms: int) -> memoryview:
        """After ``exc`` on a connection kept from an earlier request (caller holds the lock): ``frame`` once more
        on a fresh connection (see :meth:`_round_trip`); ``exc`` itself is raised again after a timeout, an
        abort or an interrupt."""
        if isinstance(exc, socket.timeout) or self._aborted or self._interrupted:
            raise exc
        log.debug("reconnecting to broker %s after %r", self.address, exc)
        self._close_locked()
        sock = self._connect(timeout_ms)
        return self._exchange(sock, shared_buffer, frame, timeout_ms)

    def _body(self, payload: memoryview, correlation_id: int) -> memoryview:
        """The body of the response ``payload`` to request ``correlation_id`` (caller holds the lock); the answer to
        another request closes the connection and raises."""
        got, body = decode_response_header(payload)
        if got != correlation_id:
            self._close_locked()
            raise BrokerUnavailableError(
                f"broker {self.address} answered correlation id {got} to request {correlation_id}; connection closed")
        return body

    def _failed(self, exc: BaseException, wait_ms: int) -> BrokerUnavailableError:
        """The error a request raises after ``exc`` (caller holds the lock): the connection closed,
        ``timed_out`` set for a timeout that was not an abort or an interrupt."""
        self._close_locked()
        error = BrokerUnavailableError(self._describe(exc, wait_ms))
        error.timed_out = isinstance(exc, socket.timeout) and not (self._aborted or self._interrupted)
        return error

    def _connect(self, timeout_ms: int) -> socket.socket:
        """Open the socket (caller holds the lock); ``timeout_ms`` bounds connecting (<= 0: no bound)."""
        timeout = timeout_ms / 1000.0 if timeout_ms > 0 else None
        infos = socket.getaddrinfo(self.host, self.port, 0, socket.SOCK_STREAM)
        last: Optional[OSError] = None
        for family, kind, proto, _, address in infos:
            sock = socket.socket(family, kind, proto)
            try:
                self._configure(sock, timeout)
                sock.connect(address)
                if self.ssl_context is not None:
                    sock = self.ssl_context.wrap_socket(sock, server_hostname=self.host)
                if self.authenticate is not None:
                    try:
                        self.authenticate(sock, self.host)
                    except (EOFError, ConnectionResetError) as exc:
                        raise _SaslRefused(str(exc)) from exc
            except OSError as exc:
                sock.close()
                last = exc
                continue
            except BaseException:
                sock.close()
                raise
            self._lowat = 1
            self._sock = sock  # published before checking, so a concurrent abort() cannot miss it
            if self._aborted:
                raise ConnectionAbortedError("aborted while connecting")
            log.debug("connected to broker %s", self.address)
            return sock
        raise last or OSError(f"no address for {self.host}")

    def _configure(self, sock: socket.socket, timeout: Optional[float]) -> None:
        """Socket options, set before connecting so the receive window can scale."""
        sock.settimeout(timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        if self.receive_buffer_bytes > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer_bytes)

    def _exchange(self, sock: socket.socket, shared_buffer: bool, request: bytes, timeout_ms: int) -> memoryview:
        """Send ``request``, then read one size-prefixed response; returns the frame without its
        size prefix.

        Into the connection's own buffer, with the C extension on plain TCP, the request is
        sent and the response's size and body are read in one release of the GIL: one wait
        to take it back per round trip, behind a thread iterating messages.
        """
        native_ms = self._native_timeout_ms(sock, timeout_ms)
        if shared_buffer and _recv_frame is not None and native_ms is not None:
            state, size, got, self._lowat = _recv_frame(sock.fileno(), self._buffer, native_ms, request, self._lowat)
            return self._native_frame(sock, state, size, got, timeout_ms)
        timeout = timeout_ms / 1000.0 if timeout_ms > 0 else None
        if sock.gettimeout() != timeout:  # the Python calls below wait the socket's own timeout: this request's
            sock.settimeout(timeout)
        self._plain_mark(sock)
        sock.sendall(request)
        head = self._read_exactly(sock, 4, False, timeout_ms)
        size = int.from_bytes(head, "big", signed=True)
        _check_size(size)
        return self._read_exactly(sock, size, shared_buffer, timeout_ms)

    def _native_frame(self, sock: socket.socket, state: int, size: int, got: int, timeout_ms: int) -> memoryview:
        """The frame ``_speedups.recv_frame`` read into the connection's buffer, given what it returned; raises
        ``socket.timeout`` or ``EOFError`` as a Python read would, and reads a body over the buffer into a
        larger one."""
        if state == 1:
            raise socket.timeout("timed out")
        if state == 2:
            raise EOFError(f"connection closed by peer after {got} of 4 bytes")
        _check_size(size)
        if size > len(self._buffer):  # the body was not read: a larger buffer first
            return self._read_exactly(sock, size, True, timeout_ms)
        if got < size:
            raise EOFError(f"connection closed by peer after {got} of {size} bytes")
        return memoryview(self._buffer)[:size].toreadonly()

    def _read_exactly(self, sock: socket.socket, n: int, shared_buffer: bool, timeout_ms: int) -> memoryview:
        """``n`` bytes from ``sock`` into one buffer: a new one, or the connection's own (``shared_buffer``).

        On a plain TCP socket the C extension reads them all with the GIL
        released once: a Python loop needs the GIL back after every segment, and
        each time may wait up to ``sys.getswitchinterval()`` (5 ms) behind a thread
        that is iterating messages. TLS sockets, and installs without the
        extension, use the Python loop.
        """
        if shared_buffer:
            if len(self._buffer) < n:  # a new, larger buffer: views of the old one stay valid
                self._buffer = bytearray(n)
            view = memoryview(self._buffer)[:n]
        else:
            view = memoryview(bytearray(n))
        self._plain_mark(sock)
        native_ms = self._native_timeout_ms(sock, timeout_ms)
        if _recv_exactly is not None and native_ms is not None:
            got = _recv_exactly(sock.fileno(), view, native_ms)
            if got < 0:
                raise socket.timeout("timed out")
            if got < n:
                raise EOFError(f"connection closed by peer after {got} of {n} bytes")
            return view.toreadonly()
        got = 0
        while got < n:
            r = sock.recv_into(view[got:], n - got)
            if r == 0:
                raise EOFError(f"connection closed by peer after {got} of {n} bytes")
            got += r
        return view.toreadonly()

    def _plain_mark(self, sock: socket.socket) -> None:
        """Before reading ``sock`` other than with recv_frame: its SO_RCVLOWAT back to 1. A fetcher's
        recv_frame keeps the mark it set for the next round's answer (one floor, round after round);
        any other read waits for whatever comes."""
        if self._lowat != 1:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 1)
            self._lowat = 1

    @staticmethod
    def _native_timeout_ms(sock: socket.socket, timeout_ms: int) -> Optional[int]:
        """The wait bound for the C receive functions (-1: none), or ``None`` if they must not read ``sock`` (TLS)."""
        if isinstance(sock, ssl.SSLSocket):
            return None
        return timeout_ms if timeout_ms > 0 else -1

    def _close_locked(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    def _describe(self, exc: BaseException, timeout_ms: int) -> str:
        if self._aborted:
            return f"connection to broker {self.address} was aborted"
        if self._interrupted:
            return f"the request to broker {self.address} was interrupted"
        if isinstance(exc, socket.timeout):
            return f"broker {self.address} did not answer within {timeout_ms} ms"
        if isinstance(exc, _SaslRefused):
            return (f"broker {self.address} closed the connection during SASL authentication ({exc}); check that the "
                    "broker's listener there speaks security.protocol, and the brokers' logs for the reason "
                    "(Kafka 0.9 closes the connection of a client it does not accept)")
        if isinstance(exc, ssl.SSLError):
            return (f"TLS handshake with broker {self.address} failed ({exc!r}); check ssl.cafile, and "
                    f"ssl.certfile/ssl.keyfile if the broker requires client certificates")
        return f"broker {self.address} unreachable: {exc!r}"
