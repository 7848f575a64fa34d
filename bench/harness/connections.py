"""One turn spoken to either server, and what a real-time listener makes of its audio.

A :class:`Connection` speaks one turn to a server at a given token rate, and every turn's audio
arrival times go through :func:`play`, a real-time player with a jitter buffer: it starts once
the buffer holds ``jitter_s`` of audio (or the whole turn has arrived), and running dry before
the turn's audio is complete is an underrun, after which it rebuffers the same amount.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from voicews.client import RealtimeClient, SpokenTurn, word_pieces

Pieces = Callable[[str], list[str]]
"""How a reply is cut into the deltas sent at the token rate (``word_pieces`` by default)."""


@dataclass
class Playback:
    """What the simulated player did with one turn's audio; seconds from the first delta."""

    start_s: float | None = None
    end_s: float | None = None
    underruns: int = 0
    underrun_ms: float = 0.0
    longest_stall_ms: float = 0.0
    min_buffer_ms: float | None = None
    """The least audio left in the buffer when more arrived after a pause while playing (0: it
    ran dry): the turn's margin against a late segment. None if it never waited for audio."""


BURST_GAP_S = 0.01
"""Audio arriving within this of the previous audio is part of the same burst (segment)."""


def play(arrivals: Sequence[tuple[float, float]], jitter_s: float) -> Playback:
    """Simulate a real-time player with a jitter buffer over ``(arrival time, seconds)``.

    It starts once ``jitter_s`` of audio is buffered (or the last audio has arrived) and plays
    in real time; running dry while more audio is still to come is an underrun, after which it
    rebuffers ``jitter_s`` (or up to the last audio) before playing again.
    """
    out = Playback()
    buffered, playing, clock, dry_at = 0.0, False, 0.0, 0.0
    last = len(arrivals) - 1
    for index, (at, seconds) in enumerate(arrivals):
        if playing:
            left = max(0.0, buffered - (at - clock)) * 1000
            if at - clock >= BURST_GAP_S or left == 0.0:  # within a burst it says nothing
                known = math.inf if out.min_buffer_ms is None else out.min_buffer_ms
                out.min_buffer_ms = min(left, known)
            if buffered < at - clock - 1e-6:
                dry_at, buffered, playing = clock + buffered, 0.0, False
                out.underruns += 1
            else:
                buffered -= at - clock
        clock = at
        buffered += seconds
        if not playing and (buffered >= jitter_s - 1e-9 or index == last):
            playing = True
            if out.start_s is None:
                out.start_s = at
            else:
                stall_ms = (at - dry_at) * 1000
                out.underrun_ms += stall_ms
                out.longest_stall_ms = max(out.longest_stall_ms, stall_ms)
    if arrivals:
        out.end_s = clock + buffered
    return out


@dataclass
class Turn:
    """One spoken turn with client-side timings (seconds, ``time.perf_counter``)."""

    server: str
    part: str  # "ttfa", "sweep", "burst" or "memory"
    rate: float
    reply: int
    repeat: int = 0
    n: int = 1
    conversation: int = 0
    sample_rate: int = 22050
    first_delta_at: float | None = None
    end_text_at: float | None = None
    done_at: float | None = None
    arrival_s: list[float] = field(default_factory=list)  # from the first delta
    arrival_samples: list[int] = field(default_factory=list)
    segments: list[str] = field(default_factory=list)  # voicews: texts; peer: its sentences
    segment_starts: list[int] = field(default_factory=list)  # each segment's first sample
    segment_spoken: list[str] = field(default_factory=list)  # what was synthesized for each
    errors: list[str] = field(default_factory=list)
    playback: Playback = field(default_factory=Playback)
    keep_audio: bool = False
    """Keep the turn's audio in ``pcm`` (16-bit little-endian, mono): off for load tests."""
    pcm: bytes = field(default=b"", repr=False)

    def finish(self, times: Sequence[float], samples: Sequence[int], jitter_s: float) -> None:
        origin = self.first_delta_at or 0.0
        self.arrival_s = [t - origin for t in times]
        self.arrival_samples = list(samples)
        self.playback = self.replay(jitter_s)

    def replay(self, jitter_s: float) -> Playback:
        """The same arrivals through a player with another jitter buffer."""
        seconds = [n / self.sample_rate for n in self.arrival_samples]
        return play(list(zip(self.arrival_s, seconds, strict=True)), jitter_s)

    @property
    def ok(self) -> bool:
        return not self.errors and self.done_at is not None and bool(self.arrival_s)

    @property
    def ttfa_ms(self) -> float | None:
        return self.arrival_s[0] * 1000 if self.arrival_s else None

    @property
    def end_to_last_ms(self) -> float | None:
        if not self.arrival_s or self.end_text_at is None or self.first_delta_at is None:
            return None
        return (self.arrival_s[-1] - (self.end_text_at - self.first_delta_at)) * 1000

    @property
    def audio_s(self) -> float:
        return sum(self.arrival_samples) / self.sample_rate

    def record(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(ttfa_ms=self.ttfa_ms, end_to_last_ms=self.end_to_last_ms, audio_s=self.audio_s)
        for key in ("first_delta_at", "end_text_at", "done_at", "keep_audio", "pcm"):
            out.pop(key)
        out["end_text_s"] = (
            None
            if self.end_text_at is None or self.first_delta_at is None
            else self.end_text_at - self.first_delta_at
        )
        out["arrival_s"] = [round(t, 5) for t in self.arrival_s]
        return out


async def feed(
    turn: Turn, deltas: Sequence[str], rate: float | None, send: Callable[[str], Awaitable[None]]
) -> None:
    """Send ``deltas`` at ``rate`` per second (all at once if None); the same for both servers."""
    interval = 1.0 / rate if rate else 0.0
    start = time.perf_counter()
    for index, delta in enumerate(deltas):
        if interval:
            await asyncio.sleep(max(0.0, start + index * interval - time.perf_counter()))
        if turn.first_delta_at is None:
            turn.first_delta_at = time.perf_counter()
        await send(delta)
    turn.end_text_at = time.perf_counter()
    if turn.first_delta_at is None:
        turn.first_delta_at = turn.end_text_at


class Connection:
    """One conversation with one server: a WebSocket session or a Wyoming TCP connection."""

    async def speak(
        self,
        turn: Turn,
        text: str,
        rate: float | None,
        jitter_s: float,
        timeout: float,
        pieces: Pieces = word_pieces,
    ) -> Turn:
        """Stream ``text`` cut by ``pieces`` at ``rate`` deltas per second (whole if None)."""
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError


class VoicewsConnection(Connection):
    def __init__(self, client: RealtimeClient) -> None:
        self.client = client

    async def speak(
        self,
        turn: Turn,
        text: str,
        rate: float | None,
        jitter_s: float,
        timeout: float,
        pieces: Pieces = word_pieces,
    ) -> Turn:
        client = self.client
        turn.sample_rate = client.sample_rate
        spoken = SpokenTurn(uuid.uuid4().hex[:12], client.sample_rate)
        await client.turn_reset(spoken.turn_id)

        async def send_all() -> None:
            await feed(turn, pieces(text) if rate else [text], rate, client.text_delta)
            await client.end_text()

        sender = asyncio.create_task(send_all())
        try:
            await asyncio.wait_for(client.collect(spoken), timeout)
            await sender
        except Exception as exc:  # a failed turn is a result, not a crash
            turn.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            sender.cancel()
        turn.errors += [f"{e.code}: {e.message}" for e in spoken.errors]
        turn.done_at = spoken.done_at
        turn.segments = [segment.text for segment in spoken.segments]
        turn.segment_starts = [segment.start_sample for segment in spoken.segments]
        turn.segment_spoken = [segment.spoken or segment.text for segment in spoken.segments]
        if turn.keep_audio and spoken.format == "pcm_s16le":
            turn.pcm = bytes(spoken.pcm)
        if spoken.done is not None and spoken.done.cancelled:
            turn.errors.append("cancelled")
        turn.finish(spoken.frame_times, [f.samples for f in spoken.frames], jitter_s)
        return turn

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.client.ws.close()
