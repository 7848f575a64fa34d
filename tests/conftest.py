"""Fixtures: a real voicews server on a free loopback port, speaking with the bundled voice."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest

from voicews import heap
from voicews.audio import Audio
from voicews.client import RealtimeClient
from voicews.core.config import SessionConfig
from voicews.engines.base import Engine, SynthesisOptions, WordStarts
from voicews.server import ServerConfig, VoicewsServer

# Slow machines: VOICEWS_TIMEOUT_SCALE=3 triples every wait in the suite.
TIMEOUT_SCALE = float(os.environ.get("VOICEWS_TIMEOUT_SCALE", "1"))


def timeout(seconds: float) -> float:
    return seconds * TIMEOUT_SCALE


def rms_db(audio: Audio) -> float:
    """A clip's loudness: its RMS in dB."""
    return float(20 * np.log10(np.sqrt(np.mean(np.square(audio, dtype=np.float64)))))


def free_port() -> int:
    """A loopback port nobody listens on now, for a server in another process."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# Small socket buffers so a slow reader's backlog reaches the session queue within seconds.
TEST_CONFIG = ServerConfig(
    port=0,
    socket_send_buffer=32 * 1024,
    session=replace(SessionConfig(), max_pending_text_chars=2_000, max_turn_text_chars=8_000),
)


@dataclass(frozen=True)
class Resources:
    """What a process holds. ``heap`` is the Python heap (numpy buffers included) allocated since
    the probe started and still alive: what our code keeps. RSS also counts native allocator
    arenas that glibc and onnxruntime keep after a peak, so it is reported, and bounded loosely.
    ``descriptors``: what each open file descriptor refers to (a socket or pipe by its inode)."""

    heap: int
    rss: int
    tasks: int
    threads: int
    descriptors: tuple[str, ...]

    @property
    def fds(self) -> int:
        return len(self.descriptors)

    def opened_since(self, earlier: Resources) -> list[str]:
        """Descriptors open now that were not open at ``earlier``: what a leak leaves. One
        that something else in the process closed meanwhile (an earlier test's object, at
        its own time) is not a leak, and a count would take it for one fewer."""
        return sorted((Counter(self.descriptors) - Counter(earlier.descriptors)).elements())

    def __str__(self) -> str:
        return (
            f"heap {self.heap / 2**20:.2f} MiB, RSS {self.rss / 2**20:.1f} MiB, fds {self.fds}, "
            f"tasks {self.tasks}, threads {self.threads}"
        )


# How far RSS may step while the Python heap stays flat: onnxruntime's CPU arena grows by
# doubling for a larger shape than any before (steps of 15-33 MiB seen here, and now and then
# one of 100-140 MiB: test_soak allows that once), and keeps it.
ARENA_SLACK = 64 * 2**20


def rss_now() -> int:
    """Resident bytes as they are: no collection, no trim, so what the allocators keep counts."""
    return rss_of(os.getpid())


def rss_of(pid: int) -> int:
    """A process's resident bytes, as they are."""
    with open(f"/proc/{pid}/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


SERVE = [sys.executable, "-m", "voicews.cli", "serve", "--host", "127.0.0.1", "--port", "0"]
"""``voicews serve`` on loopback; port 0: it binds a free one and prints it (``LISTENING``)."""
LISTENING = re.compile(r"voicews: listening on ws://127\.0\.0\.1:(\d+)/")
"""What ``voicews serve`` prints once it listens, with the port it bound."""


@contextmanager
def serving(log: Path, *args: str) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """``voicews serve`` in a process of its own on a free loopback port (its output in
    ``log``), so what it holds is its own: the process and its port; SIGTERM after."""
    with log.open("wb") as out:
        process = subprocess.Popen([*SERVE, *args], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout(30)
        while (found := LISTENING.search(log.read_text(errors="replace"))) is None:
            assert process.poll() is None, f"voicews exited:\n{log.read_text(errors='replace')}"
            assert time.monotonic() < deadline, "voicews did not start"
            time.sleep(0.05)
        yield process, int(found[1])
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout(15))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def resources() -> Resources:
    """What the process holds: collected, and glibc's free pages given back (``heap.trim``),
    so RSS shows what is held, not what earlier tests' allocations left fragmented (in a full
    run the soak's RSS stepped 46 then 70 MiB with the Python heap flat, against 7 and 2 MiB
    run alone)."""
    gc.collect()
    heap.trim()
    rss = rss_now()
    descriptors = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own, closed by now
            descriptors.append(os.readlink(f"/proc/self/fd/{fd}"))
    return Resources(
        heap=tracemalloc.get_traced_memory()[0] if tracemalloc.is_tracing() else 0,
        rss=rss,
        tasks=len(asyncio.all_tasks()),
        threads=threading.active_count(),
        descriptors=tuple(descriptors),
    )


@contextmanager
def tracing_heap() -> Iterator[None]:
    """Trace Python allocations inside the block, so ``resources().heap`` counts what it keeps."""
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()


async def http_get(port: int, path: str) -> tuple[int, str, bytes]:
    """A plain GET on loopback: status, content type, body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
    data = await asyncio.wait_for(reader.read(), timeout(5))
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    content_type = re.search(rb"(?i)content-type: ([^\r]+)", head)
    return int(head.split()[1]), content_type.group(1).decode() if content_type else "", body


@asynccontextmanager
async def running(config: ServerConfig = TEST_CONFIG, **kw: object) -> AsyncIterator[VoicewsServer]:
    """A server of its own, for tests that need other limits (or another engine)."""
    srv = VoicewsServer(config, **kw)  # type: ignore[arg-type]
    await srv.start()
    try:
        yield srv
    finally:
        await srv.close()


def with_session(**changes: object) -> ServerConfig:
    return replace(TEST_CONFIG, session=replace(TEST_CONFIG.session, **changes))  # type: ignore[arg-type]


@pytest.fixture(scope="session")
async def server() -> AsyncIterator[VoicewsServer]:
    async with running() as srv:
        yield srv


@pytest.fixture
async def client(server: VoicewsServer) -> AsyncIterator[RealtimeClient]:
    async with await RealtimeClient.connect(server.url) as c:
        yield c


class FailsOnMarker:
    """The real Piper engine with one injected fault (text containing "explode" raises):
    the only way to make synthesis fail on demand."""

    name = "piper-faulty"

    def __init__(self, inner: Engine) -> None:
        self.inner = inner
        self.sample_rate, self.concurrent = inner.sample_rate, inner.concurrent
        self.device = inner.device

    def synthesize(self, text: str, options: SynthesisOptions) -> Iterator[Audio | WordStarts]:
        if "explode" in text:
            raise RuntimeError("injected engine fault")
        return self.inner.synthesize(text, options)


def side_by_side(run: Callable[[], np.ndarray], threads: int, runs: int) -> list[np.ndarray]:
    """What ``run`` gives from ``threads`` threads started together, ``runs`` times each:
    inferences side by side, to compare with one alone."""
    results: list[np.ndarray] = []
    start = threading.Barrier(threads)

    def lane() -> None:
        start.wait()
        for _ in range(runs):
            results.append(run())

    workers = [threading.Thread(target=lane) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return results
