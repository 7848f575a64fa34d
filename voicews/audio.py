"""Joining separately synthesized segments into one click-free stream, and PCM16.

Each segment comes from its own synthesis call with the engine's own edge silence. The
:class:`Stitcher` trims that silence to a natural pause for the kind of boundary the segment
ended on, and overlaps each join by a few milliseconds with a crossfade, so there is neither a
gap that sounds like a stall nor a step that sounds like a click.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from .text.segmenter import Boundary

Audio = npt.NDArray[np.float32]
_EMPTY: Audio = np.zeros(0, dtype=np.float32)


@dataclass(frozen=True, slots=True)
class StitchConfig:
    silence_threshold: float = 0.01
    """Absolute amplitude below which a sample counts as edge silence."""
    lead_ms: float = 15.0
    """Silence kept before a segment's first sound."""
    pause_ms: dict[Boundary, float] = field(
        default_factory=lambda: {
            Boundary.WORD: 40.0,
            Boundary.CLAUSE: 140.0,
            Boundary.SENTENCE: 260.0,
        }
    )
    """Silence kept after a segment's last sound (never more than the engine gave)."""
    crossfade_ms: float = 8.0
    curve: Literal["equal_power", "linear"] = "equal_power"


class Stitcher:
    """Streams a turn's segments out as one signal; the caller frames what it returns."""

    def __init__(self, sample_rate: int, config: StitchConfig | None = None) -> None:
        self.config = config or StitchConfig()
        self._rate = sample_rate
        self._xfade = max(0, round(self.config.crossfade_ms * sample_rate / 1000))
        self._lead = round(self.config.lead_ms * sample_rate / 1000)
        self._in_lead = False
        self._pending = _EMPTY  # current segment audio not yet released
        self._tail = _EMPTY  # previous segment's end, waiting to be crossfaded
        self._received = 0  # engine samples of the current segment so far
        self.skipped = 0
        """Engine samples of the current segment trimmed before its first kept sample: an
        engine position minus this is a position in the segment's released audio."""

    def begin_segment(self) -> None:
        self._in_lead = True
        self._pending = _EMPTY
        self._received = self.skipped = 0

    def push(self, chunk: Audio) -> Audio:
        """Add engine audio for the current segment; returns what can be released now."""
        audio = np.concatenate([self._pending, chunk.astype(np.float32, copy=False)])
        self._received += chunk.size
        loud = self._loud(audio)
        if self._in_lead:
            if loud.size == 0:
                self._pending = audio[-self._lead :] if self._lead else _EMPTY
                return _EMPTY
            cut = max(0, int(loud[0]) - self._lead)
            self.skipped = self._received - audio.size + cut
            audio = audio[cut:]
            loud = loud - loud[0] + min(int(loud[0]), self._lead)
            self._in_lead = False
        # Hold back the trailing silence (it may become the segment's end) and a crossfade.
        release = min(int(loud[-1]) + 1, len(audio) - self._xfade) if loud.size else 0
        release = max(release, 0)
        self._pending = audio[release:]
        return self._join(audio[:release])

    def end_segment(self, boundary: Boundary) -> Audio:
        """Close the segment with a pause fit for ``boundary``; keeps the crossfade tail."""
        audio = self._pending
        self._pending = _EMPTY
        if self._in_lead:  # the segment never made a sound
            self._in_lead = False
            return _EMPTY
        loud = self._loud(audio)
        pause = round(self.config.pause_ms[boundary] * self._rate / 1000)
        end = (int(loud[-1]) + 1 if loud.size else 0) + pause
        audio = audio[:end]
        cut = max(0, len(audio) - self._xfade)
        out = self._join(audio[:cut])
        self._tail = np.concatenate([self._tail, audio[cut:]]) if out.size == 0 else audio[cut:]
        return out

    def finish(self) -> Audio:
        """End of turn: release the last tail, faded out."""
        tail, self._tail = self._tail, _EMPTY
        if tail.size == 0:
            return _EMPTY
        fade_out, _ = _curves(tail.size, self.config.curve)
        return (tail * fade_out).astype(np.float32)

    def _join(self, audio: Audio) -> Audio:
        if audio.size == 0 or self._tail.size == 0:
            return audio
        tail, self._tail = self._tail, _EMPTY
        n = min(tail.size, audio.size)
        fade_out, fade_in = _curves(n, self.config.curve)
        mixed = tail[tail.size - n :] * fade_out + audio[:n] * fade_in
        return np.concatenate([tail[: tail.size - n], mixed, audio[n:]]).astype(np.float32)

    def _loud(self, audio: Audio) -> npt.NDArray[np.intp]:
        return np.flatnonzero(np.abs(audio) > self.config.silence_threshold)


def _curves(n: int, curve: str) -> tuple[Audio, Audio]:
    t = ((np.arange(n) + 0.5) / n).astype(np.float32)
    if curve == "linear":
        return 1.0 - t, t
    return np.cos(t * np.pi / 2).astype(np.float32), np.sin(t * np.pi / 2).astype(np.float32)


def to_pcm16(audio: Audio) -> bytes:
    """Float samples in [-1, 1] to little-endian int16 bytes."""
    scaled = np.clip(audio, -1.0, 1.0) * 32767.0
    pcm: bytes = np.rint(scaled).astype("<i2").tobytes()
    return pcm


def from_pcm16(pcm: bytes) -> Audio:
    return (np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32767.0).astype(np.float32)
