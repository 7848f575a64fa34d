"""Listening continuity: what is heard after the first audio, voicews against wyoming-piper.

Both servers run as their own processes on loopback with the same voice (as ``compare`` and
``capacity`` start them) and get the same held-out replies (``LISTENING_REPLIES``) in deltas
of 4 characters, cut anywhere, on the same schedule:

1. alone: one conversation per server, each reply on both in turn, at each token rate: first
   audio p50/p95; the silence heard per reply after the first audio, with no buffer (playback
   starts at the first frame and every gap counts) and with a client buffer of
   ``--buffer-ms``; one-word segments among the mid-reply ones (first and last exempt);
   median words per segment.
2. burst: ``--burst`` conversations start a reply in the same instant at ``--burst-rate``:
   first audio p95, conversations with over 100 ms of silence, one-word mid segments.
3. intonation: each segment end of the alone replies, the pitch over its last 300 ms as
   streamed beside the same words inside a whole-sentence synthesis (``endings.py``).

wyoming-piper's segments are the sentences it synthesizes one by one: counted by its
``audio-start`` events, their words by its own sentence splitter run on the same deltas.

    python -m bench continuity                       # ~8 min on 2 cores
    python -m bench continuity --quick               # ~3 min
    python -m bench continuity --rates 5,20 --replies 4 --burst 0 --no-peer   # ~1 min
    python -m bench continuity --baseline ../other-checkout   # its voicews too, side by side
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import shlex
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from bench.common import LISTENING_REPLIES, json_safe, rate_list, source_version
from bench.harness.connections import Turn
from bench.harness.parts import log, measure_bursts, measure_ttfa, warm_up
from bench.harness.processes import CpuMark, ServerProcess, VoicewsProcess, servers_under_test
from bench.harness.summaries import Check, fmt, render
from bench.listening.endings import Reference, end_pairs
from bench.listening.figures import STALL_MS, EndPair, Intonation, Listening
from bench.listening.phrasing import char_deltas
from bench.listening.pitch import FALL_ST, LOW_ST, WINDOW_S

VOICEWS = VoicewsProcess.name
GOAL_BURST = 16
"""Issue 28's burst: so many conversations started together at 20 tok/s."""
TEXTS = [" ".join(sentences) for sentences in LISTENING_REPLIES]


def alone_table(alone: dict[tuple[str, float], Listening], buffer_ms: float) -> str:
    header = [
        "rate", "server", "first audio p50/p95", "stall med/worst",
        f"with {buffer_ms:.0f} ms buffer", f"stalled >{STALL_MS:.0f}", "1-word mid",
        "split phrase", "words/seg", "segs/reply", "margin p5",
    ]  # fmt: skip
    rows = []
    for (server, rate), s in alone.items():
        rows.append([f"{rate:g} tok/s", server, *cells(s)])
    return render(header, rows, left=2)


def cells(s: Listening) -> list[str]:
    fails = f" !{s.failed} failed" if s.failed else ""
    return [
        f"{fmt(s.ttfa_p50_ms)} / {fmt(s.ttfa_p95_ms)}",
        f"{fmt(s.stall_med_ms)} / {fmt(s.stall_worst_ms)}",
        f"{fmt(s.buffered_med_ms)} / {fmt(s.buffered_worst_ms)}",
        f"{s.stalled}/{s.replies}{fails}",
        f"{s.one_word_mid}/{s.mid_segments}",
        f"{s.split_phrases}/{s.cuts}",
        fmt(s.words_per_segment, ".1f"),
        fmt(s.segments_med, ".0f"),
        fmt(s.margin_p5_ms),
    ]


def burst_table(bursts: dict[str, Listening], buffer_ms: float) -> str:
    header = [
        "server", "first audio p50/p95", "stall med/worst", f"with {buffer_ms:.0f} ms buffer",
        f"stalled >{STALL_MS:.0f}", "1-word mid", "split phrase", "words/seg", "segs/reply",
        "margin p5",
    ]  # fmt: skip
    return render(header, [[name, *cells(s)] for name, s in bursts.items()])


def intonation_table(pairs: Sequence[EndPair]) -> str:
    header = [
        "server", "rate", "ends", "measured", "slope st/s streamed/whole",
        "drop st streamed/whole", "end vs median st", "falling streamed/whole",
    ]  # fmt: skip
    rows = []
    keys = dict.fromkeys((p.server, p.rate) for p in pairs)
    for server, rate in keys:
        for final in (False, True):
            key = (server, rate, final)
            s = Intonation.of([p for p in pairs if (p.server, p.rate, p.sentence_final) == key])
            rows.append([
                server, f"{rate:g} tok/s", "sentence-final" if final else "mid-sentence",
                f"{s.measured}/{s.ends}",
                f"{fmt(s.slope_streamed, '+.1f')} / {fmt(s.slope_whole, '+.1f')}",
                f"{fmt(s.drop_streamed, '+.1f')} / {fmt(s.drop_whole, '+.1f')}",
                f"{fmt(s.level_streamed, '+.1f')} / {fmt(s.level_whole, '+.1f')}",
                f"{s.falling_streamed} / {s.falling_whole} of {s.measured}",
            ])  # fmt: skip
    return render(header, rows, left=3)


def checks(
    name: str,
    alone: dict[tuple[str, float], Listening],
    burst: Listening | None,
    pairs: Sequence[EndPair],
) -> list[Check]:
    """Issue 28's goals for one voicews."""
    out = []
    for rate in (10.0, 20.0):
        s = alone.get((name, rate))
        if s is None:
            out.append(Check(None, f"alone {rate:g} tok/s: not measured"))
            continue
        ok = s.one_word_mid == 0 and s.stall_worst_ms <= STALL_MS
        text = (
            f"alone {rate:g} tok/s: {s.one_word_mid} one-word mid segments (0), worst stall "
            f"{fmt(s.stall_worst_ms)} ms (<= 100)"
        )
        if rate == 20.0:
            ok = ok and s.words_per_segment >= 4 and s.ttfa_p50_ms <= 130
            text += (
                f", {s.words_per_segment:.1f} words/segment (>= 4), first audio p50 "
                f"{fmt(s.ttfa_p50_ms)} ms (<= 130)"
            )
        out.append(Check(ok, text))
    s = alone.get((name, 5.0))
    if s is not None:
        out.append(
            Check(
                s.one_word_share <= 0.10 and s.stall_worst_ms <= 250,
                f"alone 5 tok/s: one-word mid segments {100 * s.one_word_share:.0f}% (<= 10%), "
                f"worst stall {fmt(s.stall_worst_ms)} ms (<= 250)",
            )
        )
    if burst is not None:
        out.append(
            Check(
                burst.ttfa_p95_ms <= 500 and burst.stalled == 0 and burst.one_word_share <= 0.02,
                f"burst of {GOAL_BURST}: first audio p95 {fmt(burst.ttfa_p95_ms)} ms (<= 500), "
                f"{burst.stalled} conversations over 100 ms (0), one-word mid "
                f"{100 * burst.one_word_share:.0f}% (<= 2%)",
            )
        )
    mid = Intonation.of([p for p in pairs if p.server == name and not p.sentence_final])
    if mid.measured:
        out.append(
            Check(
                mid.falling_streamed <= mid.falling_whole,
                f"intonation: {mid.falling_streamed} of {mid.measured} mid-sentence ends fall as "
                f"streamed, {mid.falling_whole} inside whole sentences (no more than whole)",
            )
        )
    return out


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a short run (~3 min): 5 and 20 tok/s, 4 replies (explicit options still win)",
    )
    parser.add_argument("--rates", type=rate_list, help="tok/s [5,10,20,50]")
    parser.add_argument("--repeats", type=int, default=1, help="passes over the replies [1]")
    parser.add_argument("--replies", type=int, help=f"replies per pass, 1-{len(TEXTS)} [all]")
    parser.add_argument("--burst", type=int, default=16, help="conversations at once (0: none)")
    parser.add_argument("--burst-rate", type=float, default=20.0, help="tok/s [20]")
    parser.add_argument("--burst-repeats", type=int, default=1, help="bursts per server [1]")
    parser.add_argument("--buffer-ms", type=float, default=150.0, help="client buffer [150]")
    parser.add_argument("--no-pitch", action="store_true", help="leave out the intonation")
    parser.add_argument("--no-peer", action="store_true", help="leave wyoming-piper out")
    parser.add_argument(
        "--baseline",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="also run the voicews of this checkout (repeatable)",
    )
    parser.add_argument(
        "--server-args",
        type=shlex.split,
        default=[],
        metavar="ARGS",
        help="added to every voicews serve, baselines too (--server-args='--engine kokoro')",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="write every turn here")
    args = parser.parse_args(argv)
    if args.rates is None:
        args.rates = [5.0, 20.0] if args.quick else [5.0, 10.0, 20.0, 50.0]
    if args.replies is None:
        args.replies = 4 if args.quick else len(TEXTS)
    if args.repeats < 1 or args.burst_repeats < 1 or not 1 <= args.replies <= len(TEXTS):
        parser.error(f"--repeats at least 1, --replies within 1-{len(TEXTS)}")
    return args


async def measure(
    args: argparse.Namespace, servers: list[ServerProcess]
) -> tuple[list[Turn], list[Turn], list[CpuMark]]:
    log(f"starting {', '.join(s.name for s in servers)} ...")
    await asyncio.gather(*(s.start() for s in servers))
    for server in servers:
        await warm_up(server, 0.0)
    marks = [CpuMark.now(servers)]
    log("alone ...")
    texts = TEXTS[: args.replies]
    alone = await measure_ttfa(servers, args.rates, texts, args.repeats, 0.0, char_deltas, True)
    marks.append(CpuMark.now(servers))
    burst: list[Turn] = []
    if args.burst:
        log("burst ...")
        _, burst = await measure_bursts(
            servers, [args.burst], args.burst_rate, args.burst_repeats, TEXTS, char_deltas
        )
    marks.append(CpuMark.now(servers))
    return alone, burst, marks


def intonation(turns: Sequence[Turn]) -> list[EndPair]:
    """Every end of every turn with audio; what the syntheses and the tracker cost, logged."""
    reference = Reference()
    started = time.perf_counter()
    pairs = [p for t in turns for p in end_pairs(t, LISTENING_REPLIES[t.reply], reference)]
    tracking = time.perf_counter() - started - reference.synthesis_s
    log(
        f"intonation: {len(pairs)} ends; whole-sentence syntheses {reference.synthesis_s:.1f} s, "
        f"the rest (the tracker, {2 * len(pairs)} contours and a median per sentence) "
        f"{tracking:.1f} s: {1000 * tracking / max(1, len(pairs)):.0f} ms per end"
    )
    return pairs


def report(
    args: argparse.Namespace,
    names: list[str],
    alone: list[Turn],
    burst: list[Turn],
    pairs: list[EndPair],
    load: str,
) -> None:
    buffer_s = args.buffer_ms / 1000
    print(f"voicews {source_version()}, {os.cpu_count()} CPUs, loopback; {load}")
    print(
        f"\n1. Alone: {args.replies} replies x {args.repeats} pass(es), 4-character deltas. "
        f"Stall: all the silence in a reply after its first audio (no buffer), median and "
        f"worst reply; 1-word mid: mid-reply segments of one word / mid-reply segments; "
        f"split phrase: cuts after a word that leads into the next ('near', 'should', "
        f"'twelve') / cuts; margin p5: the audio left when a segment (not a reply's first) "
        f"began to arrive, its 5th percentile over all of them (ms, below 0 a gap). "
        f"wyoming-piper's segments: its sentences (audio-start events)"
    )
    table = {
        (name, rate): Listening.of(
            [t for t in alone if t.server == name and t.rate == rate], buffer_s
        )
        for rate in args.rates
        for name in names
    }
    print(alone_table(table, args.buffer_ms))
    bursts: dict[str, Listening] = {}
    if burst:
        for name in names:
            bursts[name] = Listening.of([t for t in burst if t.server == name], buffer_s)
        print(
            f"\n2. Burst: {args.burst} conversations start a reply in the same instant at "
            f"{args.burst_rate:g} tok/s ({args.burst_repeats} burst(s) per server)"
        )
        print(burst_table(bursts, args.buffer_ms))
    if pairs:
        print(
            f"\n3. Intonation: pitch over the last {WINDOW_S * 1000:.0f} ms of sound of each "
            "segment end as streamed / of the same words inside a whole-sentence synthesis "
            f"(semitones, medians over the ends; end vs median: the end's pitch against its "
            f"sentence's median F0; falling: a drop of {FALL_ST:g} st or more ending "
            f"{LOW_ST:g} st or more below that median). measured: ends with enough voiced "
            "frames in both"
        )
        print(intonation_table(pairs))
        placed = sum(p.by_marks for p in pairs)
        print(f"   ends placed in the whole by word marks: {placed} of {len(pairs)}")
    for name in names:
        if name.startswith(VOICEWS):
            print(f"\nissue 28's goals for {name}:")
            goal = args.burst == GOAL_BURST and args.burst_rate == 20.0
            for check in checks(name, table, bursts.get(name) if goal else None, pairs):
                print(check)


async def run(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="voicews-continuity-") as tmp:
        sessions = max(64, args.burst + 8)
        servers = servers_under_test(
            Path(tmp), sessions, args.baseline, peer=not args.no_peer, serve_args=args.server_args
        )
        try:
            alone, burst, marks = await measure(args, servers)
        finally:
            for server in servers:
                server.stop()
    load1 = os.getloadavg()[0]
    other = [a.other_cores(b) for a, b in itertools.pairwise(marks)]
    load = (
        f"load average {load0:.1f} at the start, {load1:.1f} at the end; other processes kept "
        + ", ".join(f"{v:.1f}" for v in other)
        + " cores busy (alone, burst)"
    )
    pairs: list[EndPair] = []
    if not args.no_pitch:
        pairs = intonation(alone)
    report(args, [s.name for s in servers], alone, burst, pairs, load)
    if args.json is not None:
        payload = {
            "version": source_version(),
            "args": json.loads(json.dumps(vars(args), default=str)),
            "turns": [t.record() for t in [*alone, *burst]],
            "ends": [asdict(p) for p in pairs],
        }
        args.json.write_text(json.dumps(json_safe(payload), indent=1) + "\n")
        log(f"raw numbers written to {args.json}")
    log(f"total {time.perf_counter() - started:.0f} s")


def main(argv: Sequence[str] | None = None) -> None:
    asyncio.run(run(parse_args(argv)))


if __name__ == "__main__":
    main()
