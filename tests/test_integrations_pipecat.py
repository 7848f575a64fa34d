"""``VoicewsTTSService`` in a real Pipecat pipeline, against the real server."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

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
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.workers.runner import WorkerRunner

from conftest import http_get, timeout
from voicews.client import word_pieces
from voicews.integrations.pipecat import TurnQueue, VoicewsTTSService
from voicews.protocol import Cancel, EndText, TextDelta, TurnReset
from voicews.server import VoicewsServer

FIRST = "Sure, I can help with that. Your order shipped on Monday and arrives on Friday."
SECOND = " ".join(f"Part {i} of a long answer goes on, clause after clause." for i in range(10))
THIRD = "Is there anything else I can do for you today?"
OUTPUT_RATE = 24000
TOKENS_PER_S = 30


class Recorder(FrameProcessor):
    """Passes frames on, keeping those that travel one way with their arrival times."""

    def __init__(self, direction: FrameDirection) -> None:
        super().__init__()
        self._direction = direction
        self.frames: list[tuple[float, Frame]] = []

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if direction is self._direction:
            self.frames.append((time.perf_counter(), frame))
        await self.push_frame(frame, direction)

    def of(self, kind: type[Frame], context_id: str | None = None) -> list[tuple[float, Frame]]:
        """Frames of a kind (of one audio context, if given)."""
        return [
            (at, f)
            for at, f in self.frames
            if isinstance(f, kind) and context_id in (None, getattr(f, "context_id", None))
        ]

    async def wait_for(self, check: Callable[[], object], seconds: float = 20) -> None:
        async with asyncio.timeout(timeout(seconds)):
            while not check():
                await asyncio.sleep(0.01)


@dataclass
class Bot:
    worker: PipelineWorker
    tts: VoicewsTTSService
    upstream: Recorder
    downstream: Recorder

    async def reply(self, text: str) -> tuple[str, float]:
        """An LLM reply, token by token at 30/s; its audio context and first token's time."""
        known = len(self.downstream.of(TTSStartedFrame))
        await self.worker.queue_frame(LLMFullResponseStartFrame())
        started = None
        for piece in word_pieces(text):
            await self.worker.queue_frame(LLMTextFrame(piece))
            started = started or time.perf_counter()
            await asyncio.sleep(1 / TOKENS_PER_S)
        await self.worker.queue_frame(LLMFullResponseEndFrame())
        await self.downstream.wait_for(lambda: len(self.downstream.of(TTSStartedFrame)) > known)
        context = str(self.downstream.of(TTSStartedFrame)[known][1].context_id)
        assert started is not None
        return context, started

    def audio(self, context: str) -> list[tuple[float, TTSAudioRawFrame]]:
        return self.downstream.of(TTSAudioRawFrame, context)  # type: ignore[return-value]

    def seconds(self, context: str) -> float:
        return sum(len(f.audio) / 2 / f.sample_rate for _, f in self.audio(context))


@asynccontextmanager
async def bot(url: str) -> AsyncIterator[Bot]:
    tts = VoicewsTTSService(url=url)
    upstream, downstream = Recorder(FrameDirection.UPSTREAM), Recorder(FrameDirection.DOWNSTREAM)
    worker = PipelineWorker(
        Pipeline([upstream, tts, downstream]),
        params=PipelineParams(audio_out_sample_rate=OUTPUT_RATE),
        cancel_on_idle_timeout=False,
    )
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def _started(worker: PipelineWorker, frame: Frame) -> None:
        started.set()

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())
    await asyncio.wait_for(started.wait(), timeout(10))
    try:
        yield Bot(worker, tts, upstream, downstream)
    finally:
        await worker.queue_frame(EndFrame())
        await asyncio.wait_for(running, timeout(10))


async def llm_stops(feeding: asyncio.Task[Any]) -> None:
    """The LLM stops with the user's barge-in, and what it sent last reaches the TTS service
    before the interruption does. An interruption is a system frame and overtakes the text
    frames still on their way: a last piece that reached the service after it stayed in the
    service's text aggregator and was said with the next reply ("ofIs there anything else",
    once in a full run)."""
    feeding.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await feeding
    await asyncio.sleep(0.1)


async def cancelled_turns(server: VoicewsServer) -> float:
    body = (await http_get(server.port, "/metrics"))[2].decode()
    match = re.search(r'^voicews_turns_total\{outcome="cancelled"\} (\S+)$', body, re.M)
    return float(match.group(1)) if match else 0.0


async def test_three_turns_whole_interrupted_whole(server: VoicewsServer) -> None:
    cancelled_before = await cancelled_turns(server)
    async with bot(server.url) as b:
        first, first_token = await b.reply(FIRST)
        await b.downstream.wait_for(lambda: b.downstream.of(TTSStoppedFrame, first))

        # The second reply is interrupted once it has spoken for a while.
        feeding = asyncio.create_task(b.reply(SECOND))
        await b.downstream.wait_for(lambda: len(b.downstream.of(TTSStartedFrame)) == 2)
        second = str(b.downstream.of(TTSStartedFrame)[1][1].context_id)
        await b.downstream.wait_for(lambda: b.seconds(second) > 1.0)
        await llm_stops(feeding)
        await b.worker.queue_frame(InterruptionFrame())
        await b.downstream.wait_for(lambda: b.downstream.of(InterruptionFrame), 5)
        interrupted_at = b.downstream.of(InterruptionFrame)[0][0]  # past the TTS service
        await asyncio.sleep(0.5)
        second_seconds = b.seconds(second)

        third, third_token = await b.reply(THIRD)
        await b.downstream.wait_for(lambda: b.downstream.of(TTSStoppedFrame, third))
        errors = b.upstream.of(ErrorFrame)

    assert not errors, errors
    for context in (first, third):
        frames = b.audio(context)
        assert {f.sample_rate for _, f in frames} == {OUTPUT_RATE}  # the rate asked for
        assert all(f.num_channels == 1 for _, f in frames)
    assert b.seconds(first) > 3.0 and b.seconds(third) > 1.5
    first_audio = b.audio(first)[0][0] - first_token
    third_audio = b.audio(third)[0][0] - third_token
    print(f"first audio through Pipecat: {first_audio * 1000:.0f} / {third_audio * 1000:.0f} ms")

    # Word timestamps on the first turn: its words, in order, on a rising clock.
    words = [f for _, f in b.downstream.of(TTSTextFrame, first)]
    assert " ".join(w.text for w in words).split() == FIRST.split()
    pts = [w.pts for w in words]
    assert all(p is not None for p in pts) and pts == sorted(pts) and pts[0] != pts[-1]

    # The interrupted turn stops: nothing of it arrives after the interruption has passed,
    # far less than the whole reply was spoken, and the server cancelled the turn.
    assert not [at for at, _ in b.audio(second) if at > interrupted_at]
    assert 1.0 < second_seconds < 10.0 and b.seconds(second) == second_seconds
    assert not b.downstream.of(TTSStoppedFrame, second)
    # The server cancelled the turn; and when a token the LLM had already sent reached the
    # service after the interruption (a loaded machine: "goes" in one CI run), the quiet
    # context Pipecat opened for it was dropped too (see the stray-token test below).
    assert 1 <= await cancelled_turns(server) - cancelled_before <= 2


async def test_server_errors_become_error_frames(server: VoicewsServer) -> None:
    async with bot(server.url) as b:
        await b.worker.queue_frame(LLMFullResponseStartFrame())
        await b.worker.queue_frame(LLMTextFrame("word " * 2000))  # over max_turn_text_chars
        await b.worker.queue_frame(LLMFullResponseEndFrame())
        await b.upstream.wait_for(lambda: b.upstream.of(ErrorFrame), 10)
        error = b.upstream.of(ErrorFrame)[0][1]
    assert isinstance(error, ErrorFrame) and "turn_text_too_long" in error.error


async def test_reconnects_after_a_dropped_socket(server: VoicewsServer) -> None:
    async with bot(server.url) as b:
        websocket = b.tts._websocket
        assert websocket is not None
        websocket.transport.abort()  # the network drops the connection
        await b.downstream.wait_for(
            lambda: b.tts._websocket is not None and b.tts._websocket is not websocket, 15
        )
        context, _ = await b.reply(THIRD)
        await b.downstream.wait_for(lambda: b.downstream.of(TTSStoppedFrame, context))
    assert b.seconds(context) > 1.5


async def test_a_stray_token_after_an_interruption_does_not_hold_the_next_reply(
    server: VoicewsServer,
) -> None:
    """A token of the cut reply that reaches the service after the interruption opens a
    context no reply ends; once Pipecat closes it, the next reply is spoken (a CI failure)."""
    async with bot(server.url) as b:
        await b.worker.queue_frame(InterruptionFrame())
        await b.worker.queue_frame(LLMTextFrame("goes"))
        await b.downstream.wait_for(lambda: b.downstream.of(TTSStartedFrame))
        context, _ = await b.reply(THIRD)
        await b.downstream.wait_for(lambda: b.downstream.of(TTSStoppedFrame, context))
    assert b.seconds(context) > 1.5


def test_turn_queue_holds_a_context_until_the_live_turn_is_done() -> None:
    turns = TurnQueue()
    assert turns.text("a", "Hi") == [TurnReset(turn_id="a"), TextDelta(text="Hi")]
    assert turns.end("a") == [EndText()]
    assert turns.end("a") == []  # idempotent
    # The next reply opens before the first has finished speaking: it waits.
    assert turns.text("b", "Next") == []
    assert turns.end("b") == []
    assert turns.done("a", cancelled=False) == [
        TurnReset(turn_id="b"),
        TextDelta(text="Next"),
        EndText(),
    ]
    assert turns.live == "b"


def test_turn_queue_interruption_cancels_the_live_turn_and_drops_waiting_ones() -> None:
    turns = TurnQueue()
    turns.text("a", "Hi")
    turns.text("b", "Later")
    assert turns.drop("b") == []  # only waiting: forgotten
    assert turns.drop("a") == [Cancel()]
    assert turns.live is None
    assert turns.done("a", cancelled=True) == []
    assert not turns.expected("no_active_turn")
    # A cancel that crosses the turn's own end is answered with no_active_turn: expected.
    turns.text("c", "Again")
    assert turns.drop("c") == [Cancel()]
    turns.done("c", cancelled=False)
    assert turns.expected("no_active_turn")
    assert not turns.expected("no_active_turn")
