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

SESSIONS, TURNS = 8, 8  # per phase: 64 conversation turns, a fifth of them barge-ins


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_soak_keeps_memory_fds_tasks_and_threads_flat() -> None:
    """Three equal phases of load; after the first two (warm-up: native allocator arenas and
    onnxruntime buffers grow for a while, then stay), the third must not grow anything."""
    async with running(with_session(max_messages_per_second=10_000)) as srv:
        assert srv.app is not None
        samples = []
        for phase in range(3):
            report = await asyncio.wait_for(
                soak(srv.url, SESSIONS, turns=TURNS, seed=100 * phase), timeout(120)
            )
            assert report.missing_turn_done == 0 and report.errors == []
            assert report.turns >= SESSIONS * TURNS and report.cut > 0
            async with asyncio.timeout(timeout(10)):
                while srv.app.sessions:
                    await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)
            gc.collect()
            samples.append(
                (rss_bytes(), open_fds(), len(asyncio.all_tasks()), threading.active_count())
            )
        print(
            "soak phases (RSS MiB, fds, tasks, threads): "
            + ", ".join(f"({r / 2**20:.1f}, {f}, {t}, {n})" for r, f, t, n in samples)
        )
        (rss_before, *others_before), (rss_after, *others_after) = samples[1], samples[2]
        assert rss_after - rss_before < 8 * 2**20
        assert others_after == others_before
