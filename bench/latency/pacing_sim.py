"""Listening continuity in simulated time: one conversation alone, through the real sessions.

``pacing_ab`` measures on the shared machine, whose load moves every figure; this runs the same
replies through ``simulate.py``'s model of a quiet machine (Piper's cost, one conversation, its
turns one after another, the next 0.5 s after the last was heard), so a pacing change can be
told apart from the noise, deterministically. Per token rate: first audio (p50, max), total
stall per reply (no jitter buffer: median, max), mid-reply one-word segments (first and last
exempt) and words per segment (median). Segments are counted as the engine was given them,
read aloud ("$1,249.99" is eight words here).

    python -m bench pacing_sim                     # 5, 10, 20 tokens/s, 13 replies, ~10 s
    python -m bench pacing_sim --rates 5 --segments
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence

from bench.capacity.simulate import POLICIES, Machine, Simulation
from bench.common import BURST_REPLIES, REPLIES, rate_list
from bench.harness.connections import Turn
from bench.harness.summaries import fmt, render
from bench.listening.phrasing import split_phrases


def lone(rate: float, replies: Sequence[str]) -> list[Turn]:
    """One conversation speaks ``replies`` in turn at ``rate`` tokens a second."""
    sim = Simulation(POLICIES["planned"], Machine(), 0.0)
    conv = sim.conversation(0)
    queue = list(enumerate(replies))

    def next_turn() -> None:
        if queue:
            index, text = queue.pop(0)
            sim.speak(conv, Turn("voicews", "lone", rate, index), text, rate)

    def done(_conv: object, turn: Turn) -> None:
        sim.at(sim.now + (turn.playback.end_s or 0.0) + 0.5, next_turn)

    sim.on_turn_done = done
    sim.at(0.0, next_turn)
    sim.run()
    return sim.turns


def row(rate: float, turns: Sequence[Turn]) -> list[str]:
    ttfa = [t.ttfa_ms for t in turns if t.ttfa_ms is not None]
    stall = [t.playback.underrun_ms for t in turns]
    mids = [s for t in turns for s in t.segments[1:-1]]
    words = [len(s.split()) for t in turns for s in t.segments]
    splits = [split_phrases(t.segments) for t in turns]
    return [
        f"{rate:g}", fmt(statistics.median(ttfa)), fmt(max(ttfa)), fmt(statistics.median(stall)),
        fmt(max(stall)), f"{sum(s > 100 for s in stall)}/{len(stall)}",
        f"{sum(len(s.split()) == 1 for s in mids)}/{len(mids)}", f"{statistics.median(words):g}",
        f"{sum(s for s, _ in splits)}/{sum(n for _, n in splits)}",
    ]  # fmt: skip


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rates", type=rate_list, default=[5.0, 10.0, 20.0], help="tokens/s")
    parser.add_argument("--segments", action="store_true", help="print every turn's segments")
    args = parser.parse_args(argv)
    replies = REPLIES + BURST_REPLIES
    header = ["tok/s", "fa p50", "fa max", "stall med", "stall max", "stall>100", "1-word mid",
              "words/seg", "split phrase"]  # fmt: skip
    rows = []
    for rate in args.rates:
        turns = lone(rate, replies)
        rows.append(row(rate, turns))
        if args.segments:
            for turn in turns:
                print(f"  {rate:g} #{turn.reply} stall {fmt(turn.playback.underrun_ms)}: "
                      f"{turn.segments}")  # fmt: skip
    print(f"{len(replies)} replies, one conversation, simulated quiet machine; times in ms")
    print(render(header, rows, left=2))


if __name__ == "__main__":
    main()
