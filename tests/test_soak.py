"""A bounded soak: many sessions, many turns, barge-ins; resources must come back flat.

Longer runs with figures: ``python bench/soak.py --seconds 600``.
"""

from __future__ import annotations

import asyncio
import gc
import os
import threading

from conftest import running, timeout, with_session
from voicews.loadtest import soak

SESSIONS, SECONDS = 8, 30.0


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_soak_keeps_memory_fds_tasks_and_threads_flat() -> None:
    async with running(with_session(max_messages_per_second=10_000)) as srv:
        assert srv.app is not None
        # Warm-up: native allocator arenas and onnxruntime buffers grow for the first ~20 s of
        # this load, then stay flat (measured: +32 MiB, then +0.3 MiB per further 10 s).
        await soak(srv.url, SESSIONS, 20.0)
        await asyncio.sleep(0.3)
        gc.collect()
        rss, fds = rss_bytes(), open_fds()
        tasks, threads = len(asyncio.all_tasks()), threading.active_count()
        report = await asyncio.wait_for(soak(srv.url, SESSIONS, SECONDS, seed=100), timeout(90))
        async with asyncio.timeout(timeout(10)):
            while srv.app.sessions:
                await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        gc.collect()
        grown = rss_bytes() - rss
        print(
            f"soak: {report.sessions} sessions, {report.turns} turns ({report.cut} cut), "
            f"{report.audio_seconds:.0f} s of audio in {SECONDS:.0f} s; "
            f"RSS {rss / 2**20:.1f} -> {(rss + grown) / 2**20:.1f} MiB; fds {fds} -> {open_fds()}"
        )
        assert report.turns > 4 * SESSIONS and report.cut > 0
        assert report.missing_turn_done == 0 and report.errors == []
        assert grown < 10 * 2**20
        assert open_fds() == fds
        assert len(asyncio.all_tasks()) == tasks
        assert threading.active_count() == threads
