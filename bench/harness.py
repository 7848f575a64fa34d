"""The benchmark harness: servers as processes, conversations, a simulated player, summaries.

What ``compare.py`` (voicews against wyoming-piper) and ``lanes.py`` (lane counts) share: a
server under test runs as its own process (so its memory and CPU are its own), a
:class:`Connection` speaks one turn to it at a given token rate, and every turn's audio arrival
times go through :func:`play`, a real-time player with a jitter buffer: it starts once the buffer
holds ``jitter_s`` of audio (or the whole turn has arrived), and running dry before the turn's
audio is complete is an underrun, after which it rebuffers the same amount. The parts
(first audio, concurrency sweep, memory) measure any servers given; the summaries pool turns
into the figures the scripts print.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from common import REPLIES

from voicews.client import RealtimeClient, SpokenTurn, word_pieces

STALL_MS = 100.0
"""A conversation with more silence than this after its first audio stalled."""

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

BURST_REPLIES: tuple[str, ...] = (
    "Of course. I checked your account, and the payment went through this morning, so you are "
    "all set for the month.",
    "Let me see. The next train to Boston leaves at a quarter past six, and it takes about "
    "four hours.",
    "That recipe needs two cups of flour, one egg and a pinch of salt. Bake it for twenty minutes.",
    "Sorry about that. I have cancelled the duplicate order, and you will get an email "
    "confirming it shortly.",
    "Your package is at the depot right now. The driver should bring it over between two and "
    "five today.",
    "Sure thing. I added milk, bread and coffee to your list, and set a reminder for Saturday "
    "morning.",
    "The museum is open until eight tonight. Tickets are twelve dollars, and children under "
    "six get in free.",
    "I found three hotels near the beach. The cheapest one has a pool and costs ninety dollars "
    "a night.",
)
"""Replies for the burst scenario (5 to 7 s of speech), held out: no warm-up speaks them."""


# --- one turn, either server ---------------------------------------------------------------


@dataclass
class Check:
    """A goal met (``ok``), missed, or not measured (None), as the benches print it."""

    ok: bool | None
    text: str

    def __str__(self) -> str:
        mark = {True: "ok  ", False: "MISS", None: "??  "}[self.ok]
        return f"  [{mark}] {self.text}"


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


# --- servers, as processes ------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


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

    def environment(self) -> dict[str, str]:
        return dict(os.environ)

    async def connect(self) -> Connection:
        raise NotImplementedError

    async def start(self, timeout: float = 90.0) -> None:
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=self.environment(),
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
    """``voicews serve`` with its defaults; or, to compare versions in one run, the code of
    another checkout (``source``), under its own ``name``, with ``args`` added."""

    name = "voicews"

    def __init__(
        self,
        workdir: Path,
        max_sessions: int,
        name: str | None = None,
        source: Path | None = None,
        args: Sequence[str] = (),
    ) -> None:
        if name is not None:
            self.name = name
        super().__init__(workdir)
        self.max_sessions = max_sessions
        self.source = source
        self.args = list(args)

    def environment(self) -> dict[str, str]:
        env = super().environment()
        if self.source is not None:
            env["PYTHONPATH"] = str(self.source.resolve())
        return env

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
            *self.args,
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
class BurstSummary:
    """One server, N conversations started in the same instant, one reply each, played with
    no jitter buffer: a stall is all the silence a conversation heard after its first audio."""

    n: int
    turns: int
    failed: int
    ttfa_p50_ms: float
    ttfa_p95_ms: float
    max_stall_ms: float
    """The most silence one conversation heard (its stalls added up)."""
    stalled: int
    """Conversations with more than ``STALL_MS`` of silence."""
    end_to_last_p50_ms: float
    cpu_ms_per_audio_s: float
    other_cores: float

    @classmethod
    def of(cls, n: int, turns: Sequence[Turn], cpu_s: float, other_cores: float) -> BurstSummary:
        good = [t for t in turns if t.ok]
        ttfa = [t.ttfa_ms for t in good if t.ttfa_ms is not None]
        stalls = [t.playback.underrun_ms for t in good]
        audio_s = sum(t.audio_s for t in good)
        return cls(
            n=n,
            turns=len(turns),
            failed=len(turns) - len(good),
            ttfa_p50_ms=percentile(ttfa, 50),
            ttfa_p95_ms=percentile(ttfa, 95),
            max_stall_ms=max(stalls, default=math.nan),
            stalled=sum(stall > STALL_MS for stall in stalls),
            end_to_last_p50_ms=percentile(
                [e for t in good if (e := t.end_to_last_ms) is not None], 50
            ),
            cpu_ms_per_audio_s=1000 * cpu_s / audio_s if audio_s else math.nan,
            other_cores=other_cores,
        )

    @property
    def smooth(self) -> bool:
        return self.failed == 0 and self.stalled == 0

    @classmethod
    def median_of(cls, repeats: Sequence[BurstSummary]) -> BurstSummary:
        """Each figure's median over repeated bursts (the counts' too)."""
        first = repeats[0]
        values = {
            key: median([getattr(r, key) for r in repeats]) for key in asdict(first) if key != "n"
        }
        for key in ("turns", "failed", "stalled"):
            values[key] = round(values[key])
        return cls(n=first.n, **values)


def largest_smooth_n(levels: Sequence[BurstSummary]) -> int:
    """The largest N such that it and every smaller N measured had no stall nor failure."""
    best = 0
    for level in sorted(levels, key=lambda s: s.n):
        if not level.smooth:
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


# --- measuring ---------------------------------------------------------------------------------


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


async def burst(
    server: ServerProcess, n: int, rate: float, repeat: int
) -> tuple[BurstSummary, list[Turn]]:
    """N conversations, connected first, each start one reply in the same instant."""
    conns = await asyncio.gather(*(server.connect() for _ in range(n)))
    go = asyncio.Event()

    async def speak(index: int, conn: Connection) -> Turn:
        reply = (index + repeat) % len(BURST_REPLIES)
        turn = Turn(server.name, "burst", rate, reply, repeat, n=n, conversation=index)
        await go.wait()
        return await conn.speak(turn, BURST_REPLIES[reply], rate, 0.0, 120)

    try:
        speaking = [asyncio.create_task(speak(i, conn)) for i, conn in enumerate(conns)]
        await asyncio.sleep(0.3)  # every task waits at the gate
        cpu0, mark = server.cpu_s(), CpuMark.now([server])
        go.set()
        turns = await asyncio.gather(*speaking)
        cpu = server.cpu_s() - cpu0
        other = mark.other_cores(CpuMark.now([server]))
    finally:
        await asyncio.gather(*(conn.close() for conn in conns))
    return BurstSummary.of(n, turns, cpu, other), list(turns)


async def measure_bursts(
    servers: Sequence[ServerProcess], ns: Sequence[int], rate: float, repeats: int
) -> tuple[dict[str, list[BurstSummary]], list[Turn]]:
    """Each N on each server in turn (alternating which goes first), ``repeats`` times; the
    median of each figure over the repeats. A server stops after an N where every repeat had
    a failed turn or first audio p95 over ``STOP_TTFA_P95_MS``."""
    levels: dict[str, list[BurstSummary]] = {s.name: [] for s in servers}
    stopped: set[str] = set()
    all_turns: list[Turn] = []
    for n in ns:
        runs: dict[str, list[BurstSummary]] = {s.name: [] for s in servers}
        for repeat in range(repeats):
            order = list(servers) if repeat % 2 == 0 else list(servers)[::-1]
            for server in order:
                if server.name in stopped:
                    continue
                summary, turns = await burst(server, n, rate, repeat)
                runs[server.name].append(summary)
                all_turns += turns
                await asyncio.sleep(1.0)
        for server in servers:
            if server.name in stopped:
                continue
            level = BurstSummary.median_of(runs[server.name])
            levels[server.name].append(level)
            log(
                f"  burst {server.name:>13} N={n:<3} first audio p95 {level.ttfa_p95_ms:6.0f} "
                f"ms, max stall {level.max_stall_ms:6.0f} ms, {level.stalled}/{n} stalled, "
                f"cpu {level.cpu_ms_per_audio_s:4.0f} ms/audio s, "
                f"other processes {level.other_cores:.1f} cores"
            )
            if all(r.failed or r.ttfa_p95_ms > STOP_TTFA_P95_MS for r in runs[server.name]):
                stopped.add(server.name)
                log(f"  burst {server.name}: stopped after N={n}")
        if len(stopped) == len(servers):
            break
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


def int_list(text: str) -> list[int]:
    values = sorted({int(v) for v in text.split(",") if v.strip()})
    if not values or values[0] < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers like 1,2,4: {text!r}")
    return values
