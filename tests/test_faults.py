"""Faults: an engine that fails mid-turn, clients that vanish, and memory that must come back."""

from __future__ import annotations

import asyncio

from conftest import (
    ARENA_SLACK,
    TEST_CONFIG,
    FailsOnMarker,
    resources,
    running,
    timeout,
    tracing_heap,
)
from voicews.client import RealtimeClient, SpokenTurn
from voicews.compute.execution import ComputeWorker
from voicews.engines import engine_factory
from voicews.errors import ErrorCode
from voicews.protocol import AudioFrame
from voicews.server import VoicewsServer

LONG = " ".join(f"Sentence {i} keeps the voice busy for a little while." for i in range(30))


async def test_engine_failure_mid_turn_ends_only_that_turn() -> None:
    build = engine_factory("piper")
    worker = ComputeWorker(lambda: FailsOnMarker(build()))
    async with (
        running(TEST_CONFIG, worker=worker) as srv,
        await RealtimeClient.connect(srv.url) as c,
        await RealtimeClient.connect(srv.url) as bystander,
    ):
        other = asyncio.create_task(
            bystander.speak("I keep talking, unbothered.", timeout=timeout(30))
        )
        turn = await c.speak(
            "This part is fine. Then things explode here. And this is never said.",
            timeout=timeout(30),
        )
        assert [e.code for e in turn.errors] == [ErrorCode.SYNTHESIS_FAILED]
        assert turn.errors[0].turn_id == turn.turn_id
        assert turn.done is not None and turn.done.cancelled
        assert turn.done.samples == turn.samples > 0  # the fine part was spoken
        assert " ".join(s.text for s in turn.segments) == "This part is fine."
        again = await c.speak("The session goes on.", timeout=timeout(30))
        assert again.done is not None and not again.done.cancelled and not again.errors
        assert (await other).done is not None
        assert worker.stats.jobs_failed == 1


async def test_http_speech_cut_by_an_engine_failure_is_a_truncated_transfer() -> None:
    build = engine_factory("piper")
    worker = ComputeWorker(lambda: FailsOnMarker(build()))
    async with running(TEST_CONFIG, worker=worker) as srv:
        body = (
            b'{"input": "This part is fine. Then things explode here. Never said.", '
            b'"response_format": "wav"}'
        )
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        writer.write(
            b"POST /v1/audio/speech HTTP/1.1\r\nHost: t\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n\r\n" + body
        )  # fmt: skip
        data = await asyncio.wait_for(reader.read(), timeout(20))  # until the server closes
        writer.close()
        assert data.startswith(b"HTTP/1.1 200")
        assert len(data) > 22050  # the fine part streamed...
        assert not data.endswith(b"\r\n0\r\n\r\n")  # ...but no final chunk: truncated


async def vanish_mid_turn(srv: VoicewsServer) -> None:
    client = await RealtimeClient.connect(srv.url)
    await client.turn_reset("gone")
    await client.text_delta(LONG)
    await client.end_text()
    while not isinstance(await client.recv(timeout(20)), AudioFrame):
        pass
    client.ws.transport.abort()  # no close handshake: the peer just disappears


async def test_vanished_clients_free_their_session_synthesis_and_memory() -> None:
    async with running() as srv:
        assert srv.app is not None
        for _ in range(20):  # warm up: allocator arenas and onnxruntime buffers grow once
            await vanish_mid_turn(srv)
        await asyncio.sleep(0.5)
        with tracing_heap():
            before = resources()
            for _ in range(20):
                await vanish_mid_turn(srv)
            async with asyncio.timeout(timeout(10)):
                while srv.app.sessions or srv.worker.queued:
                    await asyncio.sleep(0.05)
            jobs = srv.worker.stats.jobs_done
            await asyncio.sleep(0.5)
            assert srv.worker.stats.jobs_done - jobs <= 1  # the synthesis stopped with the client
            after = resources()
        print(f"20 vanished clients: before {before}; after {after}")
        # Each client left seconds of synthesized audio behind; none of it may stay.
        assert after.heap - before.heap < 2**20
        assert after.rss - before.rss < ARENA_SLACK
        assert after.tasks <= before.tasks and after.threads == before.threads
        # And the server still serves.
        async with await RealtimeClient.connect(srv.url) as c:
            turn: SpokenTurn = await c.speak("Still here.", timeout=timeout(20))
            assert turn.done is not None
