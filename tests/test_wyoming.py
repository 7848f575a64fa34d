"""Wyoming text to speech, driven by the ``wyoming`` package's client as Home Assistant uses it."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace

import numpy as np
import pytest
from websockets.exceptions import InvalidStatus
from wyoming.audio import AudioChunk, AudioStart
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.event import Event
from wyoming.info import Describe, Info
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeVoice,
)

from conftest import TEST_CONFIG, running, timeout
from voicews.client import RealtimeClient, word_pieces
from voicews.dialects.wyoming import WyomingServer
from voicews.dialects.wyoming_info import parse_uri
from voicews.server import VoicewsServer

STREAMED = ["audio-start", "audio-chunk", "audio-stop", "synthesize-stopped"]
REPLY = "Sure, the kitchen lights are off now. Anything else I can do for you tonight?"
LONG = " ".join(f"Sentence {i} keeps going, clause after clause, for a while." for i in range(12))


@pytest.fixture(scope="module")
async def wyoming(server: VoicewsServer) -> AsyncIterator[WyomingServer]:
    """Wyoming on a free port, beside the shared server's WebSocket, on the same app."""
    assert server.app is not None and server.policy is not None
    wy = WyomingServer(
        server.app.admission, server.app.config.session, "tcp://127.0.0.1:0", server.policy
    )
    await wy.start()
    yield wy
    await wy.close()


@dataclass
class Reply:
    """What the server answered to one request, in order, with arrival times."""

    events: list[str] = field(default_factory=list)
    pcm: bytearray = field(default_factory=bytearray)
    rate: int = 0
    first_audio_at: float | None = None
    errors: list[Error] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return len(self.pcm) / 2 / self.rate


async def read_reply(client: AsyncTcpClient, until: str) -> Reply:
    reply = Reply()
    async with asyncio.timeout(timeout(30)):
        while True:
            event = await client.read_event()
            assert event is not None, f"connection closed after {reply.events}"
            reply.events.append(event.type)
            if AudioStart.is_type(event.type):
                reply.rate = AudioStart.from_event(event).rate
            elif AudioChunk.is_type(event.type):
                chunk = AudioChunk.from_event(event)
                assert (chunk.rate, chunk.width, chunk.channels) == (reply.rate, 2, 1)
                reply.pcm += chunk.audio
                if reply.first_audio_at is None:
                    reply.first_audio_at = time.perf_counter()
            elif Error.is_type(event.type):
                reply.errors.append(Error.from_event(event))
            if event.type == until:
                return reply


def kinds(events: list[str]) -> list[str]:
    """Event types with runs of audio chunks collapsed to one."""
    return [e for i, e in enumerate(events) if e != "audio-chunk" or events[i - 1] != e]


def assert_speech(reply: Reply, min_seconds: float) -> None:
    assert reply.rate == 22050
    assert reply.seconds > min_seconds
    samples = np.frombuffer(bytes(reply.pcm), dtype=np.int16).astype(np.float64)
    assert np.sqrt(np.mean(samples**2)) > 500  # speech, not silence


async def test_describe_lists_the_voice_and_streaming(wyoming: WyomingServer) -> None:
    async with AsyncTcpClient("127.0.0.1", wyoming.port) as client:
        await client.write_event(Describe().event())
        event = await asyncio.wait_for(client.read_event(), timeout(5))
    assert event is not None
    info = Info.from_event(event)
    (program,) = info.tts
    assert program.installed and program.supports_synthesize_streaming
    assert [(v.name, v.languages) for v in program.voices] == [("en_US-joe-medium", ["en_US"])]


async def test_streamed_reply_speaks_while_the_text_arrives(wyoming: WyomingServer) -> None:
    async with AsyncTcpClient("127.0.0.1", wyoming.port) as client:
        await client.write_event(SynthesizeStart().event())
        receiving = asyncio.create_task(read_reply(client, "synthesize-stopped"))
        for piece in word_pieces(REPLY):  # LLM-like tokens at 30/s, as Home Assistant streams
            await client.write_event(SynthesizeChunk(text=piece).event())
            await asyncio.sleep(1 / 30)
        text_done_at = time.perf_counter()
        # Home Assistant sends the whole text again for servers that cannot stream: ignored.
        await client.write_event(Synthesize(text=REPLY).event())
        await client.write_event(SynthesizeStop().event())
        reply = await receiving
    assert kinds(reply.events) == STREAMED
    assert reply.first_audio_at is not None and reply.first_audio_at < text_done_at
    assert_speech(reply, 3.0)
    assert reply.seconds < 8.0  # spoken once, not twice


async def test_one_shot_synthesize_alone(wyoming: WyomingServer) -> None:
    """Home Assistant names the voice configured for it: one this server lacks falls back to
    the default, one it has is spoken."""
    async with AsyncTcpClient("127.0.0.1", wyoming.port) as client:
        other = SynthesizeVoice(name="en_US-lessac-medium")
        await client.write_event(Synthesize(text=REPLY, voice=other).event())
        reply = await read_reply(client, "audio-stop")
        # The connection stays usable: a second request, streamed this time.
        ours = SynthesizeVoice(name="en_US-joe-medium")
        await client.write_event(SynthesizeStart(voice=ours).event())
        await client.write_event(SynthesizeChunk(text="Goodbye.").event())
        await client.write_event(SynthesizeStop().event())
        second = await read_reply(client, "synthesize-stopped")
    assert kinds(reply.events) == ["audio-start", "audio-chunk", "audio-stop"]
    assert_speech(reply, 3.0)
    assert kinds(second.events) == STREAMED and not reply.errors and not second.errors


async def test_closing_the_connection_cancels_synthesis(
    server: VoicewsServer, wyoming: WyomingServer
) -> None:
    assert server.app is not None
    client = AsyncTcpClient("127.0.0.1", wyoming.port)
    await client.connect()
    await client.write_event(Synthesize(text=LONG).event())
    event: Event | None = None
    while event is None or not AudioChunk.is_type(event.type):
        event = await asyncio.wait_for(client.read_event(), timeout(10))
        assert event is not None
    assert len(server.app.sessions) == 1
    await client.disconnect()
    async with asyncio.timeout(timeout(5)):
        while server.app.sessions or server.worker.queued:
            await asyncio.sleep(0.02)
    jobs = server.worker.stats.jobs_done
    await asyncio.sleep(0.3)
    assert server.worker.stats.jobs_done - jobs <= 1  # at most the segment in flight finished


async def test_protocol_mistakes_get_wyoming_errors(wyoming: WyomingServer) -> None:
    async with AsyncTcpClient("127.0.0.1", wyoming.port) as client:
        await client.write_event(SynthesizeChunk(text="stray").event())
        event = await asyncio.wait_for(client.read_event(), timeout(5))
        assert event is not None and Error.is_type(event.type)
        assert Error.from_event(event).code == "no_stream"
        for bad in ({}, {"text": 5}):  # malformed events: refused, the connection goes on
            await client.write_event(Event(type="synthesize", data=bad))
            event = await asyncio.wait_for(client.read_event(), timeout(5))
            assert event is not None and Error.from_event(event).code == "invalid_event"
        # Too long for one turn: the session's own error, then the turn ends with no audio.
        await client.write_event(Synthesize(text="word " * 2000).event())
        reply = await read_reply(client, "audio-stop")
    assert [e.code for e in reply.errors] == ["turn_text_too_long"]
    assert not reply.pcm


async def test_a_line_that_is_not_an_event_closes_only_its_connection(
    wyoming: WyomingServer,
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", wyoming.port)
    writer.write(b'{"data": {}}\n')  # JSON, but no event type: the framing is lost
    assert await asyncio.wait_for(reader.read(), timeout(5)) == b""
    writer.close()
    async with AsyncTcpClient("127.0.0.1", wyoming.port) as client:
        await client.write_event(Synthesize(text="Still here.").event())
        assert_speech(await read_reply(client, "audio-stop"), 0.5)


async def test_sessions_count_against_max_sessions() -> None:
    config = replace(TEST_CONFIG, max_sessions=1, wyoming_uri="tcp://127.0.0.1:0")
    async with running(config) as srv:
        assert srv.wyoming is not None and srv.app is not None
        assert parse_uri(srv.wyoming.uri) == ("127.0.0.1", srv.wyoming.port)
        async with AsyncTcpClient("127.0.0.1", srv.wyoming.port) as first:
            await first.write_event(SynthesizeStart().event())
            await first.write_event(SynthesizeChunk(text="Hello there.").event())
            async with asyncio.timeout(timeout(5)):
                while not srv.app.sessions:
                    await asyncio.sleep(0.01)
            async with AsyncTcpClient("127.0.0.1", srv.wyoming.port) as second:
                await second.write_event(Describe().event())  # describing needs no session
                event = await asyncio.wait_for(second.read_event(), timeout(5))
                assert event is not None and Info.is_type(event.type)
                await second.write_event(Synthesize(text="Am I in?").event())
                event = await asyncio.wait_for(second.read_event(), timeout(5))
                assert event is not None and Error.from_event(event).code == "server_full"
                assert "full" in Error.from_event(event).text
                assert await asyncio.wait_for(second.read_event(), timeout(5)) is None
            with pytest.raises(InvalidStatus) as refused:  # the WebSocket counts it too
                await RealtimeClient.connect(srv.url)
            assert refused.value.response.status_code == 503
            await first.write_event(SynthesizeStop().event())
            reply = await read_reply(first, "synthesize-stopped")
    assert_speech(reply, 0.5)


async def test_a_peer_that_stops_reading_or_trickles_an_event_frees_its_slot() -> None:
    """Wyoming has no ping: a peer that leaves our audio unread for ``write_timeout``
    (ping_interval + ping_timeout) is gone, counted as lost; one whose event is not whole
    within the request timeout, or too large, is dropped. Either way its session ends and its
    slot is free, in about those bounds (before: when the turn ran out, then the idle
    timeout, 15 min)."""
    config = replace(
        TEST_CONFIG,
        wyoming_uri="tcp://127.0.0.1:0",
        ping_interval=0.5,
        ping_timeout=0.5,
        request_timeout=0.5,
    )
    async with running(config) as srv:
        assert srv.wyoming is not None and srv.app is not None
        deaf = socket.socket()  # a small receive window, so the server's writes back up soon
        deaf.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        deaf.setblocking(False)
        await asyncio.get_running_loop().sock_connect(deaf, ("127.0.0.1", srv.wyoming.port))
        _, deaf_writer = await asyncio.open_connection(sock=deaf)
        trickler, trickler_writer = await asyncio.open_connection("127.0.0.1", srv.wyoming.port)
        try:
            start = time.monotonic()
            deaf_writer.write(b'{"type": "synthesize", "data": {"text": "%s"}}\n' % LONG.encode())
            trickler_writer.write(b'{"type": "synthesize-start"}\n{"type": "synthesize-chu')
            async with asyncio.timeout(timeout(5)):
                while len(srv.app.sessions) < 2:
                    await asyncio.sleep(0.01)
            assert srv.open_connections() == 2  # Wyoming connections count toward the cap
            assert await asyncio.wait_for(trickler.read(), timeout(5)) == b""  # closed
            # An event that announces more than a whole turn's text is refused before it is read.
            huge, huge_writer = await asyncio.open_connection("127.0.0.1", srv.wyoming.port)
            huge_writer.write(b'{"type": "synthesize", "data_length": 100000000}\n')
            assert await asyncio.wait_for(huge.read(), timeout(5)) == b""
            huge_writer.close()
            async with asyncio.timeout(timeout(15)):
                while srv.app.sessions:
                    await asyncio.sleep(0.02)
            print(f"both slots free after {time.monotonic() - start:.2f} s")
        finally:
            deaf_writer.transport.abort()
            trickler_writer.close()
        metric = srv.app.metrics.registry.get_sample_value
        assert metric("voicews_sessions_lost_total") == 1
        assert metric("voicews_connections_dropped_total", {"reason": "head_timeout"}) == 1
        assert metric("voicews_connections_dropped_total", {"reason": "invalid_request"}) == 1
        assert srv.open_connections() == 0


async def test_shutdown_lets_a_streamed_reply_finish() -> None:
    srv = VoicewsServer(replace(TEST_CONFIG, wyoming_uri="tcp://127.0.0.1:0", drain_timeout=10))
    await srv.start()
    assert srv.wyoming is not None and srv.app is not None
    closing: asyncio.Task[None] | None = None
    try:
        async with AsyncTcpClient("127.0.0.1", srv.wyoming.port) as client:
            await client.write_event(SynthesizeStart().event())
            await client.write_event(SynthesizeChunk(text="Hello there, ").event())
            async with asyncio.timeout(timeout(5)):
                while not srv.app.sessions:
                    await asyncio.sleep(0.01)
            closing = asyncio.create_task(srv.close(drain=True))
            async with asyncio.timeout(timeout(5)):
                while not srv.app.admission.draining:
                    await asyncio.sleep(0.01)
            async with AsyncTcpClient("127.0.0.1", srv.wyoming.port) as late:
                await late.write_event(Synthesize(text="Too late?").event())
                event = await asyncio.wait_for(late.read_event(), timeout(5))
                assert event is not None and "shutting down" in Error.from_event(event).text
            await client.write_event(SynthesizeChunk(text="the rest is still spoken.").event())
            await client.write_event(SynthesizeStop().event())
            reply = await read_reply(client, "synthesize-stopped")
            assert await asyncio.wait_for(client.read_event(), timeout(5)) is None
    finally:
        await asyncio.wait_for(closing or srv.close(), timeout(15))
    assert kinds(reply.events) == STREAMED and not reply.errors
    assert_speech(reply, 1.5)


def test_uri_must_be_tcp() -> None:
    assert parse_uri("tcp://0.0.0.0:10200") == ("0.0.0.0", 10200)
    for bad in ("unix:///tmp/w.sock", "tcp://host", "10200"):
        with pytest.raises(ValueError, match="tcp://HOST:PORT"):
            parse_uri(bad)
    assert TEST_CONFIG.wyoming_uri is None
