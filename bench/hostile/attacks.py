"""A calm session beside each hostile client of ``clients.py``: this checkout against a
baseline checkout, side by side in one run.

For each attack and each source, a fresh ``voicews serve`` (its own process, the source's code
on ``PYTHONPATH``) takes the attack; half a second in, a calm session streams an agent-like
reply at 20 tokens/s. Printed per attack and source, medians over ``--repeats``: the calm
session's first audio and stall (silence after its first audio, as a real-time listener hears
it), the server's peak RSS, and the session slots still held two seconds after the attackers
are gone. The attacking clients always run this checkout's ``clients.py``.

    python -m bench attacks                                   # this checkout only
    python -m bench attacks --baseline /tmp/voicews-main      # side by side with another
    python -m bench attacks --attacks none,flood,cjk --repeats 3
    python -m bench attacks --heavy                           # also the multi-GB ones
    python -m bench attacks --memory                          # RSS over the abuse family

``--heavy`` adds the attacks that took an unfixed server past 4 GB (issue 15.3's 3,200-char
URL reached 11.9 GB): only on a machine with the memory to spare.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from bench.common import source_version
from bench.hostile import clients as hostile
from bench.hostile.clients import Calm, alongside

HOST = "127.0.0.1"
Attack = Callable[[int, str], Awaitable[object]]


def _many(count: int, make: Callable[[int, str], Awaitable[object]]) -> Attack:
    async def run(port: int, url: str) -> object:
        return await asyncio.gather(*(make(port, url) for _ in range(count)))

    return run


async def _nothing(port: int, url: str) -> None:
    pass


@dataclass(frozen=True)
class Case:
    issue: str
    attack: Attack
    max_sessions: int = 64
    heavy: bool = False


CASES: dict[str, Case] = {
    "none": Case("-", _nothing),
    "flood": Case("10.1", _many(4, lambda p, u: hostile.flood_then_reset(HOST, p, 10_000, 3))),
    "slow-body": Case(
        "10.2", _many(4, lambda p, u: hostile.slow_body(HOST, p, 1000, 1.0, 15)), max_sessions=4
    ),
    "cjk": Case("10.3", lambda p, u: hostile.speak(u, "你好" * 125)),
    "cjk-slow": Case("10.3", lambda p, u: hostile.speak(u, "你好" * 125, 0.5), heavy=True),
    "storm": Case("10.4", lambda p, u: hostile.barge_in_storm(u, 10, 60)),
    "storm-x4": Case("10.4", _many(4, lambda p, u: hostile.barge_in_storm(u, 10, 60))),
    "ping-flood": Case("10.5", lambda p, u: hostile.ping_flood(HOST, p, 63, 10)),
    "idle": Case(
        "10.7",
        lambda p, u: asyncio.gather(
            *(hostile.silent(HOST, p, 15) for _ in range(16)),
            *(hostile.slow_head(HOST, p, 1.0, 15) for _ in range(16)),
        ),
    ),
    "url-1000": Case("15.3", lambda p, u: hostile.speak(u, "https://example.com/" + "a/" * 490)),
    "url-3200": Case("15.3", lambda p, u: hostile.speak(u, hostile.LONG_URL), heavy=True),
    "word": Case("15.3", lambda p, u: hostile.speak(u, "a" * 4000)),
    "digits": Case("15.3", lambda p, u: hostile.speak(u, "7" * 3600), heavy=True),
    "http-load": Case("15.4", lambda p, u: hostile.http_speech_load(HOST, p, 32)),
    "updates-x4": Case("32.4", _many(4, lambda p, u: hostile.update_storm(u, 10, 100))),
    "exhaust": Case("32.1", lambda p, u: hostile.exhaust(HOST, p, 600, 20)),
}

ABUSE = ("storm", "storm-x4", "cjk", "url-1000", "word", "updates-x4")
"""The session-abuse family (issue 32.4): turn storms, long inputs, many session_updates."""


class Server:
    """``voicews serve`` from ``source`` on a free port."""

    def __init__(self, source: Path, max_sessions: int) -> None:
        self.source, self.max_sessions = source, max_sessions
        self.proc: asyncio.subprocess.Process | None = None
        self.port = 0

    async def __aenter__(self) -> Server:
        env = {**os.environ, "PYTHONPATH": str(self.source)}
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "voicews.cli", "serve", "--port", "0",
            "--max-sessions", str(self.max_sessions), "--drain-timeout", "1",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, env=env,
        )  # fmt: skip
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), 60)
        self.port = int(line.decode().rsplit(":", 1)[1].split("/")[0])
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            self.proc.terminate()
        try:
            await asyncio.wait_for(self.proc.wait(), 15)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()

    @property
    def url(self) -> str:
        return f"ws://{HOST}:{self.port}/v1/realtime"

    def peak_rss_mib(self) -> float:
        return self._status_mib("VmHWM")

    def rss_mib(self) -> float:
        return self._status_mib("VmRSS")

    def _status_mib(self, field: str) -> float:
        assert self.proc is not None
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        kib = next(line.split()[1] for line in status.splitlines() if line.startswith(field))
        return int(kib) / 1024

    async def sessions(self) -> float:
        answer = await hostile.raw_request(
            HOST, self.port, b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
        )
        for line in answer.decode().splitlines():
            if line.startswith("voicews_sessions_active "):
                return float(line.split()[1])
        return float("nan")


@dataclass
class Run:
    calm: Calm | None  # None: the calm session was refused or failed
    peak_rss_mib: float
    held_after: float
    seconds: float


async def run_once(source: Path, case: Case) -> Run:
    async with Server(source, case.max_sessions) as server:
        await hostile.calm_turn(server.url, "Warm up.")  # the voice loaded, the arena seeded
        start = time.perf_counter()
        try:
            calm, _ = await alongside(server.url, case.attack(server.port, server.url))
        except Exception as exc:  # refused (503) or cut: the point of some attacks
            print(f"    calm session failed: {type(exc).__name__}: {exc}", flush=True)
            calm = None
        seconds = time.perf_counter() - start
        await asyncio.sleep(2)
        return Run(calm, server.peak_rss_mib(), await server.sessions(), seconds)


def summary(runs: list[Run]) -> list[str]:
    calm = [r.calm for r in runs if r.calm is not None]
    refused = len(runs) - len(calm)

    def ms(values: list[float]) -> str:
        return f"{statistics.median(values) * 1000:.0f} ms" if values else "-"

    return [
        ms([c.first_audio for c in calm]) + (f" ({refused} failed)" if refused else ""),
        ms([c.stall for c in calm]),
        f"{statistics.median(r.peak_rss_mib for r in runs):.0f} MiB",
        f"{statistics.median(r.held_after for r in runs):.0f}",
        f"{statistics.median(r.seconds for r in runs):.0f} s",
    ]


async def memory(source: Path, settle: float) -> list[str]:
    """The whole session-abuse family, one attack after another, each with a calm session
    alongside: RSS once warm, its peak, and ``settle`` seconds after the last attacker left."""
    async with Server(source, 64) as server:
        await hostile.calm_turn(server.url, "Warm up.")
        before = server.rss_mib()
        for name in ABUSE:
            await alongside(server.url, CASES[name].attack(server.port, server.url))
        left = server.rss_mib()
        await asyncio.sleep(settle)
        return [f"{before:.0f} MiB", f"{server.peak_rss_mib():.0f} MiB", f"{left:.0f} MiB",
                f"{server.rss_mib():.0f} MiB"]  # fmt: skip


async def main(args: argparse.Namespace) -> None:
    sources = {"this": Path(__file__).resolve().parents[2]}
    if args.baseline:
        sources["baseline"] = Path(args.baseline).resolve()
    if args.memory:
        print(f"voicews {source_version()}")
        header = ["source", "RSS warm", "peak", "attackers gone", f"{args.settle:g} s later"]
        rows = []
        for label, source in sources.items():
            print(f"  the session-abuse family ({', '.join(ABUSE)}) on {label}...", flush=True)
            rows.append([label, *await memory(source, args.settle)])
        print_table(header, rows)
        return
    names = args.attacks.split(",") if args.attacks else list(CASES)
    names = [n for n in names if args.heavy or not CASES[n].heavy]
    print(
        f"voicews {source_version()}; sources: {', '.join(f'{k}={v}' for k, v in sources.items())}"
    )
    header = ["attack", "issue", "source", "calm first audio", "calm stall", "peak RSS",
              "slots held after", "wall"]  # fmt: skip
    rows = []
    for name in names:
        case = CASES[name]
        for label, source in sources.items():
            print(f"  {name} on {label}...", flush=True)
            runs = [await run_once(source, case) for _ in range(args.repeats)]
            rows.append([name, case.issue, label, *summary(runs)])
    print_table(header, rows)


def print_table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="another checkout's root (its voicews/ is run)")
    parser.add_argument("--attacks", help=f"comma-separated, from: {', '.join(CASES)}")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--heavy", action="store_true", help="also the multi-GB attacks")
    parser.add_argument(
        "--memory", action="store_true", help="RSS over the session-abuse family, and after"
    )
    parser.add_argument("--settle", type=float, default=30.0, help="seconds to wait after it")
    asyncio.run(main(parser.parse_args()))
