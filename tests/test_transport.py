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
    for connection, address in [(a1, "a"), (b1, "b"), (a2, "a")]:
        waiting.add(connection, address)  # type: ignore[arg-type]
    assert (len(waiting), waiting.count("a"), waiting.count("c")) == (3, 2, 0)
    assert (waiting.longest(), waiting.longest("a"), waiting.longest("b")) == (a1, a1, b1)
    waiting.discard(a1)  # type: ignore[arg-type]
    waiting.add(b1, "b")  # type: ignore[arg-type]  # waiting again, from now
    assert (waiting.longest(), waiting.longest("a"), waiting.longest("c")) == (a2, a2, None)
    for connection in (a2, b1, b1):
        waiting.discard(connection)  # type: ignore[arg-type]
    assert (len(waiting), waiting.count("a"), waiting.longest()) == (0, 0, None)
