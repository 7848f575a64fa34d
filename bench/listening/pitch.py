"""Intonation at a segment's end: the pitch (F0) over its last ``WINDOW_S`` of speech.

A segment synthesized alone is read by the engine as a whole utterance, so it ends with the
falling contour of a statement even where its sentence goes on. The measure: the same words'
end inside a whole-sentence synthesis, where the voice carries on. F0 comes from Praat's
autocorrelation tracker (``parselmouth``): ``librosa.pyin`` called every frame of a 1.7 s
sentence of this voice unvoiced (Praat: 62 of 165 voiced) and cost ten times more. The rest is
arithmetic on the tracker's output, kept pure so it can be tested on known contours.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

WINDOW_S = 0.3
"""The end heard as the segment's final contour."""
CONTEXT_S = 0.2
"""Audio before the window given to the tracker, so its first frames have a past."""
FALL_ST = 2.0
"""A falling final contour drops by at least this many semitones over the window, ..."""
LOW_ST = 3.0
"""... and ends at least this far below its sentence's median F0 (the bottom of the voice's
range, where a statement ends). The two together, on Piper's joe voice in one run: 29 of 44
sentence-final ends as streamed fell, and 44 of 184 mid-sentence ends inside whole sentences;
the drop alone told them apart less (31 of 44 against 95 of 184)."""
FMIN, FMAX = 60.0, 400.0
"""The F0 range searched: any adult voice."""
STEP_S = 0.01
"""Between F0 frames (Praat's frames span three periods of ``FMIN``: 50 ms)."""
OCTAVE_ST = 7.0
"""Frames this far from the window's median F0 are the tracker's octave slips, not speech."""
SILENCE_DB = -40.0
"""Below the loudest 10 ms of the audio by this much is silence, trimmed off a segment's end."""

Floats = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Contour:
    """The F0 over a window ending at a segment's last sound, in semitones."""

    slope_st_s: float
    """Least-squares slope over the voiced frames (semitones per second)."""
    drop_st: float
    """The last third of the voiced frames' mean less the first third's: negative falls."""
    end_st: float
    """The last third's mean, in semitones above 100 Hz."""
    voiced: int
    """Voiced frames it is made of."""


def falls(contour: Contour, key: float) -> bool:
    """Whether ``contour`` is a falling final contour in a sentence whose median F0 is ``key``
    (semitones above 100 Hz)."""
    return contour.drop_st <= -FALL_ST and contour.end_st - key <= -LOW_ST


def semitones(hz: Floats) -> Floats:
    """F0 in semitones above 100 Hz: a pitch interval is the same number at any height."""
    return np.asarray(12.0 * np.log2(hz / 100.0), dtype=np.float64)


def contour(times: Floats, f0: Floats, min_voiced: int = 6) -> Contour | None:
    """The contour of frames at ``times`` (s) with F0 ``f0`` (Hz; NaN where unvoiced); None
    with fewer than ``min_voiced`` voiced frames, too few to tell a slope."""
    voiced = ~np.isnan(f0)
    if int(voiced.sum()) < min_voiced:
        return None
    t, st = times[voiced], semitones(f0[voiced])
    kept = np.abs(st - np.median(st)) <= OCTAVE_ST
    if int(kept.sum()) < min_voiced:
        return None
    t, st = t[kept], st[kept]
    slope = float(np.polyfit(t, st, 1)[0])
    third = max(1, len(st) // 3)
    end = float(st[-third:].mean())
    return Contour(slope, end - float(st[:third].mean()), end, len(st))


def speech_end(audio: npt.NDArray[np.float32], end: int, sample_rate: int) -> int:
    """The sample after the last sound before ``end``: the pause a segment ends with, or the
    silence after a sentence, is no part of its contour."""
    step = sample_rate // 100
    frames = audio[: end - end % step].reshape(-1, step) if end >= step else audio[:0, None]
    if frames.size == 0:
        return end
    rms = np.sqrt((frames.astype(np.float64) ** 2).mean(axis=1))
    loud = np.flatnonzero(rms > rms.max() * 10 ** (SILENCE_DB / 20))
    return int((loud[-1] + 1) * step) if loud.size else end


def end_contour(audio: npt.NDArray[np.float32], end: int, sample_rate: int) -> Contour | None:
    """The contour of the last ``WINDOW_S`` of sound before sample ``end`` of ``audio``."""
    stop = speech_end(audio, end, sample_rate)
    window, context = round(WINDOW_S * sample_rate), round(CONTEXT_S * sample_rate)
    start = max(0, stop - window - context)
    piece = audio[start:stop]
    if piece.size < 3 * sample_rate / FMIN:
        return None
    times, f0 = track(piece, sample_rate)
    keep = times >= (stop - start) / sample_rate - WINDOW_S
    return contour(times[keep], f0[keep])


def key_st(audio: npt.NDArray[np.float32], sample_rate: int) -> float:
    """The median F0 of ``audio`` in semitones above 100 Hz: where its voice sits, the level an
    end is heard against (a final fall ends well below it, a continuation near it)."""
    _, f0 = track(audio, sample_rate)
    voiced = f0[~np.isnan(f0)]
    return float(np.median(semitones(voiced))) if voiced.size else math.nan


def track(audio: npt.NDArray[np.float32], sample_rate: int) -> tuple[Floats, Floats]:
    """Frame times (s from the start of ``audio``) and F0 (Hz, NaN where unvoiced)."""
    import parselmouth

    sound = parselmouth.Sound(audio.astype(np.float64), sampling_frequency=sample_rate)
    pitch = sound.to_pitch_ac(time_step=STEP_S, pitch_floor=FMIN, pitch_ceiling=FMAX)
    f0 = np.asarray(pitch.selected_array["frequency"], dtype=np.float64)
    f0[f0 == 0] = np.nan
    return np.asarray(pitch.xs(), dtype=np.float64), f0


def whole_boundary(
    word_starts: Sequence[int] | None, words_through: int, chars_share: float, heard: int
) -> tuple[int, bool]:
    """Where, in a whole-sentence synthesis ``heard`` samples long, the words of a segment
    that ends after word ``words_through`` end: at the next word's start by the engine's word
    marks; by its share of the characters where there are none. The flag says which."""
    if word_starts is not None and words_through < len(word_starts):
        return int(word_starts[words_through]), True
    if word_starts is not None and words_through == len(word_starts):
        return heard, True
    return round(heard * chars_share), False
