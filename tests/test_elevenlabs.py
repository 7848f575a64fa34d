"""The ElevenLabs WebSocket dialect: its URL and alignment alone, then a raw client and
Pipecat's own ``ElevenLabsTTSService`` against a real server."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import aiohttp
import av
import numpy as np
import pytest
import websockets
from livekit.agents.types import USERDATA_TIMED_TRANSCRIPT, TimedString
from livekit.plugins import elevenlabs
from pipecat.frames.frames import (
    EndFrame,
    ErrorFrame,
    Frame,
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
    TTSTextFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.elevenlabs.tts import ElevenLabsTTSService
from pipecat.workers.runner import WorkerRunner
from test_integrations_pipecat import (
    FIRST,
    SECOND,
    THIRD,
    TOKENS_PER_S,
    Recorder,
    cancelled_turns,
    llm_stops,
)

from conftest import TEST_CONFIG, running, timeout
from voicews.access import AccessPolicy
from voicews.client import word_pieces
from voicews.core.events import WordMark
from voicews.dialects.elevenlabs import alignment, parse_request
from voicews.dialects.elevenlabs_audio import AudioFormat
from voicews.encoding import OutputFormat
from voicews.errors import ErrorCode, VoicewsError
from voicews.server import VoicewsServer

MULTI = "/v1/text-to-speech/any-voice/multi-stream-input"


def test_the_url_says_voice_contexts_format_and_reading() -> None:
    request = parse_request(
        MULTI,
        b"model_id=eleven_flash_v2_5&output_format=ulaw_8000&auto_mode=true"
        b"&inactivity_timeout=300&apply_text_normalization=off&sync_alignment=true",
    )
    assert request is not None and request.voice_id == "any-voice" and request.multi
    assert request.audio == AudioFormat(OutputFormat(8000, "pcm_mulaw"))
    assert (request.normalization, request.inactivity_timeout) == ("off", 180.0)
    single = parse_request("/v1/text-to-speech/v/stream-input", b"output_format=pcm_44100")
    assert single is not None and not single.multi
    assert single.audio == AudioFormat(OutputFormat(44100))
    unnamed = parse_request(MULTI, b"")  # the cloud's default: MP3 at 44.1 kHz, 128 kbit/s
    assert unnamed is not None and unnamed.audio == AudioFormat(
        OutputFormat(44100, "pcm_f32le"), 128_000
    )
    assert parse_request("/v1/realtime", b"") is None
    for unserved in (b"output_format=mp3_44100_100", b"output_format=opus_48000_64"):
        with pytest.raises(VoicewsError) as refused:
            parse_request(MULTI, unserved)
        assert refused.value.code is ErrorCode.INVALID_REQUEST
        assert "pcm_16000" in refused.value.message and "mp3_22050_32" in refused.value.message


def test_alignment_spreads_each_word_over_its_characters() -> None:
    words = [WordMark("Hi", 1000), WordMark("you.", 1400)]
    marks = alignment("Hi you.", words, 1000, 2200, 1000)  # one sample a millisecond
    assert "".join(marks["chars"]) == "Hi you. "
    assert marks["charStartTimesMs"] == [0, 200, 400, 400, 600, 800, 1000, 1200]
    assert marks["charDurationsMs"] == [200, 200, 0, 200, 200, 200, 200, 0]
    # Without word marks the segment is one unit, spread evenly.
    whole = alignment("ab", None, 0, 100, 1000)
    assert whole == {
        "chars": ["a", "b", " "], "charStartTimesMs": [0, 50, 100], "charDurationsMs": [50, 50, 0],
    }  # fmt: skip


async def receive_until_final(ws: Any, context: str | None = None) -> list[dict[str, Any]]:
    got = []
    while True:
        message = json.loads(await asyncio.wait_for(ws.recv(), timeout(20)))
        got.append(message)
        if message.get("isFinal") and message.get("contextId") == context:
            return got


async def test_multi_stream_input_speaks_aligns_and_closes_contexts(
    server: VoicewsServer,
) -> None:
    url = f"ws://127.0.0.1:{server.port}{MULTI}?output_format=pcm_16000"
    async with websockets.connect(url, additional_headers={"xi-api-key": "k"}) as ws:
        await ws.send(json.dumps({"text": " ", "context_id": "a", "voice_settings": {}}))
        await ws.send(json.dumps({"text": "Hello there, how are you today? ", "context_id": "a"}))
        await ws.send(json.dumps({"context_id": "a", "flush": True}))
        await ws.send(json.dumps({"context_id": "a", "close_context": True}))  # after the rest
        got = await receive_until_final(ws, "a")
        await ws.send(json.dumps({"text": ""}))  # a keepalive: no answer
        await ws.send('{"text": 5}')
        refused = json.loads(await asyncio.wait_for(ws.recv(), timeout(5)))
    audio = b"".join(base64.b64decode(m["audio"]) for m in got if m.get("audio"))
    assert all(m["contextId"] == "a" for m in got)
    assert 1.0 < len(audio) / 2 / 16000 < 4.0
    chars = "".join(c for m in got if m.get("alignment") for c in m["alignment"]["chars"])
    assert chars.split() == "Hello there, how are you today?".split()
    assert refused["error"] == ErrorCode.INVALID_MESSAGE and "text" in refused["message"]


async def test_mp3_by_default_one_stream_per_turn_whole_at_its_end(
    server: VoicewsServer,
) -> None:
    """No ``output_format``: MP3 as the cloud sends it, each turn's tail flushed at its end."""
    url = f"ws://127.0.0.1:{server.port}/v1/text-to-speech/v/stream-input"
    async with websockets.connect(url) as ws:
        await ws.send(json.dumps({"text": "Hello there, how are you today? "}))
        await ws.send(json.dumps({"text": ""}))
        got = await receive_until_final(ws)
    mp3 = b"".join(base64.b64decode(m["audio"]) for m in got if m.get("audio"))
    with av.open(io.BytesIO(mp3), format="mp3") as container:
        frames = list(container.decode(audio=0))
    samples = np.concatenate([f.to_ndarray().reshape(-1) for f in frames])
    assert {f.sample_rate for f in frames} == {44100}
    assert 1.0 < samples.size / 44100 < 4.0 and np.abs(samples).max() > 0.1
    text = "".join(c for m in got if m.get("alignment") for c in m["alignment"]["chars"])
    assert text.split() == "Hello there, how are you today?".split()


async def test_a_token_in_the_first_message_or_none_at_all() -> None:
    config = replace(TEST_CONFIG, access=AccessPolicy(tokens=frozenset({"secret"})))
    async with running(config) as server:
        url = f"ws://127.0.0.1:{server.port}/v1/text-to-speech/v/stream-input"
        async with websockets.connect(url) as ws:
            await ws.send(json.dumps({"text": " ", "xi_api_key": "secret"}))
            await ws.send(json.dumps({"text": "Hello."}))
            await ws.send(json.dumps({"text": ""}))  # end of input: isFinal, then close
            got = await receive_until_final(ws)
            assert any(m.get("audio") for m in got)
            await asyncio.wait_for(ws.wait_closed(), timeout(5))
        async with websockets.connect(url) as ws:
            await ws.send(json.dumps({"text": " ", "xi_api_key": "wrong"}))
            assert json.loads(await ws.recv())["error"] == ErrorCode.UNAUTHORIZED
            await asyncio.wait_for(ws.wait_closed(), timeout(5))
            assert ws.close_code == 1008


@asynccontextmanager
async def eleven_bot(server: VoicewsServer) -> AsyncIterator[tuple[PipelineWorker, Recorder]]:
    tts = ElevenLabsTTSService(
        api_key="unused",  # sent as xi-api-key: this server asks for no token
        url=f"ws://127.0.0.1:{server.port}",
        settings=ElevenLabsTTSService.Settings(voice="21m00Tcm4TlvDq8ikWAM"),  # not ours
    )
    upstream, downstream = Recorder(FrameDirection.UPSTREAM), Recorder(FrameDirection.DOWNSTREAM)
    worker = PipelineWorker(
        Pipeline([upstream, tts, downstream]),
        params=PipelineParams(audio_out_sample_rate=24000),
        cancel_on_idle_timeout=False,
    )
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def _started(worker: PipelineWorker, frame: Frame) -> None:
        started.set()

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    run = asyncio.create_task(runner.run())
    await asyncio.wait_for(started.wait(), timeout(10))
    try:
        yield worker, downstream
        assert not upstream.of(ErrorFrame), upstream.of(ErrorFrame)
    finally:
        await worker.queue_frame(EndFrame())
        await asyncio.wait_for(run, timeout(10))


async def reply(worker: PipelineWorker, text: str) -> float:
    await worker.queue_frame(LLMFullResponseStartFrame())
    first = time.perf_counter()
    for piece in word_pieces(text):
        await worker.queue_frame(LLMTextFrame(piece))
        await asyncio.sleep(1 / TOKENS_PER_S)
    await worker.queue_frame(LLMFullResponseEndFrame())
    return first


async def test_pipecat_elevenlabs_service_two_turns_the_first_interrupted(
    server: VoicewsServer,
) -> None:
    cancelled_before = await cancelled_turns(server)
    async with eleven_bot(server) as (worker, down):

        def seconds(context: str) -> float:
            frames = down.of(TTSAudioRawFrame, context)
            return sum(len(f.audio) / 2 / f.sample_rate for _, f in frames)  # type: ignore[attr-defined]

        feeding = asyncio.create_task(reply(worker, SECOND))
        await down.wait_for(lambda: down.of(TTSStartedFrame))
        first = str(down.of(TTSStartedFrame)[0][1].context_id)
        await down.wait_for(lambda: seconds(first) > 1.0)
        await llm_stops(feeding)
        await worker.queue_frame(InterruptionFrame())
        await down.wait_for(lambda: down.of(InterruptionFrame), 5)
        interrupted_at = down.of(InterruptionFrame)[0][0]
        await asyncio.sleep(0.5)
        cut_seconds = seconds(first)

        token = await reply(worker, THIRD + " " + FIRST)
        await down.wait_for(lambda: len(down.of(TTSStartedFrame)) > 1)
        second = str(down.of(TTSStartedFrame)[1][1].context_id)
        await down.wait_for(lambda: down.of(TTSStoppedFrame, second), 30)

    late = [
        at - interrupted_at for at, _ in down.of(TTSAudioRawFrame, first) if at > interrupted_at
    ]
    assert not late or max(late) < 0.3, late  # silent within 300 ms
    assert 1.0 < cut_seconds < 10.0 and seconds(first) == cut_seconds
    assert seconds(second) > 3.0
    assert await cancelled_turns(server) == cancelled_before + 1  # cut on the server too
    first_audio = down.of(TTSAudioRawFrame, second)[0][0] - token
    print(f"first audio through Pipecat's ElevenLabs service: {first_audio * 1000:.0f} ms")
    words = [f for _, f in down.of(TTSTextFrame, second)]
    assert " ".join(w.text for w in words).split() == (THIRD + " " + FIRST).split()
    pts = [w.pts for w in words]
    assert all(p is not None for p in pts) and pts == sorted(pts) and pts[0] != pts[-1]


async def livekit_tokens(stream: Any, text: str, end: bool = True) -> None:
    for piece in word_pieces(text):
        stream.push_text(piece)
        await asyncio.sleep(1 / TOKENS_PER_S)
    if end:
        stream.end_input()


async def test_livekit_elevenlabs_plugin_two_turns_the_first_interrupted(
    server: VoicewsServer,
) -> None:
    cancelled_before = await cancelled_turns(server)
    async with aiohttp.ClientSession() as http:
        voice = elevenlabs.TTS(
            api_key="unused",
            base_url=f"http://127.0.0.1:{server.port}/v1",
            # encoding: the plugin's default, MP3 at 22050 Hz, 32 kbit/s, one stream per turn
            http_session=http,
        )
        first = voice.stream()
        feeding = asyncio.create_task(livekit_tokens(first, SECOND, end=False))
        seconds = 0.0
        async with asyncio.timeout(timeout(30)):
            async for ev in first:
                seconds += ev.frame.duration
                if seconds > 1.0:
                    break
        feeding.cancel()
        await first.aclose()  # the barge-in: the plugin closes the context
        await asyncio.sleep(0.3)
        jobs = server.worker.stats.jobs_done
        await asyncio.sleep(0.5)
        assert server.worker.stats.jobs_done == jobs  # nothing of it is synthesized any more

        second = voice.stream()
        feeding = asyncio.create_task(livekit_tokens(second, FIRST))
        started = time.perf_counter()
        events = []
        async with asyncio.timeout(timeout(30)):
            async for ev in second:
                if not events:
                    first_audio = time.perf_counter() - started
                events.append(ev)
        await feeding
        await second.aclose()
        await voice.aclose()
    print(f"first audio through LiveKit's ElevenLabs plugin: {first_audio * 1000:.0f} ms")
    assert sum(ev.frame.duration for ev in events) > 3.0
    assert {ev.frame.sample_rate for ev in events} == {22050}
    words: list[TimedString] = [
        w for ev in events for w in ev.frame.userdata.get(USERDATA_TIMED_TRANSCRIPT, [])
    ]
    assert "".join(words).split() == FIRST.split()
    starts = [float(w.start_time) for w in words]
    assert starts == sorted(starts) and starts[0] != starts[-1]
    assert await cancelled_turns(server) <= cancelled_before + 1  # its sentence may be done
