"""Async Python client for the realtime endpoint, used by ``voicews say``, tests and bench.

>>> async with await RealtimeClient.connect("ws://127.0.0.1:8765/v1/realtime") as client:
...     turn = await client.speak("Hello there, how can I help?")
...     turn.write_wav("hello.wav")
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
import wave
from collections.abc import AsyncIterable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import numpy as np
from websockets.asyncio.client import ClientConnection, connect

from .audio import Audio, to_pcm16
from .core.listener import ListenerClock
from .encoding import OpusDecoder, decode_pcm
from .protocol import (
    AudioFormat,
    AudioFrame,
    AudioUpdate,
    Cancel,
    CloseContext,
    Encoding,
    EndText,
    Error,
    Playback,
    SegmentStarted,
    ServerEvent,
    SessionCreated,
    SessionUpdate,
    SessionUpdated,
    TextDelta,
    TurnDone,
    TurnReset,
    WordMark,
    Words,
    decode_frame,
    encode_event,
    parse_server_event,
)

Received = ServerEvent | AudioFrame
_PIECE = re.compile(r"\s*[A-Za-z]+|\s*\d|\s*[^\sA-Za-z\d]+|\s+")


def word_pieces(text: str, max_len: int = 6) -> list[str]:
    """Split text roughly as an LLM tokenizer streams it: ``" Hel" "lo" ","`` and so on."""
    pieces: list[str] = []
    for match in _PIECE.finditer(text):
        token = match.group()
        while len(token) > max_len:
            pieces.append(token[:4])
            token = token[4:]
        pieces.append(token)
    return pieces


@dataclass
class SpokenTurn:
    """Everything the server sent for one turn, with client-side timings; ``pcm`` holds the
    frames' bytes in the turn's ``format``."""

    turn_id: str
    sample_rate: int
    format: Encoding = "pcm_s16le"
    pcm: bytearray = field(default_factory=bytearray)
    frames: list[AudioFrame] = field(default_factory=list)
    frame_times: list[float] = field(default_factory=list)
    segments: list[SegmentStarted] = field(default_factory=list)
    words: list[WordMark] = field(default_factory=list)
    errors: list[Error] = field(default_factory=list)
    done: TurnDone | None = None
    first_delta_at: float | None = None
    end_text_at: float | None = None
    done_at: float | None = None

    @property
    def samples(self) -> int:
        return sum(frame.samples for frame in self.frames)

    @property
    def duration(self) -> float:
        return self.samples / self.sample_rate

    @property
    def first_audio(self) -> float | None:
        """Seconds from the first text delta sent to the first audio frame received."""
        if not self.frame_times or self.first_delta_at is None:
            return None
        return self.frame_times[0] - self.first_delta_at

    def stall(self) -> float:
        """Silence a listener who starts at the first frame and plays in real time hears."""
        listener = ListenerClock(self.sample_rate)
        return sum(
            listener.add(frame.samples, at)
            for at, frame in zip(self.frame_times, self.frames, strict=True)
        )

    def audio(self) -> Audio:
        """The turn's audio decoded to float32 at ``sample_rate``."""
        if self.format != "opus":
            return decode_pcm(bytes(self.pcm), self.format)
        decoder = OpusDecoder()
        decoded = [decoder.decode(frame.pcm) for frame in self.frames]
        return np.concatenate(decoded) if decoded else np.zeros(0, np.float32)

    def write_wav(self, path: str | Path) -> None:
        pcm = bytes(self.pcm) if self.format == "pcm_s16le" else to_pcm16(self.audio())
        with wave.open(str(path), "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(self.sample_rate)
            out.writeframes(pcm)


class RealtimeClient:
    def __init__(self, ws: ClientConnection, created: SessionCreated) -> None:
        self.ws = ws
        self.created = created
        self.audio: AudioFormat = created.audio
        """The format of turns started from now on (``session_updated`` changes it)."""

    @classmethod
    async def connect(cls, url: str, **kwargs: Any) -> RealtimeClient:
        ws = await connect(url, **kwargs)
        first = await ws.recv()
        created = parse_server_event(str(first))
        if not isinstance(created, SessionCreated):
            await ws.close()
            raise RuntimeError(f"expected session_created, got {created!r}")
        return cls(ws, created)

    async def __aenter__(self) -> RealtimeClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.ws.close()

    @property
    def sample_rate(self) -> int:
        return self.audio.sample_rate

    async def turn_reset(self, turn_id: str, context_id: str | None = None) -> None:
        """Start a turn; in ``context_id``, opened by it if new, beside the others."""
        await self.ws.send(encode_event(TurnReset(turn_id=turn_id, context_id=context_id)))

    async def text_delta(self, text: str, context_id: str | None = None) -> None:
        await self.ws.send(encode_event(TextDelta(text=text, context_id=context_id)))

    async def end_text(self, context_id: str | None = None) -> None:
        await self.ws.send(encode_event(EndText(context_id=context_id)))

    async def close_context(self, context_id: str) -> None:
        """Close a context now: its live turn is cut and its queued audio dropped."""
        await self.ws.send(encode_event(CloseContext(context_id=context_id)))

    async def cancel(self) -> None:
        """Stop the live turn now; its turn_done (cancelled) says what was heard."""
        await self.ws.send(encode_event(Cancel()))

    async def session_update(
        self,
        speed: float | None = None,
        audio: AudioUpdate | None = None,
        voice: str | None = None,
        normalization: Literal["auto", "off"] | None = None,
        locale: Literal["en-US", "en-GB"] | None = None,
        lexicon: dict[str, str] | None = None,
        context_idle_s: float | None = None,
    ) -> None:
        """Voice options and reading from the next segment, the audio format from the next
        turn; ``voice``: one of ``created.voices``; ``context_idle_s``: how long an idle
        context stays open."""
        update = SessionUpdate(
            speed=speed,
            voice=voice,
            audio=audio,
            normalization=normalization,
            locale=locale,
            lexicon=lexicon,
            context_idle_s=context_idle_s,
        )
        await self.ws.send(encode_event(update))

    async def playback(self, turn_id: str, samples_played: int) -> None:
        """Tell the server how far the player got, so a cut turn reports what was heard."""
        await self.ws.send(encode_event(Playback(turn_id=turn_id, samples_played=samples_played)))

    async def recv(self, timeout: float | None = None) -> Received:
        """The next frame or event; event types newer than this client are skipped."""
        while True:
            data = await asyncio.wait_for(self.ws.recv(), timeout)
            if isinstance(data, bytes):
                return decode_frame(data)
            event = parse_server_event(data)
            if isinstance(event, SessionUpdated):
                self.audio = event.audio
            if event is not None:
                return event

    async def speak(
        self,
        text: str | Iterable[str] | AsyncIterable[str],
        turn_id: str | None = None,
        tokens_per_s: float | None = None,
        timeout: float = 60.0,
    ) -> SpokenTurn:
        """Run one whole turn: reset, stream the deltas, end, and collect until turn_done.

        A plain string is sent as one delta, or as word pieces at ``tokens_per_s``.
        """
        turn = self.new_turn(turn_id or uuid.uuid4().hex[:12])
        if isinstance(text, str):
            text = word_pieces(text) if tokens_per_s else [text]
        await self.turn_reset(turn.turn_id)
        sender = asyncio.create_task(self._send_deltas(turn, text, tokens_per_s))
        try:
            await asyncio.wait_for(self.collect(turn), timeout)
        finally:
            if not sender.done():
                sender.cancel()
        await sender
        return turn

    def new_turn(self, turn_id: str) -> SpokenTurn:
        """A record for a turn started now, in the format in force."""
        return SpokenTurn(turn_id, self.audio.sample_rate, self.audio.format)

    async def collect(self, turn: SpokenTurn) -> SpokenTurn:
        """Receive until ``turn_done`` for ``turn``; audio of other turns is dropped."""
        while turn.done is None:
            item = await self.recv()
            match item:
                case AudioFrame() if item.turn_id == turn.turn_id:
                    turn.frame_times.append(time.perf_counter())
                    turn.frames.append(item)
                    turn.pcm += item.pcm
                case SegmentStarted() if item.turn_id == turn.turn_id:
                    turn.segments.append(item)
                case Words() if item.turn_id == turn.turn_id:
                    turn.words += item.words
                case Error():
                    turn.errors.append(item)
                case TurnDone() if item.turn_id == turn.turn_id:
                    turn.done, turn.done_at = item, time.perf_counter()
        return turn

    async def _send_deltas(
        self,
        turn: SpokenTurn,
        deltas: Iterable[str] | AsyncIterable[str],
        tokens_per_s: float | None,
    ) -> None:
        interval = 1.0 / tokens_per_s if tokens_per_s else 0.0
        start = time.perf_counter()
        sent = 0

        async def send(delta: str) -> None:
            nonlocal sent
            if interval:
                await asyncio.sleep(max(0.0, start + sent * interval - time.perf_counter()))
            if turn.first_delta_at is None:
                turn.first_delta_at = time.perf_counter()
            await self.text_delta(delta)
            sent += 1

        if isinstance(deltas, AsyncIterable):
            async for delta in deltas:
                await send(delta)
        else:
            for delta in deltas:
                await send(delta)
        turn.end_text_at = time.perf_counter()
        if turn.first_delta_at is None:
            turn.first_delta_at = turn.end_text_at
        await self.end_text()
