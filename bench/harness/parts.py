"""The measured parts: first audio, a concurrency sweep, bursts and memory, on any servers.

What ``compare.py`` (voicews against wyoming-piper), ``capacity.py`` and ``lanes.py`` (lane
counts) share: each part speaks to the servers given (``processes.py``) through their
connections (``connections.py``) and returns the turns and their summaries (``summaries.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import statistics
import sys
import time
from collections.abc import Sequence

from bench.common import BURST_REPLIES, CONVERSATION_REPLIES, REPLIES
from bench.harness.connections import Connection, Pieces, Turn
from bench.harness.processes import CpuMark, ServerProcess, VoicewsProcess, proc_cpu_s
from bench.harness.summaries import (
    STOP_TTFA_P95_MS,
    BurstSummary,
    LoadSummary,
    MemorySummary,
)
from voicews.client import word_pieces


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
    pieces: Pieces = word_pieces,
    keep_audio: bool = False,
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
                        turn.keep_audio = keep_audio
                        await conns[server.name].speak(turn, text, rate, jitter_s, 120, pieces)
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
    client_cpu0 = proc_cpu_s("/proc/self/stat")
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
        f"  sweep: the benchmark client used {proc_cpu_s('/proc/self/stat') - client_cpu0:.0f}"
        " s of CPU"
    )
    return levels, all_turns


async def burst(
    server: ServerProcess,
    n: int,
    rate: float,
    repeat: int,
    replies: Sequence[str] = BURST_REPLIES,
    pieces: Pieces = word_pieces,
) -> tuple[BurstSummary, list[Turn]]:
    """N conversations, connected first, each start one reply in the same instant."""
    conns = await asyncio.gather(*(server.connect() for _ in range(n)))
    go = asyncio.Event()

    async def speak(index: int, conn: Connection) -> Turn:
        reply = (index + repeat) % len(replies)
        turn = Turn(server.name, "burst", rate, reply, repeat, n=n, conversation=index)
        await go.wait()
        return await conn.speak(turn, replies[reply], rate, 0.0, 120, pieces)

    try:
        speaking = [asyncio.create_task(speak(i, conn)) for i, conn in enumerate(conns)]
        await asyncio.sleep(0.3)  # every task waits at the gate
        cpu0, loop0, mark = server.cpu_s(), server.loop_cpu_s(), CpuMark.now([server])
        go.set()
        turns = await asyncio.gather(*speaking)
        cpu, loop = server.cpu_s() - cpu0, server.loop_cpu_s() - loop0
        other = mark.other_cores(CpuMark.now([server]))
    finally:
        await asyncio.gather(*(conn.close() for conn in conns))
    return BurstSummary.of(n, turns, cpu, other, loop), list(turns)


async def measure_bursts(
    servers: Sequence[ServerProcess],
    ns: Sequence[int],
    rate: float,
    repeats: int,
    replies: Sequence[str] = BURST_REPLIES,
    pieces: Pieces = word_pieces,
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
                summary, turns = await burst(server, n, rate, repeat, replies, pieces)
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
                f"cpu {level.cpu_ms_per_audio_s:4.0f} ms/audio s "
                f"(event loop {level.loop_ms_per_audio_s:.1f}), "
                f"other processes {level.other_cores:.1f} cores"
            )
            if all(r.failed or r.ttfa_p95_ms > STOP_TTFA_P95_MS for r in runs[server.name]):
                stopped.add(server.name)
                log(f"  burst {server.name}: stopped after N={n}")
        if len(stopped) == len(servers):
            break
    return levels, all_turns
