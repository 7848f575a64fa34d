"""Turns pooled into what a listener heard: first audio, silences, phrasing, intonation.

Pure: every figure comes from the turns' recorded arrivals and segment texts (``Turn``), or
from the contours measured at segment ends (``EndPair``), so the tests can give known ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from bench.harness.connections import Turn
from bench.harness.summaries import median, percentile
from bench.listening.phrasing import median_words, one_word_mid, split_phrases
from bench.listening.pitch import Contour, falls

STALL_MS = 100.0
"""A reply with more silence than this after its first audio stalled."""


def heard_stall_ms(turn: Turn, buffer_s: float = 0.0) -> float:
    """All the silence a listener heard after the first audio: playback starts with it (or
    once ``buffer_s`` of audio is in hand) and every gap after counts, however short."""
    return turn.replay(buffer_s).underrun_ms


def segment_margins_ms(turn: Turn) -> list[float]:
    """Each segment's margin but the first's: the audio a listener without a buffer had left
    when the segment's first sample arrived (negative: the silence before it). A stall is rare;
    this says how close each segment came to one, so an A/B of a few bursts can tell risk from
    luck."""
    starts = iter(turn.segment_starts[1:])
    start = next(starts, None)
    margins: list[float] = []
    dry, played = None, 0
    for at, samples in zip(turn.arrival_s, turn.arrival_samples, strict=True):
        dry = at if dry is None else dry
        while start is not None and start < played + samples:
            margins.append((dry - at) * 1000)
            start = next(starts, None)
        dry, played = max(dry, at) + samples / turn.sample_rate, played + samples
    return margins


@dataclass(frozen=True, slots=True)
class Listening:
    """One server's replies at one token rate (or one burst), pooled."""

    replies: int
    failed: int
    ttfa_p50_ms: float
    ttfa_p95_ms: float
    stall_med_ms: float
    """Per reply: all its silence after the first audio, the median over replies."""
    stall_worst_ms: float
    buffered_med_ms: float
    """The same with a client buffer of ``buffer_s`` before playing (and after each gap)."""
    buffered_worst_ms: float
    stalled: int
    """Replies with more than ``STALL_MS`` of silence (no buffer)."""
    one_word_mid: int
    mid_segments: int
    split_phrases: int
    """Cuts between a word that leads into the next and its head (``phrasing.split_phrases``)."""
    cuts: int
    words_per_segment: float
    segments_med: float
    margin_p5_ms: float
    """The 5th percentile of the segments' margins (``segment_margins_ms``), all pooled."""

    @classmethod
    def of(cls, turns: Sequence[Turn], buffer_s: float) -> Listening:
        good = [t for t in turns if t.ok]
        ttfa = [v for t in good if (v := t.ttfa_ms) is not None]
        stalls = [heard_stall_ms(t) for t in good]
        buffered = [heard_stall_ms(t, buffer_s) for t in good]
        counts = [one_word_mid(t.segments) for t in good]
        splits = [split_phrases(t.segments) for t in good]
        return cls(
            replies=len(turns),
            failed=len(turns) - len(good),
            ttfa_p50_ms=percentile(ttfa, 50),
            ttfa_p95_ms=percentile(ttfa, 95),
            stall_med_ms=median(stalls),
            stall_worst_ms=max(stalls, default=math.nan),
            buffered_med_ms=median(buffered),
            buffered_worst_ms=max(buffered, default=math.nan),
            stalled=sum(s > STALL_MS for s in stalls),
            one_word_mid=sum(one for one, _ in counts),
            mid_segments=sum(mid for _, mid in counts),
            split_phrases=sum(split for split, _ in splits),
            cuts=sum(cuts for _, cuts in splits),
            words_per_segment=median_words([t.segments for t in good]),
            segments_med=median([float(len(t.segments)) for t in good]),
            margin_p5_ms=percentile([m for t in good for m in segment_margins_ms(t)], 5),
        )

    @property
    def one_word_share(self) -> float:
        return self.one_word_mid / self.mid_segments if self.mid_segments else 0.0


@dataclass(frozen=True, slots=True)
class EndPair:
    """One segment end: its contour as streamed, and the same words' inside the whole."""

    server: str
    rate: float
    sentence_final: bool
    streamed: Contour | None
    whole: Contour | None
    by_marks: bool
    """Placed in the whole by the engine's word marks (else by its share of characters)."""
    key_st: float
    """The whole sentence's median F0 (semitones above 100 Hz): the ends' levels are read
    against it."""


@dataclass(frozen=True, slots=True)
class Intonation:
    """Segment ends of one kind (mid-sentence or sentence-final), pooled: both contours, each
    figure the median over the ends (a few tracker slips do not move it)."""

    ends: int
    measured: int
    """Ends with both contours (enough voiced frames in both windows)."""
    by_marks: int
    slope_streamed: float
    slope_whole: float
    drop_streamed: float
    drop_whole: float
    level_streamed: float
    """The end's pitch against its sentence's median F0 (st)."""
    level_whole: float
    falling_streamed: int
    falling_whole: int

    @classmethod
    def of(cls, pairs: Sequence[EndPair]) -> Intonation:
        both = [(p.streamed, p.whole, p.key_st) for p in pairs if p.streamed and p.whole]
        return cls(
            ends=len(pairs),
            measured=len(both),
            by_marks=sum(p.by_marks for p in pairs),
            slope_streamed=median([s.slope_st_s for s, _, _ in both]),
            slope_whole=median([w.slope_st_s for _, w, _ in both]),
            drop_streamed=median([s.drop_st for s, _, _ in both]),
            drop_whole=median([w.drop_st for _, w, _ in both]),
            level_streamed=median([s.end_st - k for s, _, k in both]),
            level_whole=median([w.end_st - k for _, w, k in both]),
            falling_streamed=sum(falls(s, k) for s, _, k in both),
            falling_whole=sum(falls(w, k) for _, w, k in both),
        )
