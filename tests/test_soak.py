"""A bounded soak: many sessions, many turns, barge-ins; resources must come back flat.

Longer runs with figures: ``python bench/soak.py --seconds 600``.
"""

from __future__ import annotations

import asyncio

from conftest import ARENA_SLACK, resources, running, timeout, tracing_heap, with_session
from loadtest import soak

SESSIONS, TURNS = 8, 8  # per phase: 64 conversation turns, a fifth of them barge-ins


async def test_soak_keeps_memory_fds_tasks_and_threads_flat() -> None:
    """Three equal phases of load; after the first two (warm-up: native allocator arenas and
    onnxruntime buffers grow for a while, then stay), the third must not grow the Python heap,
    file descriptors, tasks or threads, and RSS only within what arenas do."""
    async with running(with_session(max_messages_per_second=10_000)) as srv:
        assert srv.app is not None
        samples = []
        with tracing_heap():
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
                samples.append(resources())
        print("soak phases: " + "; ".join(map(str, samples)))
        before, after = samples[1], samples[2]
        assert after.heap - before.heap < 2**20  # what our code holds: nothing per turn
        assert after.rss - before.rss < ARENA_SLACK
        assert (after.fds, after.tasks, after.threads) == (before.fds, before.tasks, before.threads)
