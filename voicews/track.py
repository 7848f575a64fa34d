"""One turn's audio as it goes out: stitched, framed, and placed.

The turn's segments are stitched into one stream and cut into numbered frames; each segment
is announced at its start sample before its first frame, and its words too where the engine
placed them, so a cut turn can say which words had started playing.
"""

from __future__ import annotations

from collections.abc import Sequence

from .audio import Audio, StitchConfig, Stitcher, frames, to_pcm16
from .outbox import Outgoing
from .protocol import AudioFrame, SegmentStarted, WordMark, Words
from .segmenter import Boundary


class Track:
    def __init__(
        self, turn_id: str, sample_rate: int, frame_samples: int, stitch: StitchConfig
    ) -> None:
        self.turn_id = turn_id
        self.samples = 0
        """Samples framed so far."""
        self.spoken: list[tuple[int, str]] = []
        """(start sample, text) of each segment, or of its words once placed."""
        self._stitcher = Stitcher(sample_rate, stitch)
        self._frame_samples = frame_samples
        self._seq = 0
        self._segment: str | None = None  # the text of the segment being synthesized
        self._announced = False

    def begin(self, text: str) -> None:
        """A segment's synthesis starts; it is announced with its first audio."""
        self._stitcher.begin_segment()
        self._segment, self._announced = text, False

    def push(self, audio: Audio) -> list[Outgoing]:
        return self._out(self._stitcher.push(audio))

    def place_words(self, starts: Sequence[int]) -> Words | None:
        """The engine placed the current segment's words (samples from its audio's start);
        None where they cannot be told: before the segment has sounded, or miscounted."""
        if self._segment is None or not self._announced:
            return None
        words = self._segment.split()
        if len(starts) != len(words):
            return None  # the segment stays one unit
        base, skipped = self.spoken[-1][0], self._stitcher.skipped
        marks = [
            WordMark(text=word, start_sample=base + max(0, start - skipped))
            for word, start in zip(words, starts, strict=True)
        ]
        self.spoken[-1:] = [(mark.start_sample, mark.text) for mark in marks]
        return Words(turn_id=self.turn_id, words=marks)

    def end(self, boundary: Boundary) -> list[Outgoing]:
        """The segment is synthesized; its end is paused as fits ``boundary``."""
        out = self._out(self._stitcher.end_segment(boundary))
        self._segment = None
        return out

    def finish(self) -> list[Outgoing]:
        """The turn's last audio, faded out (a failed segment's is not announced)."""
        self._segment = None
        return self._out(self._stitcher.finish())

    def heard(self, samples: int) -> str:
        """The words (or segments) that had started within the first ``samples``."""
        return " ".join(text for start, text in self.spoken if start < samples)

    def _out(self, audio: Audio) -> list[Outgoing]:
        if audio.size == 0:
            return []
        out: list[Outgoing] = []
        if self._segment is not None and not self._announced:
            out.append(
                SegmentStarted(turn_id=self.turn_id, text=self._segment, start_sample=self.samples)
            )
            self.spoken.append((self.samples, self._segment))
            self._announced = True
        for pcm in frames(to_pcm16(audio), self._frame_samples):
            frame = AudioFrame(self.turn_id, self._seq, self.samples, pcm)
            self._seq += 1
            self.samples += frame.samples
            out.append(frame)
        return out
