"""voicews with one compute lane against two, side by side in one run.

On a CPU the piper engine can run several inferences side by side (``voicews serve --lanes
N``; one per core by default), instead of one at a time on all the cores. This starts one server
per lane count (separate processes, same voice) and, at each N, runs the same load against each
in turn: ``harness/parts.py``' concurrency sweep, as in ``compare.py``'s part 2, N conversations at
20 tokens/s, each played through a simulated player with a jitter buffer. It prints, per N and
lane count, first audio p50/p95, underruns per conversation-minute, conversations with an
underrun, server CPU per second of audio and the compute lanes' busy share, then the largest N
without underrun.

    python -m bench lanes                          # lanes 1 and 2, N = 1, 4, 8, 12, 16, 24
    python -m bench lanes --lanes 1,2,4 --ns 1,8,16 --turns 2
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from bench.common import source_version
from bench.harness.parts import log, measure_sweep, warm_up
from bench.harness.processes import VoicewsProcess
from bench.harness.summaries import LoadSummary, fmt, int_list, largest_clean_n, render


class LanesProcess(VoicewsProcess):
    def __init__(self, workdir: Path, max_sessions: int, lanes: int) -> None:
        self.name = f"lanes={lanes}"
        self.lanes = lanes
        super().__init__(workdir, max_sessions)

    def command(self) -> list[str]:
        return [*super().command(), "--lanes", str(self.lanes)]


def table(levels: dict[str, list[LoadSummary]]) -> str:
    header = [
        "N", "server", "first audio p50", "p95", "underruns/min", "conversations underrun",
        "cpu ms/audio s", "lanes busy", "other load",
    ]  # fmt: skip
    rows = []
    for n in sorted({s.n for summaries in levels.values() for s in summaries}):
        for name, summaries in levels.items():
            for s in (s for s in summaries if s.n == n):
                rows.append([
                    str(n), name,
                    fmt(s.ttfa_p50_ms, ".0f", " ms"), fmt(s.ttfa_p95_ms, ".0f", " ms"),
                    fmt(s.underruns_per_min, ".2f"), f"{s.conversations_with_underrun}/{n}",
                    fmt(s.cpu_ms_per_audio_s, ".0f"), fmt(100 * s.worker_busy, ".0f", "%"),
                    fmt(s.other_cores, ".1f", " cores"),
                ])  # fmt: skip
    return render(header, rows, left=2)


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="voicews-lanes-") as tmp:
        workdir = Path(tmp)
        servers = [LanesProcess(workdir, max(64, max(args.ns) + 8), n) for n in args.lanes]
        try:
            log(f"starting {len(servers)} servers ...")
            await asyncio.gather(*(s.start() for s in servers))
            for server in servers:
                await warm_up(server, args.jitter_ms / 1000)
            levels, _ = await measure_sweep(
                servers, args.ns, args.turns, args.rate, args.jitter_ms / 1000, args.seed
            )
        finally:
            for server in servers:
                server.stop()
    print(f"voicews {source_version()}, {args.rate:g} tokens/s, {args.turns} turns per "
          f"conversation, {args.jitter_ms:g} ms jitter buffer")  # fmt: skip
    print(table(levels))
    for name, summaries in levels.items():
        print(f"largest N without underrun, {name}: {largest_clean_n(summaries)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lanes", type=int_list, default=[1, 2], help="lane counts [1,2]")
    parser.add_argument(
        "--ns", type=int_list, default=[1, 4, 8, 12, 16, 24], help="conversations at once"
    )
    parser.add_argument("--turns", type=int, default=2, help="turns per conversation [2]")
    parser.add_argument("--rate", type=float, default=20.0, help="tokens/s [20]")
    parser.add_argument("--jitter-ms", type=float, default=100.0, help="jitter buffer [100]")
    parser.add_argument("--seed", type=int, default=1)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
