"""Servers under test, each in its own process so its memory and CPU are its own.

voicews (its defaults, another checkout's code, or other ``serve`` arguments) here; the peer,
wyoming-piper, in ``bench/peer.py``. :class:`CpuMark` tells how busy the rest of the machine
was meanwhile, since every figure is only as good as the machine is quiet.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.harness.connections import Connection, VoicewsConnection
from voicews.client import RealtimeClient


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
        return proc_cpu_s(f"/proc/{self.pid}/stat")

    def loop_cpu_s(self) -> float:
        """CPU seconds of the process's main thread: its event loop (the compute lanes and
        onnxruntime's pool are threads of their own). The part of the host's work that one
        Python process cannot spread over more cores."""
        return proc_cpu_s(f"/proc/{self.pid}/task/{self.pid}/stat")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def proc_cpu_s(path: str) -> float:
    with open(path) as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_if_alive(path: str) -> float:
    try:
        return proc_cpu_s(path)
    except OSError:
        return 0.0


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
        ours = sum(s.cpu_s() for s in servers) + proc_cpu_s("/proc/self/stat")
        return cls(time.perf_counter(), _system_busy_s(), ours)

    def other_cores(self, later: CpuMark) -> float:
        """Cores busy on average with anything else (other processes sharing the machine)."""
        wall = later.at - self.at
        other = (later.busy_s - self.busy_s) - (later.ours_s - self.ours_s)
        return max(0.0, other / wall) if wall > 0 else math.nan


PHRASE_CACHE = "--phrase-cache-seconds"


class VoicewsProcess(ServerProcess):
    """``voicews serve`` with its defaults; or, to compare versions in one run, the code of
    another checkout (``source``), under its own ``name``, with ``args`` added. The phrase
    cache is off unless ``args`` set it: the benches say the same replies again by design (each
    at every rate, each burst's), which it would replay, where an agent's replies repeat only
    their openers (``python -m bench kokoro_ab`` measures it on and off)."""

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

    def pids(self) -> list[int]:
        """The server's process and its descendants (``--fronts``' front processes)."""
        pids, index = [self.pid], 0
        while index < len(pids):
            pid, index = pids[index], index + 1
            try:
                for task in os.listdir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{task}/children") as children:
                        pids += [int(child) for child in children.read().split()]
            except OSError:  # gone meanwhile
                continue
        return pids

    def cpu_s(self) -> float:
        """CPU seconds of every process of the server's (one, or ``--fronts``' and the
        engine's)."""
        return sum(_cpu_if_alive(f"/proc/{pid}/stat") for pid in self.pids())

    def loop_cpu_s(self) -> float:
        """CPU seconds of each process's main thread: the event loop, or with ``--fronts`` the
        fronts' event loops (the engine's process's main thread then only waits)."""
        return sum(_cpu_if_alive(f"/proc/{pid}/task/{pid}/stat") for pid in self.pids())

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
            *self._cache_off(),
            *self.args,
        ]

    def _cache_off(self) -> list[str]:
        """``PHRASE_CACHE`` 0, unless ``args`` set it or the code has none."""
        cli = (self.source or Path(__file__).parents[2]) / "voicews" / "cli.py"
        known = cli.exists() and PHRASE_CACHE in cli.read_text()
        return [PHRASE_CACHE, "0"] if known and PHRASE_CACHE not in self.args else []

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


def servers_under_test(
    workdir: Path,
    sessions: int,
    baselines: Sequence[Path] = (),
    variants: Sequence[str] = (),
    peer: bool = True,
    serve_args: Sequence[str] = (),
) -> list[ServerProcess]:
    """voicews; the voicews of other checkouts (``voicews@DIR``) and of this one with other
    ``serve`` arguments (``NAME=ARGS``), for A/B runs in the same conditions; the peer last."""
    out: list[ServerProcess] = [VoicewsProcess(workdir, sessions, args=serve_args)]
    for baseline in baselines:
        name = f"{VoicewsProcess.name}@{baseline.resolve().name}"
        out.append(VoicewsProcess(workdir, sessions, name, source=baseline, args=serve_args))
    for variant in variants:
        name, _, serve_args = variant.partition("=")
        out.append(VoicewsProcess(workdir, sessions, name, args=shlex.split(serve_args)))
    if peer:
        from bench.peer import WyomingProcess  # it builds on this module

        out.append(WyomingProcess(workdir))
    return out
