"""The LiveKit Agents ``TTS`` against the real server."""

from __future__ import annotations

import asyncio
import re
import time

import numpy as np
from livekit.agents import APIError, tts
from livekit.agents.types import USERDATA_TIMED_TRANSCRIPT, TimedString

from conftest import http_get, timeout
from voicews.client import word_pieces
from voicews.integrations.livekit import TTS
from voicews.server import VoicewsServer

REPLY = "Sure, I can help with that. Your order shipped on Monday and arrives on Friday."
LONG = " ".join(f"Part {i} of a long answer goes on, clause after clause." for i in range(10))


async def cancelled_turns(server: VoicewsServer) -> float:
    body = (await http_get(server.port, "/metrics"))[2].decode()
    match = re.search(r'^voicews_turns_total\{outcome="cancelled"\} (\S+)$', body, re.M)
    return float(match.group(1)) if match else 0.0


async def push_tokens(stream: tts.SynthesizeStream, text: str, end: bool = True) -> None:
    for piece in word_pieces(text):  # LLM-like tokens at 30/s
        stream.push_text(piece)
        await asyncio.sleep(1 / 30)
    if end:
        stream.end_input()


def pcm(frames: list[tts.SynthesizedAudio]) -> np.ndarray:
    return np.concatenate([np.frombuffer(ev.frame.data, dtype=np.int16) for ev in frames])


async def test_stream_speaks_pushed_tokens_with_timed_words(server: VoicewsServer) -> None:
    async with TTS(url=server.url) as voice:
        assert voice.capabilities.streaming and voice.capabilities.aligned_transcript
        stream = voice.stream()
        feeding = asyncio.create_task(push_tokens(stream, REPLY))
        started = time.perf_counter()
        events: list[tts.SynthesizedAudio] = []
        async with asyncio.timeout(timeout(30)):
            async for ev in stream:
                events.append(ev)
                if len(events) == 1:
                    first_audio = time.perf_counter() - started
        await feeding
        await stream.aclose()
    print(f"first audio through LiveKit: {first_audio * 1000:.0f} ms")
    assert {ev.frame.sample_rate for ev in events} == {22050}
    assert events[-1].is_final and len({ev.segment_id for ev in events}) == 1
    audio = pcm(events)
    assert len(audio) / 22050 > 3.0 and np.sqrt(np.mean(audio.astype(float) ** 2)) > 500
    words: list[TimedString] = [
        w for ev in events for w in ev.frame.userdata.get(USERDATA_TIMED_TRANSCRIPT, [])
    ]
    assert "".join(words).split() == REPLY.split()
    starts = [float(w.start_time) for w in words]
    assert starts == sorted(starts) and 0 < starts[-1] < len(audio) / 22050


async def test_aclose_mid_turn_stops_synthesis_on_the_server(server: VoicewsServer) -> None:
    assert server.app is not None
    cancelled_before = await cancelled_turns(server)
    async with TTS(url=server.url) as voice:
        stream = voice.stream()
        feeding = asyncio.create_task(push_tokens(stream, LONG, end=False))
        seconds = 0.0
        async with asyncio.timeout(timeout(30)):
            async for ev in stream:
                seconds += ev.frame.duration
                if seconds > 1.0:
                    break
        jobs = server.worker.stats.jobs_done
        await stream.aclose()
        feeding.cancel()
        async with asyncio.timeout(timeout(5)):
            while server.app.sessions or server.worker.queued:
                await asyncio.sleep(0.02)
    await asyncio.sleep(0.3)
    assert server.worker.stats.jobs_done - jobs <= 1  # at most the segment in flight
    assert await cancelled_turns(server) == cancelled_before + 1


async def test_synthesize_and_a_pooled_session(server: VoicewsServer) -> None:
    assert server.app is not None
    async with TTS(url=server.url) as voice:
        frame = await voice.synthesize(REPLY).collect()
        assert frame.sample_rate == 22050 and frame.duration > 3.0
        jobs = server.worker.stats.jobs_done
        frame = await voice.synthesize("Goodbye.").collect()
        assert frame.duration > 0.3 and server.worker.stats.jobs_done > jobs
        assert len(server.app.sessions) == 1  # both on the one pooled session
    async with asyncio.timeout(timeout(5)):
        while server.app.sessions:
            await asyncio.sleep(0.02)


async def test_server_errors_fail_the_stream(server: VoicewsServer) -> None:
    async with TTS(url=server.url) as voice:
        stream = voice.stream()
        stream.push_text("word " * 2000)  # over the turn's text limit
        stream.end_input()
        try:
            async with asyncio.timeout(timeout(10)):
                async for _ in stream:
                    pass
        except APIError as e:
            assert "turn_text_too_long" in str(e)
        else:
            raise AssertionError("the stream did not fail")
