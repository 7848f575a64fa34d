"""Hostile clients, and a calm session to measure what each costs the others.

The hardening tests, the soak test and ``python -m bench attacks`` throw these at a server on
loopback; point them at a deployment to check that it holds. Test and bench code only: nothing
in ``voicews/`` imports it. Each attack is a coroutine
against ``host:port`` that returns when the attacker is done (or gone); :func:`calm_turn`
speaks an ordinary reply alongside and reports its first audio and its stall.

Raw sockets, not a WebSocket library: the point of most of these clients is to break the
rules a library keeps (read nothing, trickle bytes, vanish without a close, frame requests
ambiguously).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import socket
import struct
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TypeVar, get_args

from websockets.frames import Frame, Opcode

from voicews.client import RealtimeClient, SpokenTurn
from voicews.protocol import OPUS_RATE, REALTIME_PATH, AudioUpdate, Encoding, Error, SampleRate

T = TypeVar("T")

CALM_REPLY = (
    "Sure, I can help with that. Your order shipped on Monday and should arrive in two to "
    "three business days. If it has not shown up by Friday, let me know."
)
"""An agent-like reply of about nine seconds, streamed as word pieces."""


@dataclass(frozen=True, slots=True)
class Calm:
    """What a well-behaved session heard: seconds to get in (from the TCP connect to its
    ``session_created``), to first audio, and of silence after it."""

    connect: float
    first_audio: float
    stall: float

    def __str__(self) -> str:
        return (
            f"connect {self.connect * 1000:.0f} ms, first audio {self.first_audio * 1000:.0f} ms,"
            f" stall {self.stall * 1000:.0f} ms"
        )


async def calm_turn(
    url: str, text: str = CALM_REPLY, tokens_per_s: float = 20.0, timeout: float = 60.0
) -> Calm:
    """One ordinary turn, streamed like an LLM reply; raises if it does not complete."""
    start = time.monotonic()
    async with await RealtimeClient.connect(url, open_timeout=timeout) as client:
        connect = time.monotonic() - start
        turn: SpokenTurn = await client.speak(text, tokens_per_s=tokens_per_s, timeout=timeout)
    if turn.done is None or turn.first_audio is None or turn.errors:
        raise RuntimeError(f"calm turn failed: done={turn.done} errors={turn.errors}")
    return Calm(connect, turn.first_audio, turn.stall())


async def alongside(url: str, attack: Awaitable[T], delay: float = 0.5) -> tuple[Calm, T]:
    """Start ``attack``; ``delay`` seconds in, speak a calm turn; return both results."""
    attacking = asyncio.ensure_future(attack)
    try:
        await asyncio.wait({attacking}, timeout=delay)
        calm = await calm_turn(url)
        return calm, await attacking
    finally:
        attacking.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await attacking


# --- raw connections ------------------------------------------------------------------------


Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def connect(
    host: str, port: int, local: str | None = None, receive_buffer: int | None = None
) -> Connection:
    """A TCP connection, from the loopback address ``local`` if given (Linux binds any of
    127.0.0.0/8), so that one process can be many clients; with a small ``receive_buffer``,
    a client that stops reading stops the server's writes soon."""
    if receive_buffer is None:
        return await asyncio.open_connection(
            host, port, local_addr=None if local is None else (local, 0)
        )
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.setblocking(False)
    if local is not None:
        sock.bind((local, 0))
    await asyncio.get_running_loop().sock_connect(sock, (host, port))
    return await asyncio.open_connection(sock=sock)


def reset(writer: asyncio.StreamWriter) -> None:
    """Vanish with a TCP reset: no close frame, no FIN."""
    sock = writer.get_extra_info("socket")
    with contextlib.suppress(OSError):  # the server may have closed it already
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def handshake(path: str = REALTIME_PATH, headers: dict[str, str] | None = None) -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [
        f"GET {path} HTTP/1.1",
        "Host: 127.0.0.1",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
        *(f"{name}: {value}" for name, value in (headers or {}).items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def websocket(
    host: str,
    port: int,
    path: str = REALTIME_PATH,
    headers: dict[str, str] | None = None,
    receive_buffer: int | None = None,
) -> Connection:
    """A raw WebSocket, upgraded; raises with the status line if the server refuses."""
    reader, writer = await connect(host, port, receive_buffer=receive_buffer)
    writer.write(handshake(path, headers))
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 101"):
        writer.close()
        raise ConnectionRefusedError(head.split(b"\r\n")[0].decode())
    return reader, writer


def frame(opcode: Opcode, data: bytes) -> bytes:
    """One client frame (masked, as clients must)."""
    return Frame(opcode, data).serialize(mask=True, extensions=[])


def text(message: str) -> bytes:
    return frame(Opcode.TEXT, message.encode())


async def send_for(writer: asyncio.StreamWriter, data: bytes, total: int, seconds: float) -> int:
    """Write ``data`` repeatedly, up to ``total`` bytes or ``seconds``; a server that stops
    reading stops us (TCP pushes back). Returns the bytes written."""
    sent, deadline = 0, time.monotonic() + seconds
    with contextlib.suppress(TimeoutError, OSError):
        while sent < total and time.monotonic() < deadline:
            writer.write(data)
            await asyncio.wait_for(writer.drain(), max(0.0, deadline - time.monotonic()))
            sent += len(data)
    return sent


# --- attacks ----------------------------------------------------------------------------------


async def flood_then_reset(host: str, port: int, frames: int = 10_000, seconds: float = 5.0) -> int:
    """Open a session, send ``frames`` invalid frames without reading anything, then reset
    the connection (issue 10.1). Returns the frames' bytes written."""
    _, writer = await websocket(host, port)
    junk = text("{oops")
    sent = await send_for(writer, junk * 100, len(junk) * frames, seconds)
    reset(writer)
    return sent


async def flood_then_hang(
    host: str, port: int, frames: int = 10_000, seconds: float = 5.0
) -> asyncio.StreamWriter:
    """As :func:`flood_then_reset`, but the peer then just stays, never reading and never
    answering a ping: the server must drop it on its own. Close the returned writer."""
    _, writer = await websocket(host, port)
    junk = text("{oops")
    await send_for(writer, junk * 100, len(junk) * frames, seconds)
    return writer


async def ping_flood(
    host: str,
    port: int,
    megabytes: float = 20.0,
    seconds: float = 5.0,
    receive_buffer: int | None = None,
) -> int:
    """WebSocket pings (125-byte payloads) without reading a pong (issues 10.5 and 32.2);
    returns the bytes written before the server stopped reading or dropped us, or ``seconds``
    ran out."""
    _, writer = await websocket(host, port, receive_buffer=receive_buffer)
    ping = frame(Opcode.PING, b"p" * 125)
    try:
        return await send_for(writer, ping * 512, int(megabytes * 2**20), seconds)
    finally:
        reset(writer)


async def slow_body(
    host: str,
    port: int,
    length: int = 1000,
    interval: float = 1.0,
    seconds: float = 30.0,
    response_format: str = "mp3",
) -> bytes:
    """``POST /v1/audio/speech`` announcing ``length`` bytes, sending one per ``interval``
    (issue 10.2). Returns what the server answered before it closed (b"" if it never did)."""
    reader, writer = await connect(host, port)
    writer.write(
        f"POST /v1/audio/speech HTTP/1.1\r\nHost: t\r\nContent-Length: {length}\r\n\r\n".encode()
    )
    body = f'{{"response_format": "{response_format}", "input": "'.encode() + b"a" * length
    return await _trickle(reader, writer, body, interval, seconds)


async def slow_head(
    host: str, port: int, interval: float = 1.0, seconds: float = 30.0, local: str | None = None
) -> bytes:
    """A WebSocket handshake sent one byte per ``interval`` (issue 10.7)."""
    reader, writer = await connect(host, port, local)
    return await _trickle(reader, writer, handshake(), interval, seconds)


async def silent(host: str, port: int, seconds: float = 30.0, local: str | None = None) -> bytes:
    """A TCP connection that never sends a byte (issue 10.7)."""
    reader, writer = await connect(host, port, local)
    return await _trickle(reader, writer, b"", 1.0, seconds)


async def exhaust(
    host: str,
    port: int,
    connections: int = 600,
    seconds: float = 30.0,
    interval: float = 3.0,
    addresses: int = 40,
    retry: float = 1.0,
) -> int:
    """Connections that never finish a request, holding on (issue 32.1): half send nothing,
    half trickle a handshake a byte per ``interval``; each one the server closes comes back
    ``retry`` seconds later, until ``seconds`` have passed. They come from ``addresses``
    loopback addresses (127.0.1.1 on), as many clients would. Returns the connections made."""
    deadline = time.monotonic() + seconds

    async def hold_on(index: int) -> int:
        local = f"127.0.1.{1 + index % addresses}"
        data, made = (b"" if index % 2 else handshake()), 0
        while (left := deadline - time.monotonic()) > 0:
            with contextlib.suppress(OSError):
                reader, writer = await connect(host, port, local)
                made += 1
                await _trickle(reader, writer, data, interval, left)
            await asyncio.sleep(retry)
        return made

    return sum(await asyncio.gather(*(hold_on(i) for i in range(connections))))


async def _trickle(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    data: bytes,
    interval: float,
    seconds: float,
) -> bytes:
    """Send ``data`` a byte at a time until the server answers or closes; what it said."""
    answer = asyncio.ensure_future(reader.read())
    deadline = time.monotonic() + seconds
    try:
        for byte in data:
            if answer.done() or time.monotonic() > deadline:
                break
            with contextlib.suppress(OSError):
                writer.write(bytes([byte]))
            await asyncio.wait({answer}, timeout=interval)
        await asyncio.wait({answer}, timeout=max(0.0, deadline - time.monotonic()))
        return answer.result() if answer.done() and not answer.exception() else b""
    finally:
        answer.cancel()
        writer.close()


async def raw_request(host: str, port: int, request: bytes, seconds: float = 5.0) -> bytes:
    """Send ``request`` as it is; everything the server answers until it closes."""
    reader, writer = await connect(host, port)
    writer.write(request)
    try:
        return await asyncio.wait_for(reader.read(), seconds)
    finally:
        writer.close()


def nested(depth: int) -> str:
    """A ``text_delta`` whose ``text`` is nested ``depth`` arrays deep (issue 10.6)."""
    return '{"type": "text_delta", "text": ' + "[" * depth + "]" * depth + "}"


async def send_nested(url: str, depth: int = 30_000) -> str:
    """One deeply nested message; the error code it got."""
    async with await RealtimeClient.connect(url) as client:
        await client.ws.send(nested(depth))
        answer = await client.recv(30)
    return answer.code if isinstance(answer, Error) else f"not an error: {answer!r}"


def ambiguous_requests() -> list[bytes]:
    """Requests whose framing a proxy and this server could read differently (issue 10.8)."""
    body = b'{"input": "hi"}'
    return [
        b"POST /v1/audio/speech HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body,
        b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Folded: a\r\n b\r\n\r\n",
    ]


async def speak(url: str, text: str, speed: float | None = None) -> SpokenTurn:
    """One turn of ``text`` sent whole, read to its end (issues 10.3 and 15.3)."""
    async with await RealtimeClient.connect(url) as client:
        if speed is not None:
            await client.session_update(speed=speed)
        return await client.speak(text, timeout=300)


LONG_URL = "Read https://example.com/" + "section/" * 400 + "?q=1 now."
"""A 3,200-character URL in a sentence (issue 15.3)."""


async def mix(host: str, port: int, seconds: float = 3.0) -> None:
    """Every attack above once, scaled down to a few seconds: what the soak test mixes into
    its load. The server must drop the hung peer itself (keepalive) and time the trickling
    ones out (its request timeout), both within ``seconds``."""
    url = f"ws://{host}:{port}{REALTIME_PATH}"
    hung = await flood_then_hang(host, port, 5_000, seconds=1)
    try:
        await asyncio.gather(
            flood_then_reset(host, port, 5_000, seconds=1),
            ping_flood(host, port, megabytes=4, seconds=1),
            slow_body(host, port, interval=0.2, seconds=seconds),
            slow_head(host, port, interval=0.2, seconds=seconds),
            silent(host, port, seconds=seconds),
            *(raw_request(host, port, request) for request in ambiguous_requests()),
            send_nested(url),
            speak(url, "你好" * 10),
            speak(url, LONG_URL),
        )
    finally:
        reset(hung)


async def barge_in_storm(url: str, seconds: float = 5.0, turns_per_s: float = 60.0) -> int:
    """Start turns faster than anyone could listen, each cut by the next (issue 10.4)."""
    async with await RealtimeClient.connect(url) as client:
        reading = asyncio.ensure_future(_drain(client))
        turns, deadline = 0, time.monotonic() + seconds
        try:
            while time.monotonic() < deadline:
                turns += 1
                await client.turn_reset(f"storm-{turns}")
                await client.text_delta("Hello there, this is another turn.")
                await client.end_text()
                await asyncio.sleep(1 / turns_per_s)
        finally:
            reading.cancel()
    return turns


async def update_storm(url: str, seconds: float = 5.0, per_s: float = 100.0) -> int:
    """``session_update`` ``per_s`` times a second, each to another speed and audio format,
    with a short turn after every tenth so each format is used (issue 32.4); everything the
    server sends read as it comes. Returns the updates sent."""
    rates, formats = get_args(get_args(SampleRate)[0]), get_args(Encoding)
    async with await RealtimeClient.connect(url) as client:
        reading = asyncio.ensure_future(_drain(client))
        updates, deadline = 0, time.monotonic() + seconds
        try:
            while time.monotonic() < deadline:
                updates += 1
                encoding = formats[updates % len(formats)]
                rate = OPUS_RATE if encoding == "opus" else rates[updates % len(rates)]
                audio = AudioUpdate(sample_rate=rate, format=encoding)
                await client.session_update(speed=0.5 + updates % 7 / 4, audio=audio)
                if updates % 10 == 0:
                    await client.turn_reset(f"update-{updates}")
                    await client.text_delta("Hello there, this is another format.")
                    await client.end_text()
                await asyncio.sleep(1 / per_s)
        finally:
            reading.cancel()
    return updates


async def wyoming_storm(
    host: str, port: int, seconds: float = 5.0, turns_per_s: float = 60.0
) -> int:
    """The barge-in storm over Wyoming: a ``synthesize`` faster than anyone could listen, each
    cutting the last (issue 10.4 on ``--wyoming-uri``); its audio read as it comes."""
    from wyoming.client import AsyncTcpClient
    from wyoming.tts import Synthesize

    async with AsyncTcpClient(host, port) as client:

        async def drain() -> None:
            with contextlib.suppress(Exception):
                while await client.read_event() is not None:
                    pass

        reading = asyncio.ensure_future(drain())
        turns, deadline = 0, time.monotonic() + seconds
        try:
            while time.monotonic() < deadline:
                turns += 1
                await client.write_event(Synthesize("Hello there, this is another turn.").event())
                await asyncio.sleep(1 / turns_per_s)
        finally:
            reading.cancel()
    return turns


async def _drain(client: RealtimeClient) -> None:
    with contextlib.suppress(Exception):
        while True:
            await client.recv()


async def http_speech_load(
    host: str, port: int, requests: int = 16, text: str = CALM_REPLY
) -> list[int]:
    """``requests`` concurrent ``POST /v1/audio/speech``, each read to the end (issue 15.4);
    their statuses."""
    body = json.dumps({"input": text}).encode()
    request = (
        f"POST /v1/audio/speech HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + body

    async def one() -> int:
        answer = await raw_request(host, port, request, seconds=300)
        return int(answer.split(b" ", 2)[1]) if answer else 0

    return list(await asyncio.gather(*(one() for _ in range(requests))))
