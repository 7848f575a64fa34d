"""Soak: many sessions speaking many turns (some cut by barge-in) for a bounded time.

Prints turns, audio, and the server's resident memory, open file descriptors, threads and
tasks after a warm-up and at the end (a leak shows as growth after the warm-up).

    python -m bench soak                          # 16 sessions, 20 s warm-up, 120 s measured
    python -m bench soak --sessions 32 --seconds 600
    python -m bench soak --url ws://host:8765/v1/realtime   # load only; no server figures
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import threading
import time
from dataclasses import replace

from bench.capacity.loadtest import SoakReport, soak
from voicews.core.config import SessionConfig
from voicews.server import ServerConfig, VoicewsServer


def resources() -> dict[str, float]:
    gc.collect()
    with open("/proc/self/statm") as f:
        rss = int(f.read().split()[1]) * 4096
    return {
        "rss_mib": rss / 2**20,
        "fds": len(os.listdir("/proc/self/fd")),
        "threads": threading.active_count(),
        "tasks": len(asyncio.all_tasks()),
    }


def describe(label: str, report: SoakReport, wall: float) -> str:
    return (
        f"{label}: {report.sessions} sessions, {report.turns} turns ({report.cut} barge-ins), "
        f"{report.audio_seconds:.0f} s of audio in {wall:.0f} s, "
        f"missing turn_done {report.missing_turn_done}, errors {len(report.errors)}"
    )


async def main(args: argparse.Namespace) -> None:
    server = None
    url = args.url
    if url is None:
        session = replace(SessionConfig(), max_messages_per_second=10_000)
        server = VoicewsServer(ServerConfig(port=0, session=session))
        await server.start()
        url = server.url
    try:
        started = time.perf_counter()
        warm = await soak(url, args.sessions, args.warmup, tokens_per_s=args.rate)
        print(describe("warm-up", warm, time.perf_counter() - started))
        before = resources()
        started = time.perf_counter()
        report = await soak(url, args.sessions, args.seconds, tokens_per_s=args.rate, seed=1000)
        wall = time.perf_counter() - started
        print(describe("measured", report, wall))
        if server is not None and server.app is not None:
            while server.app.sessions:
                await asyncio.sleep(0.05)
            after = resources()
            print(f"{'':10}{'after warm-up':>15}{'at the end':>12}")
            for key in before:
                print(f"{key:10}{before[key]:>15.1f}{after[key]:>12.1f}")
    finally:
        if server is not None:
            await server.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url")
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--warmup", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=50.0, help="tokens per second per turn")
    asyncio.run(main(parser.parse_args()))
