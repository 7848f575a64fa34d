"""Summaries: turns pooled into the figures the benchmarks print, and how they print them.

Per server and rate (:class:`TtfaSummary`), per concurrency level (:class:`LoadSummary`), per
burst (:class:`BurstSummary`) and for memory (:class:`MemorySummary`); then the goals met or
missed (:class:`Check`) and plain-text tables (:func:`render`).
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from bench.harness.connections import Turn

STALL_MS = 100.0
"""A conversation with more silence than this after its first audio stalled."""

STOP_TTFA_P95_MS = 3000.0
"""A server's sweep stops after an N with a failed turn, first audio p95 over this, or (from
N = 4) underruns in at least 3 of 4 conversations."""


@dataclass
class Check:
    """A goal met (``ok``), missed, or not measured (None), as the benches print it."""

    ok: bool | None
    text: str

    def __str__(self) -> str:
        mark = {True: "ok  ", False: "MISS", None: "??  "}[self.ok]
        return f"  [{mark}] {self.text}"


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else math.nan


def median(values: Sequence[float]) -> float:
    values = [v for v in values if not math.isnan(v)]
    return statistics.median(values) if values else math.nan


def ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(a) and not math.isnan(b) else math.nan


def min_buffer_median(turns: Sequence[Turn]) -> float:
    return median([m for t in turns if (m := t.playback.min_buffer_ms) is not None])


@dataclass
class TtfaSummary:
    """One server at one rate; p50/p95 per pass over the replies, the median over passes."""

    runs: int
    failed: int
    ttfa_p50_ms: float
    ttfa_p95_ms: float
    end_to_last_p50_ms: float
    underruns: int
    runs_with_underrun: int
    longest_stall_ms: float
    min_buffer_p50_ms: float
    audio_s_med: float

    @classmethod
    def of(cls, turns: Sequence[Turn]) -> TtfaSummary:
        passes: dict[int, list[Turn]] = {}
        for turn in turns:
            passes.setdefault(turn.repeat, []).append(turn)

        def per_pass(get: Callable[[list[float]], float], key: str) -> float:
            out = []
            for group in passes.values():
                values = [v for t in group if t.ok and (v := getattr(t, key)) is not None]
                out.append(get(values) if values else math.nan)
            return median(out)

        good = [t for t in turns if t.ok]
        return cls(
            runs=len(turns),
            failed=len(turns) - len(good),
            ttfa_p50_ms=per_pass(lambda v: percentile(v, 50), "ttfa_ms"),
            ttfa_p95_ms=per_pass(lambda v: percentile(v, 95), "ttfa_ms"),
            end_to_last_p50_ms=per_pass(lambda v: percentile(v, 50), "end_to_last_ms"),
            underruns=sum(t.playback.underruns for t in good),
            runs_with_underrun=sum(t.playback.underruns > 0 for t in good),
            longest_stall_ms=max((t.playback.longest_stall_ms for t in good), default=math.nan),
            min_buffer_p50_ms=min_buffer_median(good),
            audio_s_med=median([t.audio_s for t in good]),
        )


@dataclass
class LoadSummary:
    """One server at one concurrency level; pooled over all its conversations' turns."""

    n: int
    turns: int
    failed: int
    audio_min: float
    underruns: int
    underruns_per_min: float
    conversations_with_underrun: int
    underrun_ms: float
    longest_stall_ms: float
    min_buffer_p50_ms: float
    ttfa_p50_ms: float
    ttfa_p95_ms: float
    cpu_percent: float
    wall_s: float
    other_cores: float
    cpu_ms_per_audio_s: float
    worker_busy: float = math.nan  # voicews only: peak share of a 10 s window in the engine
    queue_max: float = math.nan  # voicews only: most jobs seen waiting for the worker

    @classmethod
    def of(
        cls, n: int, turns: Sequence[Turn], cpu_s: float, wall_s: float, other_cores: float
    ) -> LoadSummary:
        good = [t for t in turns if t.ok]
        audio_min = sum(t.audio_s for t in good) / 60
        underruns = sum(t.playback.underruns for t in good)
        ttfa = [t.ttfa_ms for t in good if t.ttfa_ms is not None]
        return cls(
            n=n,
            turns=len(turns),
            failed=len(turns) - len(good),
            audio_min=audio_min,
            underruns=underruns,
            underruns_per_min=underruns / audio_min if audio_min else math.nan,
            conversations_with_underrun=len({t.conversation for t in good if t.playback.underruns}),
            underrun_ms=sum(t.playback.underrun_ms for t in good),
            longest_stall_ms=max((t.playback.longest_stall_ms for t in good), default=math.nan),
            min_buffer_p50_ms=min_buffer_median(good),
            ttfa_p50_ms=percentile(ttfa, 50),
            ttfa_p95_ms=percentile(ttfa, 95),
            cpu_percent=100 * cpu_s / wall_s if wall_s else math.nan,
            wall_s=wall_s,
            other_cores=other_cores,
            cpu_ms_per_audio_s=1000 * cpu_s / (60 * audio_min) if audio_min else math.nan,
        )

    @property
    def clean(self) -> bool:
        return self.failed == 0 and self.underruns == 0

    @property
    def clearly_bad(self) -> bool:
        """Overloaded: stop the sweep here."""
        if self.failed > 0 or self.ttfa_p95_ms > STOP_TTFA_P95_MS:
            return True
        return self.n >= 4 and 4 * self.conversations_with_underrun >= 3 * self.n


def clean_n_with_jitter(turns: Sequence[Turn], server: str, jitter_s: float) -> str:
    """Largest clean N when the same arrivals are played with another jitter buffer; a ``+``
    when the last N measured is clean (larger N were not tried)."""
    by_n: dict[int, bool] = {}
    for turn in turns:
        if turn.server != server or turn.part != "sweep":
            continue
        clean = turn.ok and not turn.replay(jitter_s).underruns
        by_n[turn.n] = by_n.get(turn.n, True) and clean
    best = 0
    for n in sorted(by_n):
        if not by_n[n]:
            return str(best)
        best = n
    return f"{best}+" if by_n else "-"


def largest_clean_n(levels: Sequence[LoadSummary]) -> int:
    """The largest N such that it and every smaller N measured had no underrun nor failure."""
    best = 0
    for level in sorted(levels, key=lambda s: s.n):
        if not level.clean:
            break
        best = level.n
    return best


@dataclass
class BurstSummary:
    """One server, N conversations started in the same instant, one reply each, played with
    no jitter buffer: a stall is all the silence a conversation heard after its first audio."""

    n: int
    turns: int
    failed: int
    ttfa_p50_ms: float
    ttfa_p95_ms: float
    max_stall_ms: float
    """The most silence one conversation heard (its stalls added up)."""
    stalled: int
    """Conversations with more than ``STALL_MS`` of silence."""
    end_to_last_p50_ms: float
    cpu_ms_per_audio_s: float
    other_cores: float
    loop_ms_per_audio_s: float = math.nan
    """Of ``cpu_ms_per_audio_s``, the server's main thread's: its event loop."""

    @classmethod
    def of(
        cls,
        n: int,
        turns: Sequence[Turn],
        cpu_s: float,
        other_cores: float,
        loop_cpu_s: float = math.nan,
    ) -> BurstSummary:
        good = [t for t in turns if t.ok]
        ttfa = [t.ttfa_ms for t in good if t.ttfa_ms is not None]
        stalls = [t.playback.underrun_ms for t in good]
        audio_s = sum(t.audio_s for t in good)
        return cls(
            n=n,
            turns=len(turns),
            failed=len(turns) - len(good),
            ttfa_p50_ms=percentile(ttfa, 50),
            ttfa_p95_ms=percentile(ttfa, 95),
            max_stall_ms=max(stalls, default=math.nan),
            stalled=sum(stall > STALL_MS for stall in stalls),
            end_to_last_p50_ms=percentile(
                [e for t in good if (e := t.end_to_last_ms) is not None], 50
            ),
            cpu_ms_per_audio_s=1000 * cpu_s / audio_s if audio_s else math.nan,
            other_cores=other_cores,
            loop_ms_per_audio_s=1000 * loop_cpu_s / audio_s if audio_s else math.nan,
        )

    @property
    def smooth(self) -> bool:
        return self.failed == 0 and self.stalled == 0

    @classmethod
    def median_of(cls, repeats: Sequence[BurstSummary]) -> BurstSummary:
        """Each figure's median over repeated bursts (the counts' too)."""
        first = repeats[0]
        values = {
            key: median([getattr(r, key) for r in repeats]) for key in asdict(first) if key != "n"
        }
        for key in ("turns", "failed", "stalled"):
            values[key] = round(values[key])
        return cls(n=first.n, **values)


def largest_smooth_n(levels: Sequence[BurstSummary]) -> int:
    """The largest N such that it and every smaller N measured had no stall nor failure."""
    best = 0
    for level in sorted(levels, key=lambda s: s.n):
        if not level.smooth:
            break
        best = level.n
    return best


@dataclass
class MemorySummary:
    sessions: int
    server_rss_mib: float
    idle_kib_per_session: float
    speaking_kib_per_session: float
    speaking_failed: int


def fmt(value: float, spec: str = ".0f", unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:{spec}}{unit}"


def render(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            f"{c:<{w}}" if i < left else f"{c:>{w}}"
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def int_list(text: str) -> list[int]:
    values = sorted({int(v) for v in text.split(",") if v.strip()})
    if not values or values[0] < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers like 1,2,4: {text!r}")
    return values
