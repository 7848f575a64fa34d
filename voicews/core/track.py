"""One turn's audio as it goes out: stitched, encoded, framed, and placed.

The turn's segments are stitched into one stream at the engine's rate, then resampled and
encoded into numbered frames in the turn's output format; each segment is announced at its
start sample before its first frame, and its words too where the engine placed them, so a
cut turn can say which words had started playing. Every position on the wire counts samples
at the output rate; the track keeps its own at the engine's and maps them.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..audio import Audio, StitchConfig, Stitcher
from ..encoding import FrameEncoder
from ..text.segmenter import Boundary
from .events import AudioFrame, Outgoing, SegmentStarted, WordMark, Words


class Track:
    def __init__(
        self,
        turn_id: str,
        sample_rate: int,
        encoder: FrameEncoder,
        stitch: StitchConfig,
        context_id: str | None = None,
    ) -> None:
        """``sample_rate`` is the engine's; ``encoder`` makes the frames (a cut turn just
        drops it); every event and frame names ``context_id``."""
        self.turn_id = turn_id
        self.context_id = context_id
        self.samples = 0
        """Samples framed so far, at the output rate."""
        self.spoken: list[tuple[int, str]] = []
        """(start sample at the engine's rate, text) of each segment, or of its words once
        placed."""
        self._stitcher = Stitcher(sample_rate, stitch)
        self._encoder = encoder
        self._released = 0  # engine-rate samples handed to the encoder
        self._seq = 0
        self._segment: str | None = None  # the text of the segment being synthesized
        self._spoken: str | None = None  # what is synthesized for it, where read otherwise
        self._announced = False

    def begin(self, text: str, spoken: str | None = None) -> None:
        """A segment's synthesis starts; it is announced with its first audio, with what is
        ``spoken`` for it where that is not its text."""
        self._stitcher.begin_segment()
        self._segment, self._announced = text, False
        self._spoken = spoken if spoken != text else None

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
        placed = [
            (base + max(0, start - skipped), word)
            for word, start in zip(words, starts, strict=True)
        ]
        self.spoken[-1:] = placed
        marks = [
            WordMark(text=word, start_sample=self._encoder.position(at)) for at, word in placed
        ]
        return Words(turn_id=self.turn_id, words=marks, context_id=self.context_id)

    def end(self, boundary: Boundary) -> list[Outgoing]:
        """The segment is synthesized; its end is paused as fits ``boundary``."""
        out = self._out(self._stitcher.end_segment(boundary))
        self._segment = None
        return out

    def finish(self) -> list[Outgoing]:
        """The turn's last audio, faded out (a failed segment's is not announced), and what
        the encoder still holds."""
        self._segment = None
        return self._out(self._stitcher.finish(), last=True)

    def heard(self, samples: int) -> str:
        """The words (or segments) that had started within the first ``samples`` (at the
        output rate)."""
        position = self._encoder.position
        return " ".join(text for start, text in self.spoken if position(start) < samples)

    def _out(self, audio: Audio, last: bool = False) -> list[Outgoing]:
        out: list[Outgoing] = []
        if audio.size and self._segment is not None and not self._announced:
            start = self._encoder.position(self._released)
            segment = SegmentStarted(
                self.turn_id, self._segment, start, self._spoken, self.context_id
            )
            out.append(segment)
            self.spoken.append((self._released, self._segment))
            self._announced = True
        self._released += audio.size
        chunks = self._encoder.push(audio) if audio.size else []
        for data, samples in chunks + (self._encoder.finish() if last else []):
            frame = AudioFrame(
                self.turn_id, self._seq, self.samples, data, samples, self.context_id
            )
            out.append(frame)
            self._seq += 1
            self.samples += samples
        return out
