"""The listening sockets both servers accept on (real sockets on loopback)."""

from __future__ import annotations

import asyncio
import socket

from voicews.transport import Waiting, listening_socket


async def test_accepted_connections_send_at_once_with_small_buffers() -> None:
    """Nagle's algorithm off on every accepted connection: with it on, a frame written right
    after an event waited for the client's delayed ACK (about 40 ms on Linux)."""
    accepted: asyncio.Queue[socket.socket] = asyncio.Queue()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.put_nowait(writer.get_extra_info("socket"))
        await reader.read()
        writer.close()

    sock = listening_socket("127.0.0.1", 0, 32 * 1024, 16 * 1024)
    server = await asyncio.start_server(accept, sock=sock)
    _, writer = await asyncio.open_connection("127.0.0.1", sock.getsockname()[1])
    try:
        conn = await asyncio.wait_for(accepted.get(), 5)
        assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        # Linux doubles the size asked for; the default is far larger (about 2.5 MB here).
        assert conn.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) <= 2 * 32 * 1024
        assert conn.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) <= 2 * 16 * 1024
    finally:
        writer.close()
        server.close()
        await server.wait_closed()


def test_waiting_connections_come_out_longest_waiting_first_per_address_too() -> None:
    waiting = Waiting()
    a1, b1, a2 = (object() for _ in range(3))
    for at, (connection, address) in enumerate([(a1, "a"), (b1, "b"), (a2, "a")]):
        waiting.add(connection, address, float(at))  # type: ignore[arg-type]
    assert len(waiting) == 3
    assert (waiting.longest(), waiting.longest("a"), waiting.longest("b")) == (a1, a1, b1)
    waiting.discard(a1)  # type: ignore[arg-type]
    waiting.add(b1, "b", 3.0)  # type: ignore[arg-type]  # waiting again, from now
    assert (waiting.longest(), waiting.longest("a"), waiting.longest("c")) == (a2, a2, None)
    for connection in (a2, b1, b1):
        waiting.discard(connection)  # type: ignore[arg-type]
    assert (len(waiting), waiting.longest()) == (0, None)


def test_a_connection_holds_its_addresss_share_once_it_has_waited_a_second() -> None:
    waiting = Waiting()
    a1, a2, a3 = (object() for _ in range(3))
    for connection, since in [(a1, 0.0), (a2, 0.5), (a3, 1.2)]:
        waiting.add(connection, "a", since)  # type: ignore[arg-type]
    assert waiting.holding("a", 0.9) == 0  # a burst's handshakes, not yet read
    assert waiting.holding("a", 1.0) == 1
    assert waiting.holding("a", 2.2) == 3
    assert waiting.holding("b", 9.0) == 0
