"""The byte-level protocols uvicorn runs for us, hardened against clients that hold resources.

uvicorn's own HTTP/1.1 (h11) and WebSocket (``websockets`` sans-I/O) protocols, each with
the few bounds they lack:

- a request head (and so a WebSocket handshake) must arrive within ``handshake_timeout``,
  from the connection's first byte and again after each keep-alive response: silent and
  trickling connections are closed (408) instead of holding a descriptor for ever;
- at most ``max_waiting_per_address`` connections from one client address wait for their
  request head past ``HOLDING`` (a second) at once: one more from that address evicts the
  longest waiting (503);
- at most ``max_connections`` connections at once; past that a new one evicts the connection
  that has waited longest for its request head (503), and only when none is waiting is the
  new one refused (503): connections that never finish a request cannot lock others out;
- ambiguous framing (``Transfer-Encoding`` with ``Content-Length``, obs-fold header lines)
  is refused with 400 and the connection closed (RFC 9112, sections 6.3 and 5.2);
- a WebSocket peer that does not read stops being read: once what we owe it (pongs to its
  pings, like everything else) passes the write buffer's high mark (64 KiB), we read nothing
  more from it, and if it stays past the mark for ``unread_timeout`` it is dropped;
- a WebSocket peer that misses a keepalive pong, or never answers our close, is aborted:
  closing politely would wait for ever to flush a buffer it will not read;
- a handshake with two ``Origin`` headers reaches the app, which refuses it (403) as it does
  every malformed or refused origin, instead of getting a 400 from ``websockets``.

:func:`listening_socket` makes the listeners both servers accept on.
"""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import h11
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.http11 import Request

_OBS_FOLD = re.compile(rb"\r?\n[ \t]")
_HEAD_END = re.compile(rb"\r?\n\r?\n")
_H11_MAX_HEAD = 16 * 1024  # h11's own default bound on a request head


@dataclass(frozen=True, slots=True)
class TransportLimits:
    """The bounds (``ServerConfig`` holds their defaults)."""

    head_timeout: float
    """Seconds a Wyoming event may take to be whole, from its first byte."""
    max_connections: int
    """Open connections at once, HTTP, WebSocket and Wyoming together."""
    handshake_timeout: float
    """Seconds a request head (a WebSocket handshake too) may take to arrive."""
    max_waiting_per_address: int
    """Connections from one client address waiting for their request head at once."""
    unread_timeout: float
    """Seconds a WebSocket peer may leave what we owe it past the write buffer's high mark
    before it is dropped."""
    write_timeout: float
    """Seconds a Wyoming peer may leave what we send it unread before it counts as gone
    (a WebSocket peer has ``unread_timeout``)."""


@dataclass(frozen=True, slots=True)
class TransportPolicy:
    limits: TransportLimits
    dropped: Callable[[str], None]
    """Told why a connection was dropped: ``connection_cap``, ``evicted`` (it waited longest
    for its request head when a new one needed room), ``head_timeout``, ``invalid_request``
    (ambiguous framing or a malformed head, answered 400; a Wyoming line that is not an event,
    or one over the size limit), ``unread_output`` (a WebSocket peer that read nothing)."""
    open_connections: Callable[[], int]
    """How many are open now, on every listener: what the cap counts."""
    waiting: Waiting = field(default_factory=lambda: Waiting())
    """The HTTP connections waiting for a request head: what a full server evicts."""


HOLDING = 1.0
"""Seconds a connection waits for its request head before it counts against its address's
share (``max_waiting_per_address``): a client's own handshake takes milliseconds, but a burst
of them accepted in one go waits its turn to be read, and an orchestrator opening 24
sessions at once from one address had 8 of them evicted (503) before their heads were read."""


class Waiting:
    """Connections waiting for a request head, longest waiting first, also per client address.

    A client that completes its request does so in milliseconds; one that has waited longest
    is the likeliest to be holding a connection it will never use, so it is the one to evict.
    """

    def __init__(self) -> None:
        self._all: dict[StrictH11Protocol, str] = {}  # insertion order: longest waiting first
        self._by_address: dict[str, dict[StrictH11Protocol, float]] = {}  # since when

    def __len__(self) -> int:
        return len(self._all)

    def add(self, connection: StrictH11Protocol, address: str, now: float) -> None:
        self.discard(connection)
        self._all[connection] = address
        self._by_address.setdefault(address, {})[connection] = now

    def discard(self, connection: StrictH11Protocol) -> None:
        address = self._all.pop(connection, None)
        if address is None:
            return
        same = self._by_address[address]
        del same[connection]
        if not same:
            del self._by_address[address]

    def holding(self, address: str, now: float) -> int:
        """Connections from ``address`` that have waited ``HOLDING`` seconds or more."""
        count = 0
        for since in self._by_address.get(address, {}).values():  # longest waiting first
            if now - since < HOLDING:
                break
            count += 1
        return count

    def longest(self, address: str | None = None) -> StrictH11Protocol | None:
        """The connection waiting longest, from ``address`` or from anywhere."""
        order = self._all if address is None else self._by_address.get(address, {})
        return next(iter(order), None)


class _StrictConnection(h11.Connection):
    """h11, but a request with ambiguous framing is a protocol error (a 400 from uvicorn)."""

    def next_event(self) -> Any:
        head = self.trailing_data[0] if self.their_state is h11.IDLE else b""
        event = super().next_event()
        if isinstance(event, h11.Request):
            names = {name for name, _ in event.headers}
            if b"transfer-encoding" in names and b"content-length" in names:
                raise h11.RemoteProtocolError("Transfer-Encoding together with Content-Length")
            end = _HEAD_END.search(head)
            if _OBS_FOLD.search(head[: end.start() if end else len(head)]):
                raise h11.RemoteProtocolError("obsolete line folding in a header")
        return event


class StrictH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 with a request-head deadline, a connection cap and strict framing."""

    policy: ClassVar[TransportPolicy]
    """Set by :func:`http_protocol`."""

    def __init__(self, config: Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        size = config.h11_max_incomplete_event_size or _H11_MAX_HEAD
        self.conn = _StrictConnection(h11.SERVER, size)
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        policy, address = self.policy, self._address()
        same = policy.waiting.longest(address)
        holding = policy.waiting.holding(address, self.loop.time())
        if same is not None and holding >= policy.limits.max_waiting_per_address:
            self._evict(same)
        elif policy.open_connections() > policy.limits.max_connections:
            oldest = policy.waiting.longest()
            if oldest is None:
                policy.dropped("connection_cap")
                self._answer_and_close(503, "Service Unavailable")
                return
            self._evict(oldest)
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def _address(self) -> str:
        return self.client[0] if self.client else ""

    def _evict(self, connection: StrictH11Protocol) -> None:
        """Close a connection still waiting for its request head, to make room for this one."""
        connection._cancel_head_timer()
        self.policy.dropped("evicted")
        connection._answer_and_close(503, "Service Unavailable")

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._cancel_head_timer()

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        self._cancel_head_timer()
        super().handle_websocket_upgrade(event)

    def send_400_response(self, msg: str) -> None:
        self.policy.dropped("invalid_request")
        self._cancel_head_timer()
        super().send_400_response(msg)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._await_head()  # the next request on this keep-alive connection

    def _await_head(self) -> None:
        self._cancel_head_timer()
        seconds = self.policy.limits.handshake_timeout
        self._head_timer = self.loop.call_later(seconds, self._head_timeout)
        self.policy.waiting.add(self, self._address(), self.loop.time())

    def _cancel_head_timer(self) -> None:
        self.policy.waiting.discard(self)
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timeout(self) -> None:
        self._cancel_head_timer()
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        self.policy.dropped("head_timeout")
        self._answer_and_close(408, "Request Timeout")

    def _answer_and_close(self, status: int, reason: str) -> None:
        self.transport.write(
            f"HTTP/1.1 {status} {reason}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".encode()
        )
        self.transport.close()


WRITE_HIGH_MARK = 64 * 1024
"""Bytes we may owe a WebSocket peer before we stop reading it (asyncio's own default,
stated): what one peer that reads nothing can make us hold, with one read's worth of pongs."""


class BoundedWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's sans-I/O WebSocket, reading nothing while its write buffer is full, and
    aborting peers that stop answering or stop reading."""

    policy: ClassVar[TransportPolicy]
    """Set by :func:`websocket_protocol`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._write_paused = False
        self._unread_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.transport.set_write_buffer_limits(high=WRITE_HIGH_MARK)

    def pause_writing(self) -> None:
        super().pause_writing()
        self._write_paused = True
        self.transport.pause_reading()
        self._cancel_unread_timer()
        seconds = self.policy.limits.unread_timeout
        self._unread_timer = self.loop.call_later(seconds, self._unread_timeout)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._write_paused = False
        self._cancel_unread_timer()
        if not self.read_paused:
            self.transport.resume_reading()

    def _cancel_unread_timer(self) -> None:
        if self._unread_timer is not None:
            self._unread_timer.cancel()
            self._unread_timer = None

    def _unread_timeout(self) -> None:
        """Still owed more than the high mark: the peer reads nothing. A close frame would
        wait behind what it does not read, so the connection is dropped (1006)."""
        self._unread_timer = None
        if not self.transport.is_closing():
            self.policy.dropped("unread_output")
            self.transport.abort()

    async def receive(self) -> Any:
        message = await self.queue.get()
        if self.read_paused and self.queue.empty():
            self.read_paused = False
            if not self._write_paused:
                self.transport.resume_reading()
        return message

    def handle_connect(self, event: Request) -> None:
        origins = event.headers.get_all("Origin")
        if len(origins) > 1:
            # Joined as one value, which the app refuses (403) like any malformed Origin;
            # websockets would answer two with a 400 of its own.
            del event.headers["Origin"]
            event.headers["Origin"] = ", ".join(origins)
        super().handle_connect(event)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_unread_timer()
        if self.handshake_complete and self.conn.close_rcvd is None:
            # No closing handshake from the peer: abnormal closure, whatever came before.
            self.queue.put_nowait({"type": "websocket.disconnect", "code": 1006})
        super().connection_lost(exc)

    def keepalive_timeout(self) -> None:
        super().keepalive_timeout()
        self.transport.abort()

    async def send(self, message: Any) -> None:
        timer = self.close_timer
        await super().send(message)
        if self.close_timer is not None and self.close_timer is not timer:
            # We sent a close: a peer that never answers it is aborted, not waited for.
            self.close_timer.cancel()
            self.close_timer = self.loop.call_later(self.close_timeout, self.transport.abort)


RECEIVE_BUFFER = 64 * 1024
"""Kernel receive buffer per accepted socket: clients send text and small requests, and a
peer we stop reading (backpressure) then has its sends blocked after this much, not after
the megabytes Linux's autotuning would take in for it."""


def listening_socket(
    host: str, port: int, send_buffer: int, receive_buffer: int = RECEIVE_BUFFER
) -> socket.socket:
    """A TCP socket bound to ``host:port`` whose accepted connections send at once and buffer
    at most ``send_buffer`` bytes (a small buffer: a client that stops reading pauses its own
    synthesis) and ``receive_buffer`` bytes they have not read.

    Nagle's algorithm off: asyncio turns it off only on sockets made with ``IPPROTO_TCP``
    named, and with it on, a frame written right after an event waited for the client's
    delayed ACK: the first frame reached the client 42-44 ms after it was written in 4 of 12
    lone turns (both processes' monotonic clocks, on loopback). Accepted sockets inherit both
    options.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    return sock


def http_protocol(policy: TransportPolicy) -> type[StrictH11Protocol]:
    """The HTTP protocol class for uvicorn's ``http=``, bound to ``policy``."""

    class Bound(StrictH11Protocol):
        pass

    Bound.policy = policy
    return Bound


def websocket_protocol(policy: TransportPolicy) -> type[BoundedWebSocketProtocol]:
    """The WebSocket protocol class for uvicorn's ``ws=``, bound to ``policy``."""

    class Bound(BoundedWebSocketProtocol):
        pass

    Bound.policy = policy
    return Bound
