from __future__ import annotations

import numpy as np
import pytest

from voicews.audio import StitchConfig, Stitcher, from_pcm16, to_pcm16
from voicews.text.segmenter import Boundary

RATE = 22050


def tone(seconds: float, freq: float = 220.0, amp: float = 0.5, phase: float = 0.0) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (amp * np.cos(2 * np.pi * freq * t + phase)).astype(np.float32)


def padded(audio: np.ndarray, lead: float = 0.06, trail: float = 0.25) -> np.ndarray:
    return np.concatenate(
        [np.zeros(int(lead * RATE), np.float32), audio, np.zeros(int(trail * RATE), np.float32)]
    )


def stitch(
    segments: list[tuple[np.ndarray, Boundary]],
    chunk: int | None = None,
    config: StitchConfig | None = None,
) -> tuple[np.ndarray, list[int]]:
    st = Stitcher(RATE, config)
    out: list[np.ndarray] = []
    starts: list[int] = []
    for audio, boundary in segments:
        st.begin_segment()
        starts.append(sum(map(len, out)))
        pieces = (
            [audio]
            if chunk is None
            else [audio[i : i + chunk] for i in range(0, len(audio), chunk)]
        )
        for p in pieces:
            out.append(st.push(p))
        out.append(st.end_segment(boundary))
    out.append(st.finish())
    return np.concatenate(out), starts


def max_jump(x: np.ndarray) -> float:
    return float(np.abs(np.diff(x)).max())


def test_edge_silence_trimmed_to_pause_for_boundary() -> None:
    cfg = StitchConfig(crossfade_ms=0)
    speech = tone(0.3)
    for boundary in Boundary:
        out, _ = stitch(
            [(padded(speech, trail=0.4), boundary), (padded(speech), boundary)], config=cfg
        )
        lead = round(cfg.lead_ms * RATE / 1000)
        pause = round(cfg.pause_ms[boundary] * RATE / 1000)
        first_end = lead + len(speech)
        gap = np.flatnonzero(np.abs(out[first_end:]) > cfg.silence_threshold)[0]
        assert abs(gap - (pause + lead)) <= 2, boundary


def test_pause_never_longer_than_the_engine_gave() -> None:
    cfg = StitchConfig(crossfade_ms=0)
    out, _ = stitch(
        [
            (padded(tone(0.2), trail=0.02), Boundary.SENTENCE),
            (padded(tone(0.2), lead=0.0, trail=0.0), Boundary.SENTENCE),
        ],
        config=cfg,
    )
    lead = round(cfg.lead_ms * RATE / 1000)
    assert len(out) == lead + int(0.2 * RATE) + int(0.02 * RATE) + int(0.2 * RATE)


@pytest.mark.parametrize("curve", ["equal_power", "linear"])
def test_join_of_abutting_segments_has_no_click(curve: str) -> None:
    """Segments that end and start mid-waveform (no edge silence): the crossfade smooths it."""
    a = tone(0.2, freq=180.0)  # ends near +0.5
    b = tone(0.2, freq=240.0, phase=np.pi)  # starts at -0.5
    cfg = StitchConfig(crossfade_ms=8.0, curve=curve)  # type: ignore[arg-type]
    hard = np.concatenate([a, b])
    out, starts = stitch([(a, Boundary.WORD), (b, Boundary.WORD)], config=cfg)
    inside = max(max_jump(a), max_jump(b))
    join = starts[1]
    around = out[max(0, join - 400) : join + 400]
    # Worst case, loud on both sides: the join is within a quarter of the steepest step inside
    # the signal, where the hard join is a step of the full amplitude.
    assert max_jump(around) <= inside * 1.25
    assert max_jump(hard) > inside * 20


def test_streaming_in_chunks_equals_one_shot() -> None:
    segs = [(padded(tone(0.3)), Boundary.CLAUSE), (padded(tone(0.4, 300.0)), Boundary.SENTENCE)]
    whole, _ = stitch(segs)
    for chunk in (1000, 4410, 777):
        chunked, _ = stitch(segs, chunk=chunk)
        np.testing.assert_allclose(chunked, whole, atol=1e-6)


def test_silent_segment_contributes_nothing() -> None:
    out, _ = stitch([(np.zeros(5000, np.float32), Boundary.SENTENCE)])
    assert out.size == 0


def test_pcm16_round_trip() -> None:
    audio = np.linspace(-1.2, 1.2, 1000, dtype=np.float32)
    pcm = to_pcm16(audio)
    assert len(pcm) == 2000
    back = from_pcm16(pcm)
    assert back.max() == pytest.approx(1.0, abs=1e-4) and back.min() == pytest.approx(
        -1.0, abs=1e-4
    )


@pytest.mark.parametrize("chunk", [None, 300, 1000])
def test_skipped_counts_the_trimmed_lead_however_the_audio_is_chunked(chunk: int | None) -> None:
    """An engine position minus ``skipped`` is the position in the segment's released audio."""
    st = Stitcher(RATE)
    lead = round(StitchConfig().lead_ms * RATE / 1000)
    audio = padded(tone(0.5), lead=0.1)  # first sound at 2205
    st.begin_segment()
    pieces = (
        [audio] if chunk is None else [audio[i : i + chunk] for i in range(0, len(audio), chunk)]
    )
    released = np.concatenate([st.push(p) for p in pieces])
    assert st.skipped == 2205 - lead
    assert np.array_equal(released[lead : lead + 100], audio[2205 : 2205 + 100])
    st.begin_segment()
    assert st.skipped == 0
