"""First audio and stalls with an engine 10x slower than Piper, in simulated time.

``simulate.py``'s model of the service (the real sans-I/O ``Session``, segmenter and pacing;
the planning worker; Piper's cost on a quiet two-core box) with the engine's cost times
``--scales`` (fixed and per audio second alike: Kokoro measured ~10x Piper's on both in one
run), so each run is deterministic. Conversations start staggered, several turns each, at 20
tokens/s, played with no jitter buffer: a stall is any silence after a turn's first audio.

Two pacings side by side: ``today``, the pacing before the cost model (one latency per
character for every engine, 5 ms at first, rising at once with what the session sees), and
``cost-aware`` (``voicews.core.pacing``: the engine's cost fitted fixed plus per character, from
the engine's prior: Piper's at 1x, Kokoro's at 10x and more; cuts that fit the audio in hand).

    python -m bench slow_engine                  # 1x and 10x, N = 1, 2, 4: seconds
    python -m bench slow_engine --scales 1,10,20 --ns 1,2,3,4 --turns 5
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable, Sequence

from bench.capacity.simulate import POLICIES, RATE, EngineModel, Machine, Simulation, converse
from bench.harness.connections import Turn
from bench.harness.summaries import fmt, int_list, percentile, render
from voicews.core.config import SessionConfig
from voicews.core.cost import PRIORS
from voicews.core.pacing import Pacing
from voicews.text.segmenter import Fit, Urgency


class TodayPacing(Pacing):
    """The pacing before the cost model, for the A/B: one latency per character for every
    engine (5 ms until measured, a text counted as at least 20 characters), rising at once
    with the session's own first-audio latency, decaying slowly; no limit on a cut's length.
    What came after the cost model and is not about it (a lead held while text comes slowly,
    the worker's calm) is the session's own pacing's: a subclass, so that it keeps up with
    what sessions ask of their pacing (a stand-in of its own lacked ``arrived`` once the
    session asked for it, and the bench failed)."""

    def __init__(self, config: SessionConfig) -> None:
        super().__init__(config.stall_guard_ms, config.segmenter.max_chars)
        self._latency_per_char = 0.1 / 20

    def queue_wait(self, ahead: float | None) -> float:
        return self._wait

    def observe(self, seconds: float, chars: int, expected_wait: float = 0.0) -> None:
        sample = seconds / max(chars, 20)
        old = self._latency_per_char
        self._latency_per_char = sample if sample > old else 0.9 * old + 0.1 * sample

    def heard(self, chars: int, seconds: float) -> None:
        pass

    def first_chars(self, speed: float) -> int:
        return round(self._wait * 15.0 * speed)

    @property
    def busy_cap(self) -> int | None:
        return None

    def guards(self, pending_chars: int, ahead: float = 0.0) -> tuple[float, float]:
        chars = min(pending_chars, self._max_chars)
        latency = self._latency_per_char * max(chars, 20) + self._wait
        return latency + self._margin, latency + self._margin / 3

    def cut_times(self, end: float | None, pending_chars: int, now: float) -> list[float]:
        return [] if end is None else [end - guard for guard in self.guards(pending_chars)]

    def urgency(self, ahead: float, pending_chars: int) -> Urgency:
        clause_guard, word_guard = self.guards(pending_chars)
        if ahead <= word_guard + 0.001:
            return Urgency.CRITICAL
        if ahead <= clause_guard + 0.001:
            return Urgency.URGENT
        return Urgency.RELAXED

    def fit(self, ahead: float, critical: bool = False) -> Fit | None:  # type: ignore[override]
        return None


PACINGS: dict[str, Callable[[SessionConfig], object] | None] = {
    "today": TodayPacing,
    "cost-aware": None,  # the session's own
}


def conversations(
    engine: EngineModel,
    pacing: Callable[[SessionConfig], object] | None,
    n: int,
    turns: int,
    rate: float,
    seed: int,
) -> list[Turn]:
    """``simulate.converse``'s conversations on the planned worker, with ``engine`` and
    ``pacing``; every turn's audio played with no jitter buffer."""
    sim = Simulation(POLICIES["planned"], Machine(), 0.0, engine, pacing)
    converse(sim, "sim", n, turns, rate, seed)
    return sim.turns


def row(scale: float, n: int, pacing: str, turns: Sequence[Turn]) -> list[str]:
    ttfa = [t.ttfa_ms for t in turns if t.ttfa_ms is not None]
    stalls = sum(t.playback.underruns for t in turns)
    stalled_ms = sum(t.playback.underrun_ms for t in turns)
    longest = max((t.playback.longest_stall_ms for t in turns), default=0.0)
    segments = statistics.mean(len(t.segments) for t in turns)
    return [
        f"{scale:g}x", str(n), pacing, fmt(percentile(ttfa, 50)), fmt(percentile(ttfa, 95)),
        str(stalls), fmt(stalled_ms / len(turns)), fmt(longest), f"{segments:.1f}",
    ]  # fmt: skip


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--scales", type=lambda s: [float(v) for v in s.split(",")],
                        default=[1.0, 10.0])  # fmt: skip
    parser.add_argument("--ns", type=int_list, default=[1, 2, 4])
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--seeds", type=int, default=10, help="runs pooled, seeds 1..N")
    args = parser.parse_args(argv)
    rows = []
    for scale in args.scales:
        engine = EngineModel(scale, PRIORS["piper"] if scale < 5 else PRIORS["kokoro"])
        for n in args.ns:
            for name, pacing in PACINGS.items():
                turns = [
                    turn
                    for seed in range(1, args.seeds + 1)
                    for turn in conversations(engine, pacing, n, args.turns, args.rate, seed)
                ]
                rows.append(row(scale, n, name, turns))
    print(
        f"simulated: Piper's cost x scale on 2 cores, {args.rate:g} tokens/s, {args.turns} turns"
        f" per conversation, staggered, {args.seeds} runs pooled; no jitter buffer; {RATE} Hz"
    )
    header = ["engine", "N", "pacing", "fa p50 ms", "fa p95 ms", "stalls", "stall ms/turn",
              "longest ms", "segments/turn"]  # fmt: skip
    print(render(header, rows, left=3))


if __name__ == "__main__":
    main()
