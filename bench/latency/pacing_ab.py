"""Listening continuity, A/B: this checkout's pacing against another's, alone, at slow token rates.

Each server runs as its own process (``harness.processes``) and gets the same replies on the same
schedule, one conversation per server and rate, each reply on both in turn (alternating which
goes first), so the shared box's load hits both alike. Played with no jitter buffer: the stall
is all the silence a listener heard after the first audio. Per server and rate it prints first
audio (p50, max), total stall per reply (median, max), mid-reply one-word segments (first and
last exempt: heard as a word said on its own) and words per segment (median).

    python -m bench pacing_ab --baseline ../main                   # 5,10,20 tok/s, 2 passes
    python -m bench pacing_ab --baseline ../main --rates 5 --replies held-out --repeats 3

The replies are the bench's (``ttfa``: numbers, prices, codes), ``held-out`` (the burst's, which
no warm-up speaks), or both (``all``). The first reply at each rate follows the warm-up's fast
text: the sessions' measured rate is a fast one then (the lead is sized on the first tokens).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench.common import BURST_REPLIES, REPLIES, rate_list, source_version
from bench.harness.connections import Turn
from bench.harness.parts import log, measure_ttfa, warm_up
from bench.harness.processes import CpuMark, ServerProcess, VoicewsProcess
from bench.harness.summaries import fmt, percentile, render

REPLY_SETS = {"bench": REPLIES, "held-out": BURST_REPLIES, "all": REPLIES + BURST_REPLIES}


def row(name: str, rate: float, turns: Sequence[Turn]) -> list[str]:
    good = [t for t in turns if t.ok]
    ttfa = [t.ttfa_ms for t in good if t.ttfa_ms is not None]
    stall = [t.playback.underrun_ms for t in good]
    mids = [s for t in good for s in t.segments[1:-1]]
    one = sum(len(s.split()) == 1 for s in mids)
    words = [len(s.split()) for t in good for s in t.segments]
    return [
        f"{rate:g}", name, fmt(percentile(ttfa, 50)), fmt(max(ttfa, default=float("nan"))),
        fmt(statistics.median(stall) if stall else float("nan")),
        fmt(max(stall, default=float("nan"))), f"{sum(s > 100 for s in stall)}/{len(stall)}",
        f"{one}/{len(mids)}", f"{statistics.median(words) if words else 0:g}",
        str(len(turns) - len(good)),
    ]  # fmt: skip


async def run(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    version = source_version()  # before the servers start: the code they import is this
    replies = REPLY_SETS[args.replies]
    with tempfile.TemporaryDirectory(prefix="voicews-pacing-") as tmp:
        servers: list[ServerProcess] = [VoicewsProcess(Path(tmp), 8)]
        for baseline in args.baseline:
            name = f"{VoicewsProcess.name}@{baseline.resolve().name}"
            servers.append(VoicewsProcess(Path(tmp), 8, name, source=baseline))
        try:
            await asyncio.gather(*(s.start() for s in servers))
            for server in servers:
                await warm_up(server, 0.0)
            mark = CpuMark.now(servers)
            turns = await measure_ttfa(servers, args.rates, replies, args.repeats, 0.0)
            other = mark.other_cores(CpuMark.now(servers))
        finally:
            for server in servers:
                server.stop()
    print(f"voicews {version}; {len(replies)} {args.replies} replies x {args.repeats}")
    print(f"other processes kept {other:.1f} cores busy on average (figures are as good as that)")
    header = ["tok/s", "server", "fa p50", "fa max", "stall med", "stall max", "stall>100",
              "1-word mid", "words/seg", "failed"]  # fmt: skip
    rows = [
        row(server.name, rate, [t for t in turns if t.server == server.name and t.rate == rate])
        for rate in args.rates
        for server in servers
    ]
    print(render(header, rows, left=2))
    if args.segments:
        for turn in turns:
            stall = turn.playback.underrun_ms
            print(
                f"  {turn.server} {turn.rate:g} #{turn.reply} fa {fmt(turn.ttfa_ms or math.nan)}"
                f" stall {fmt(stall)}: {turn.segments}"
            )
    log(f"total {time.perf_counter() - started:.0f} s")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rates", type=rate_list, default=[5.0, 10.0, 20.0], help="tokens/s")
    parser.add_argument("--repeats", type=int, default=2, help="passes over the replies")
    parser.add_argument("--replies", choices=sorted(REPLY_SETS), default="all")
    parser.add_argument(
        "--baseline", type=Path, action="append", default=[], metavar="DIR",
        help="also run the voicews of this checkout (repeatable)",
    )  # fmt: skip
    parser.add_argument("--segments", action="store_true", help="print every turn's segments")
    asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
