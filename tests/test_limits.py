"""Limits and liveness on a real server: rate, sessions, idle, turn duration, keepalive."""

from __future__ import annotations

import asyncio
import base64
import os
from dataclasses import replace

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus

from conftest import TEST_CONFIG, http_get, running, timeout, with_session
from voicews.client import RealtimeClient
from voicews.errors import CloseCode, ErrorCode
from voicews.protocol import Error, TurnDone


async def test_limits_are_advertised() -> None:
    config = replace(with_session(max_messages_per_second=7, idle_timeout_s=9.0), max_sessions=3)
    async with running(config) as srv, await RealtimeClient.connect(srv.url) as c:
        limits = c.created.limits
        assert (limits.max_messages_per_second, limits.max_sessions) == (7, 3)
        assert limits.idle_timeout_s == 9.0 and limits.max_turn_seconds > 0


async def test_messages_over_the_rate_are_refused_then_accepted_again() -> None:
    async with (
        running(with_session(max_messages_per_second=20)) as srv,
        await RealtimeClient.connect(srv.url) as c,
    ):
        for i in range(30):
            await c.ws.send(f'{{"type": "ping", "id": "{i}"}}')
        answers = [await c.recv(timeout(5)) for _ in range(30)]
        limited = [a for a in answers if isinstance(a, Error)]
        assert len(limited) >= 5 and all(e.code == ErrorCode.RATE_LIMITED for e in limited)
        await asyncio.sleep(1.1)
        turn = await c.speak("Back in business.", timeout=timeout(20))
        assert turn.done is not None and not turn.errors


async def test_sessions_over_the_limit_are_refused_at_connect() -> None:
    async with running(replace(TEST_CONFIG, max_sessions=2)) as srv:
        a = await RealtimeClient.connect(srv.url)
        b = await RealtimeClient.connect(srv.url)
        with pytest.raises(InvalidStatus) as refused:
            await RealtimeClient.connect(srv.url)
        assert refused.value.response.status_code == 503
        assert b"server full" in refused.value.response.body
        assert (await http_get(srv.port, "/readyz"))[::2] == (503, b"full\n")
        await a.ws.close()
        while srv.app is not None and len(srv.app.sessions) > 1:
            await asyncio.sleep(0.01)
        assert (await http_get(srv.port, "/readyz"))[::2] == (200, b"ready\n")
        async with await RealtimeClient.connect(srv.url) as c:
            assert c.created.session_id
        await b.ws.close()


async def test_idle_session_gets_an_error_and_a_normal_close() -> None:
    async with (
        running(with_session(idle_timeout_s=0.5)) as srv,
        await RealtimeClient.connect(srv.url) as c,
    ):
        event = await c.recv(timeout(5))
        assert isinstance(event, Error) and event.code == ErrorCode.IDLE_TIMEOUT
        with pytest.raises(ConnectionClosed) as closed:
            await c.recv(timeout(5))
        assert closed.value.rcvd is not None and closed.value.rcvd.code == CloseCode.NORMAL_CLOSURE


async def test_turn_over_the_duration_limit_is_cut() -> None:
    async with (
        running(with_session(max_turn_seconds=1.0)) as srv,
        await RealtimeClient.connect(srv.url) as c,
    ):
        await c.turn_reset("t1")
        await c.text_delta("Hello there, this turn never ends")
        got = []
        while not (got and isinstance(got[-1], TurnDone)):
            item = await c.recv(timeout(5))
            if isinstance(item, Error | TurnDone):
                got.append(item)
        assert any(isinstance(e, Error) and e.code == ErrorCode.TURN_DURATION_EXCEEDED for e in got)
        done = got[-1]
        assert isinstance(done, TurnDone) and done.cancelled
        turn = await c.speak("Next.", timeout=timeout(20))
        assert turn.done is not None and not turn.done.cancelled


async def test_dead_peer_is_found_by_keepalive_pings() -> None:
    config = replace(TEST_CONFIG, ping_interval=0.3, ping_timeout=0.3)
    async with running(config) as srv:
        assert srv.app is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write(
            (
                "GET /v1/realtime HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 101")
        while not srv.app.sessions:
            await asyncio.sleep(0.01)
        # The peer never answers a ping (and never reads): the server must drop it.
        async with asyncio.timeout(timeout(5)):
            while srv.app.sessions:
                await asyncio.sleep(0.05)
        writer.close()
