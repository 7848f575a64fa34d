"""First audio and barge-in through each way an agent reaches voicews, side by side in one run.

One in-process server; each repeat runs every client in turn, the same replies at the same
token rate: voicews' own protocol (one turn per socket, and contexts on one socket), the
Pipecat and LiveKit adapters (``voicews.integrations``), and the frameworks' own ElevenLabs
services pointed at the ElevenLabs dialect.

    python -m bench frameworks                 # 3 repeats (~2 min)
    python -m bench frameworks --repeats 5 --json frameworks.json

First audio: the reply's first token handed to the client -> its first audio received.
Barge-in: the interruption (``turn_reset``, ``close_context``, Pipecat's ``InterruptionFrame``)
-> the last audio of the cut reply received (0 when none came after it). LiveKit's streams
stop handing audio out at ``aclose()`` whatever the server does: their barge-in is not
measured here. Figures are medians and maxima over the repeats.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from voicews.client import RealtimeClient, word_pieces
from voicews.core.events import AudioFrame
from voicews.protocol import ContextClosed, TurnDone
from voicews.server import ServerConfig, VoicewsServer

REPLY = "Sure, I can help with that. Your order shipped on Monday and arrives on Friday."
LONG = " ".join(f"Part {i} of a long answer goes on, clause after clause." for i in range(10))
TOKENS_PER_S = 30
CUT_AFTER_S = 1.0
"""Audio of the long reply received before it is interrupted."""

Measure = Callable[[VoicewsServer], Awaitable[tuple[float, float | None]]]
"""One repeat of one client: (first audio, barge-in), in seconds."""


async def realtime(server: VoicewsServer) -> tuple[float, float | None]:
    async with await RealtimeClient.connect(server.url) as client:
        turn = await client.speak(REPLY, tokens_per_s=TOKENS_PER_S)
        assert turn.first_audio is not None
        await client.turn_reset("long")
        await client.text_delta(LONG)
        received = 0
        while received < CUT_AFTER_S * client.sample_rate:
            item = await client.recv(30)
            if isinstance(item, AudioFrame):
                received += item.samples
        await client.turn_reset("next")
        cut_at = last = time.perf_counter()
        while not (isinstance(item, TurnDone) and item.turn_id == "long"):
            item = await client.recv(30)
            if isinstance(item, AudioFrame) and item.turn_id == "long":
                last = time.perf_counter()
        return turn.first_audio, last - cut_at


async def contexts(server: VoicewsServer) -> tuple[float, float | None]:
    """Two contexts on one socket: a reply, then a long one closed mid-way."""
    async with await RealtimeClient.connect(server.url) as client:

        async def feed() -> None:
            await client.turn_reset("r1", context_id="a")
            for piece in word_pieces(REPLY):
                await client.text_delta(piece, context_id="a")
                await asyncio.sleep(1 / TOKENS_PER_S)
            await client.end_text(context_id="a")
            await client.turn_reset("r2", context_id="b")
            await client.text_delta(LONG, context_id="b")

        feeding = asyncio.create_task(feed())
        started = time.perf_counter()
        first = None
        received = 0
        while received < CUT_AFTER_S * client.sample_rate:
            item = await client.recv(30)
            if isinstance(item, AudioFrame) and item.context_id == "a" and first is None:
                first = time.perf_counter() - started
            if isinstance(item, AudioFrame) and item.context_id == "b":
                received += item.samples
        await feeding
        await client.close_context("b")
        cut_at = last = time.perf_counter()
        while not isinstance(item, ContextClosed):
            item = await client.recv(30)
            if isinstance(item, AudioFrame) and item.context_id == "b":
                last = time.perf_counter()
        assert first is not None
        return first, last - cut_at


def pipecat(eleven: bool, tokens: bool = False) -> Measure:
    """``tokens``: the ElevenLabs service sends tokens as they come (its default waits for
    each sentence, as voicews' own adapter does not)."""

    async def measure(server: VoicewsServer) -> tuple[float, float | None]:
        from pipecat.frames.frames import InterruptionFrame, TTSAudioRawFrame

        async with _pipecat_bot(server, eleven, tokens) as (feed, frames, queue):
            known = len(frames)
            started = await feed(REPLY)
            while not any(isinstance(f, TTSAudioRawFrame) for _, f in frames[known:]):
                await asyncio.sleep(0.005)
            first = next(at for at, f in frames[known:] if isinstance(f, TTSAudioRawFrame))
            await asyncio.sleep(8)  # the reply plays out
            known = len(frames)
            feeding = asyncio.create_task(feed(LONG))
            while _seconds(frames[known:]) < CUT_AFTER_S:
                await asyncio.sleep(0.005)
            feeding.cancel()
            await queue(InterruptionFrame())
            cut_at = time.perf_counter()
            await asyncio.sleep(1.0)
            late = [at for at, f in frames[known:] if isinstance(f, TTSAudioRawFrame)]
            return first - started, max(0.0, max(late) - cut_at)

    return measure


def _seconds(frames: list[tuple[float, Any]]) -> float:
    from pipecat.frames.frames import TTSAudioRawFrame

    return sum(
        len(f.audio) / 2 / f.sample_rate for _, f in frames if isinstance(f, TTSAudioRawFrame)
    )


@asynccontextmanager
async def _pipecat_bot(server: VoicewsServer, eleven: bool, tokens: bool) -> AsyncIterator[Any]:
    from pipecat.frames.frames import (
        EndFrame,
        Frame,
        LLMFullResponseEndFrame,
        LLMFullResponseStartFrame,
        LLMTextFrame,
    )
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineParams, PipelineWorker
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
    from pipecat.services.elevenlabs.tts import ElevenLabsTTSService
    from pipecat.services.tts_service import TextAggregationMode
    from pipecat.workers.runner import WorkerRunner

    from voicews.integrations.pipecat import VoicewsTTSService

    frames: list[tuple[float, Frame]] = []

    class Recorder(FrameProcessor):
        async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if direction is FrameDirection.DOWNSTREAM:
                frames.append((time.perf_counter(), frame))
            await self.push_frame(frame, direction)

    tts: FrameProcessor = (
        ElevenLabsTTSService(
            api_key="unused",
            url=f"ws://127.0.0.1:{server.port}",
            settings=ElevenLabsTTSService.Settings(voice="any"),
            text_aggregation_mode=TextAggregationMode.TOKEN if tokens else None,
        )
        if eleven
        else VoicewsTTSService(url=server.url)
    )
    worker = PipelineWorker(
        Pipeline([tts, Recorder()]),
        params=PipelineParams(audio_out_sample_rate=22050),
        cancel_on_idle_timeout=False,
    )
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def _started(worker: PipelineWorker, frame: Frame) -> None:
        started.set()

    async def feed(text: str) -> float:
        await worker.queue_frame(LLMFullResponseStartFrame())
        first = time.perf_counter()
        for piece in word_pieces(text):
            await worker.queue_frame(LLMTextFrame(piece))
            await asyncio.sleep(1 / TOKENS_PER_S)
        await worker.queue_frame(LLMFullResponseEndFrame())
        return first

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())
    await asyncio.wait_for(started.wait(), 10)
    try:
        yield feed, frames, worker.queue_frame
    finally:
        await worker.queue_frame(EndFrame())
        await asyncio.wait_for(running, 10)


def livekit(eleven: bool) -> Measure:
    async def measure(server: VoicewsServer) -> tuple[float, float | None]:
        import aiohttp
        from livekit.plugins import elevenlabs

        from voicews.integrations.livekit import TTS

        async with aiohttp.ClientSession() as http:
            voice: Any = (
                elevenlabs.TTS(
                    api_key="unused",
                    base_url=f"http://127.0.0.1:{server.port}/v1",
                    encoding="pcm_22050",
                    http_session=http,
                )
                if eleven
                else TTS(url=server.url)
            )
            stream = voice.stream()

            async def push() -> None:
                for piece in word_pieces(REPLY):
                    stream.push_text(piece)
                    await asyncio.sleep(1 / TOKENS_PER_S)
                stream.end_input()

            feeding = asyncio.create_task(push())
            started = time.perf_counter()
            first = None
            async for _ in stream:
                first = first or time.perf_counter() - started
            await feeding
            await stream.aclose()
            await voice.aclose()
            assert first is not None
            return first, None

    return measure


CLIENTS: dict[str, Measure] = {
    "voicews protocol": realtime,
    "voicews protocol, contexts": contexts,
    "Pipecat VoicewsTTSService": pipecat(eleven=False),
    "Pipecat ElevenLabsTTSService": pipecat(eleven=True),
    "Pipecat ElevenLabsTTSService, token aggregation": pipecat(eleven=True, tokens=True),
    "LiveKit voicews TTS": livekit(eleven=False),
    "LiveKit elevenlabs.TTS": livekit(eleven=True),
}


async def run(repeats: int) -> dict[str, list[tuple[float, float | None]]]:
    results: dict[str, list[tuple[float, float | None]]] = {name: [] for name in CLIENTS}
    server = VoicewsServer(ServerConfig(port=0))
    await server.start()
    try:
        for _ in range(repeats):
            for name, measure in CLIENTS.items():
                results[name].append(await measure(server))
    finally:
        await server.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="write every run here")
    args = parser.parse_args()
    results = asyncio.run(run(args.repeats))
    print("| client | first audio p50 / max (ms) | barge-in p50 / max (ms) |")
    print("| --- | --- | --- |")
    for name, runs in results.items():
        firsts = [f * 1000 for f, _ in runs]
        cuts = [c * 1000 for _, c in runs if c is not None]
        cut = f"{statistics.median(cuts):.0f} / {max(cuts):.0f}" if cuts else "-"
        print(f"| {name} | {statistics.median(firsts):.0f} / {max(firsts):.0f} | {cut} |")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=1)


if __name__ == "__main__":
    main()
