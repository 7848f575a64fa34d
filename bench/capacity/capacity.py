"""Capacity: how many conversations one box keeps smooth, voicews against wyoming-piper.

Both servers run as their own processes on loopback with the same bundled voice (as
``compare.py`` starts them) and get the same deltas on the same schedule, at 20 tokens/s:

1. lone: one conversation at a time, each reply on both servers in turn (alternating which
   goes first): first audio p50, end of text -> last audio p50, longest stall.
2. burst: N conversations connect, then all start a reply in the same instant (held-out
   replies, 5 to 7 s of speech), played with no jitter buffer: a stall is all the silence a
   conversation hears after its first audio. First audio p50/p95, the largest stall, how many
   conversations stalled over 100 ms, server CPU per second of audio. Each N ``--repeats``
   times (alternating which server goes first); each figure the median over the repeats.
3. staggered: as ``compare.py`` part 2, N conversations starting within 1.5 s, ``--turns``
   replies each, each waiting for its playback to end plus 0.5-1.5 s, with a 100 ms jitter
   buffer: underruns, first audio p95, longest stall, CPU per second of audio.

Prints the tables, the largest N without a stall for each server and scenario, the goals of
issue 13 met or missed, and plots stall against N (``--plot``). ``--baseline DIR``
(repeatable) adds the voicews of another checkout as one more server and ``--variant NAME=ARGS``
a voicews of this one started with other ``serve`` arguments, for A/B runs in the same
conditions.

    python -m bench capacity                        # ~12 min on 2 cores
    python -m bench capacity --quick                # ~3 min
    python -m bench capacity --baseline ../main --variant "lanes1=--lanes 1" --no-peer
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from bench.common import REPLIES, json_safe, source_version
from bench.harness.connections import Turn
from bench.harness.parts import log, measure_bursts, measure_sweep, measure_ttfa, warm_up
from bench.harness.processes import CpuMark, VoicewsProcess, servers_under_test
from bench.harness.summaries import (
    STALL_MS,
    BurstSummary,
    Check,
    LoadSummary,
    TtfaSummary,
    fmt,
    int_list,
    largest_clean_n,
    largest_smooth_n,
    render,
)

VOICEWS = VoicewsProcess.name

# Issue 13's goals, on a 2-core box, in the default configuration.
GOAL_N = 16
GOAL_BURST_TTFA_P95_MS = 500.0
GOAL_STAGGERED_TTFA_P95_MS = 300.0
GOAL_LONE_TTFA_MS = 130.0


# --- tables -------------------------------------------------------------------------------------


def lone_table(lone: dict[str, TtfaSummary]) -> str:
    header = ["", *lone]
    rows = [
        ["first audio p50 (ms)", *(fmt(s.ttfa_p50_ms) for s in lone.values())],
        ["first audio p95 (ms)", *(fmt(s.ttfa_p95_ms) for s in lone.values())],
        ["end of text -> last audio p50 (ms)", *(fmt(s.end_to_last_p50_ms) for s in lone.values())],
        ["longest stall (ms)", *(fmt(s.longest_stall_ms) for s in lone.values())],
        ["runs (failed)", *(f"{s.runs} ({s.failed})" for s in lone.values())],
    ]
    return render(header, rows)


def burst_table(levels: dict[str, list[BurstSummary]]) -> str:
    header = ["N", "server", "fa p50", "fa p95", "max stall", "stalled", "cpu ms/audio s", "other"]
    rows = []
    for n in sorted({s.n for summaries in levels.values() for s in summaries}):
        for name, summaries in levels.items():
            for s in (s for s in summaries if s.n == n):
                fails = f" !{s.failed} failed" if s.failed else ""
                rows.append([
                    str(n), name, fmt(s.ttfa_p50_ms), fmt(s.ttfa_p95_ms), fmt(s.max_stall_ms),
                    f"{s.stalled}/{n}{fails}", fmt(s.cpu_ms_per_audio_s),
                    fmt(s.other_cores, ".1f"),
                ])  # fmt: skip
    return render(header, rows, left=2)


def staggered_table(levels: dict[str, list[LoadSummary]]) -> str:
    header = [
        "N", "server", "fa p50", "fa p95", "underruns", "conv w/ under", "max stall",
        "least buf", "cpu ms/audio s", "worker busy", "other",
    ]  # fmt: skip
    rows = []
    for n in sorted({s.n for summaries in levels.values() for s in summaries}):
        for name, summaries in levels.items():
            for s in (s for s in summaries if s.n == n):
                fails = f" !{s.failed} failed" if s.failed else ""
                rows.append([
                    str(n), name, fmt(s.ttfa_p50_ms), fmt(s.ttfa_p95_ms), str(s.underruns),
                    f"{s.conversations_with_underrun}/{n}{fails}", fmt(s.longest_stall_ms),
                    fmt(s.min_buffer_p50_ms), fmt(s.cpu_ms_per_audio_s),
                    fmt(100 * s.worker_busy, ".0f", "%"), fmt(s.other_cores, ".1f"),
                ])  # fmt: skip
    return render(header, rows, left=2)


def at(levels: Sequence[BurstSummary] | Sequence[LoadSummary], n: int) -> object | None:
    return next((s for s in levels if s.n == n), None)


def cpu_per_audio_s(levels: Sequence[BurstSummary] | Sequence[LoadSummary], ns: set[int]) -> float:
    """The median over the levels in ``ns`` (those every server measured)."""
    values = sorted(s.cpu_ms_per_audio_s for s in levels if s.n in ns)
    return values[len(values) // 2] if values else math.nan


def checks(
    lone: dict[str, TtfaSummary],
    bursts: dict[str, list[BurstSummary]],
    staggered: dict[str, list[LoadSummary]],
    peer: str | None,
) -> list[Check]:
    out: list[Check] = []
    b = at(bursts[VOICEWS], GOAL_N)
    if isinstance(b, BurstSummary):
        out.append(
            Check(
                b.ttfa_p95_ms <= GOAL_BURST_TTFA_P95_MS and b.max_stall_ms <= STALL_MS,
                f"burst N={GOAL_N}: first audio p95 {fmt(b.ttfa_p95_ms)} ms <= "
                f"{GOAL_BURST_TTFA_P95_MS:.0f}, max stall {fmt(b.max_stall_ms)} ms <= "
                f"{STALL_MS:.0f}",
            )
        )
    else:
        out.append(Check(None, f"burst N={GOAL_N}: not measured"))
    s = at(staggered[VOICEWS], GOAL_N)
    if isinstance(s, LoadSummary):
        out.append(
            Check(
                s.clean and s.ttfa_p95_ms <= GOAL_STAGGERED_TTFA_P95_MS,
                f"staggered N={GOAL_N}: {s.underruns} underruns, first audio p95 "
                f"{fmt(s.ttfa_p95_ms)} ms <= {GOAL_STAGGERED_TTFA_P95_MS:.0f}",
            )
        )
    else:
        out.append(Check(None, f"staggered N={GOAL_N}: not measured"))
    v = lone[VOICEWS]
    out.append(
        Check(
            v.ttfa_p50_ms <= GOAL_LONE_TTFA_MS and v.underruns == 0,
            f"lone: first audio p50 {fmt(v.ttfa_p50_ms)} ms <= {GOAL_LONE_TTFA_MS:.0f}, "
            f"{v.underruns} underruns",
        )
    )
    if peer is None:
        return out
    p = lone[peer]
    out.append(
        Check(
            v.end_to_last_p50_ms <= p.end_to_last_p50_ms,
            f"lone: end of text -> last audio p50 {fmt(v.end_to_last_p50_ms)} ms <= the peer's "
            f"{fmt(p.end_to_last_p50_ms)}",
        )
    )
    for scenario, levels in (("burst", bursts), ("staggered", staggered)):
        ns = {s.n for s in levels[VOICEWS]} & {s.n for s in levels[peer]}
        mine, theirs = cpu_per_audio_s(levels[VOICEWS], ns), cpu_per_audio_s(levels[peer], ns)
        out.append(
            Check(
                None if math.isnan(mine) or math.isnan(theirs) else mine <= theirs,
                f"{scenario}: CPU per audio second, median over the N both ran, "
                f"{fmt(mine)} ms <= the peer's {fmt(theirs)}",
            )
        )
    return out


def plot(
    path: Path,
    bursts: dict[str, list[BurstSummary]],
    staggered: dict[str, list[LoadSummary]],
    title: str,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(16, 4.8), constrained_layout=True)
    markers = "osD^v<>"
    for i, name in enumerate(bursts):
        style = {"marker": markers[i % len(markers)], "label": name}
        b = bursts[name]
        ax1.plot([s.n for s in b], [max(1.0, s.max_stall_ms) for s in b], **style)
        ax2.plot([s.n for s in b], [s.ttfa_p95_ms for s in b], **style)
        st = staggered[name]
        ax3.plot([s.n for s in st], [max(1.0, s.longest_stall_ms) for s in st], **style)
    ax1.axhline(STALL_MS, color="grey", linestyle="--", linewidth=1, label=f"{STALL_MS:.0f} ms")
    ax2.axhline(GOAL_BURST_TTFA_P95_MS, color="grey", linestyle="--", linewidth=1)
    ax3.axhline(STALL_MS, color="grey", linestyle="--", linewidth=1)
    ax1.set_title("Burst: the most silence one conversation heard")
    ax2.set_title("Burst: first audio p95")
    ax3.set_title("Staggered, 100 ms jitter buffer: longest stall")
    for ax in (ax1, ax2, ax3):
        ax.set_xlabel("conversations N")
        ax.set_ylabel("ms (log scale; none shown as 1)")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=120)
    plt.close(fig)


# --- main ---------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a short run (~3 min): 3 lone replies, bursts of 1,8,16 once, staggered 1,16 with "
        "1 turn (explicit options still win)",
    )
    parser.add_argument("--burst-ns", type=int_list, help="burst sizes [1,4,8,12,16,24,32]")
    parser.add_argument("--staggered-ns", type=int_list, help="staggered sizes [1,4,8,16,24]")
    parser.add_argument("--repeats", type=int, help="bursts per N and server [2]")
    parser.add_argument("--turns", type=int, help="turns per staggered conversation [3]")
    parser.add_argument("--replies", type=int, help=f"lone replies, 1-{len(REPLIES)} [5]")
    parser.add_argument("--rate", type=float, default=20.0, help="tokens/s [20]")
    parser.add_argument("--jitter-ms", type=float, default=100.0, help="staggered buffer [100]")
    parser.add_argument("--seed", type=int, default=1, help="staggered start offsets [1]")
    parser.add_argument(
        "--baseline",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="also run the voicews of this checkout (repeatable)",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=ARGS",
        help="also run this checkout's voicews with these serve arguments (repeatable)",
    )
    parser.add_argument("--no-peer", action="store_true", help="leave wyoming-piper out")
    parser.add_argument("--plot", type=Path, default=Path("capacity.png"), metavar="PATH")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write every turn here")
    args = parser.parse_args(argv)
    quick = dict(burst_ns=[1, 8, 16], staggered_ns=[1, 16], repeats=1, turns=1, replies=3)
    full = dict(
        burst_ns=[1, 4, 8, 12, 16, 24, 32], staggered_ns=[1, 4, 8, 16, 24], repeats=2, turns=3,
        replies=len(REPLIES),
    )  # fmt: skip
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.repeats < 1 or args.turns < 1 or not 1 <= args.replies <= len(REPLIES):
        parser.error("--repeats and --turns must be at least 1, --replies within 1-5")
    for variant in args.variant:
        if "=" not in variant:
            parser.error(f"--variant takes NAME=ARGS, not {variant!r}")
    return args


async def run(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="voicews-capacity-") as tmp:
        sessions = max(64, max(args.burst_ns + args.staggered_ns) + 8)
        servers = servers_under_test(
            Path(tmp), sessions, args.baseline, args.variant, peer=not args.no_peer
        )
        names = [s.name for s in servers]
        try:
            log(f"starting {', '.join(names)} ...")
            await asyncio.gather(*(s.start() for s in servers))
            for server in servers:
                await warm_up(server, args.jitter_ms / 1000)
            marks = [CpuMark.now(servers)]
            log("lone conversations ...")
            lone_turns = await measure_ttfa(
                servers, [args.rate], REPLIES[: args.replies], 2, args.jitter_ms / 1000
            )
            marks.append(CpuMark.now(servers))
            log("bursts ...")
            bursts, burst_turns = await measure_bursts(
                servers, args.burst_ns, args.rate, args.repeats
            )
            marks.append(CpuMark.now(servers))
            log("staggered conversations ...")
            staggered, sweep_turns = await measure_sweep(
                servers, args.staggered_ns, args.turns, args.rate, args.jitter_ms / 1000, args.seed
            )
            marks.append(CpuMark.now(servers))
        finally:
            for server in servers:
                server.stop()
    lone = {name: TtfaSummary.of([t for t in lone_turns if t.server == name]) for name in names}
    peer = None if args.no_peer else names[-1]
    cpus = os.cpu_count()
    title = f"voicews {source_version()}, {cpus} CPUs, loopback, {args.rate:g} tokens/s"
    print(title)
    other = [a.other_cores(b) for a, b in itertools.pairwise(marks)]
    print(
        "other processes kept busy on average: "
        + ", ".join(
            f"{v:.1f} cores during {part}"
            for part, v in zip(("lone", "bursts", "staggered"), other, strict=True)
        )
        + f" (of {cpus}); figures are only as good as the machine is quiet"
    )
    print(f"\n1. One conversation at a time: {args.replies} replies x 2 passes")
    print(lone_table(lone))
    print(
        f"\n2. Burst: N conversations start a reply in the same instant, no jitter buffer; "
        f"median over {args.repeats} repeat(s). fa: first audio (ms); max stall: the most "
        f"silence one conversation heard (ms); stalled: conversations with over "
        f"{STALL_MS:.0f} ms; other: cores busy with other processes"
    )
    print(burst_table(bursts))
    print(
        f"\n3. Staggered: N conversations x {args.turns} turns, starts within 1.5 s, "
        f"{args.jitter_ms:.0f} ms jitter buffer. least buf: the least audio left when more "
        "arrived, median over turns (ms)"
    )
    print(staggered_table(staggered))
    print("\nlargest N without a stall (burst) and without an underrun (staggered):")
    for name in names:
        print(
            f"  {name}: burst {largest_smooth_n(bursts[name])}, "
            f"staggered {largest_clean_n(staggered[name])}"
        )
    print("\nissue 13's goals for voicews:")
    for check in checks(lone, bursts, staggered, peer):
        print(check)
    plot(args.plot, bursts, staggered, title)
    log(f"\nplot written to {args.plot}")
    if args.json is not None:
        turns: list[Turn] = [*lone_turns, *burst_turns, *sweep_turns]
        payload = {
            "version": source_version(),
            "args": json.loads(json.dumps(vars(args), default=str)),
            "lone": {name: asdict(s) for name, s in lone.items()},
            "burst": {name: [asdict(s) for s in levels] for name, levels in bursts.items()},
            "staggered": {name: [asdict(s) for s in levels] for name, levels in staggered.items()},
            "turns": [t.record() for t in turns],
        }
        args.json.write_text(json.dumps(json_safe(payload), indent=1) + "\n")
        log(f"raw numbers written to {args.json}")
    log(f"total {time.perf_counter() - started:.0f} s")


def main(argv: Sequence[str] | None = None) -> None:
    asyncio.run(run(parse_args(argv)))


if __name__ == "__main__":
    main()
