"""Each segment end of a streamed reply beside the same words inside a whole-sentence synthesis.

The reference is the voice both servers run (Piper, the bundled ``en_US-joe-medium``), in this
process, given each sentence whole: the text the server synthesized for its segments (for
voicews what its normalizer made of them, ``segment.spoken``), joined. The segment's end in it
is the next word's start by the engine's word marks.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from bench.harness.connections import Turn
from bench.listening.figures import EndPair
from bench.listening.phrasing import sentence_ends, units
from bench.listening.pitch import end_contour, key_st, speech_end, whole_boundary
from voicews.audio import Audio


class Reference:
    """Whole-sentence syntheses, each made once; after the timed parts, never beside them."""

    def __init__(self) -> None:
        from voicews.engines.piper import PiperEngine

        self.engine = PiperEngine()
        self.sample_rate = self.engine.sample_rate
        self._made: dict[str, tuple[Audio, tuple[int, ...] | None]] = {}
        self.synthesis_s = 0.0
        """Seconds spent synthesizing, to tell from what the tracker costs."""

    def whole(self, text: str) -> tuple[Audio, tuple[int, ...] | None]:
        """The audio of ``text`` and where each of its words starts (None where unknown)."""
        if text not in self._made:
            from voicews.engines.base import SynthesisOptions, WordStarts

            chunks, marks = [], None
            started = time.perf_counter()
            for item in self.engine.synthesize(text, SynthesisOptions()):
                if isinstance(item, WordStarts):
                    marks = item.samples if len(item.samples) == len(text.split()) else None
                else:
                    chunks.append(item)
            self._made[text] = (np.concatenate(chunks), marks)
            self.synthesis_s += time.perf_counter() - started
        return self._made[text]


def turn_audio(turn: Turn) -> Audio:
    return np.frombuffer(turn.pcm, dtype="<i2").astype(np.float32) / 32768.0


def end_pairs(turn: Turn, sentences: Sequence[str], reference: Reference) -> list[EndPair]:
    """Every segment end of ``turn`` (a reply of ``sentences``) measured both ways; none where
    its audio was not kept, its rate is not the reference's, or its segments do not spell
    the reply."""
    audio = turn_audio(turn)
    ends = sentence_ends(sentences, turn.segments)
    if (
        not audio.size
        or ends is None
        or turn.sample_rate != reference.sample_rate
        or len(turn.segment_starts) != len(turn.segments)
    ):
        return []
    stops = [*turn.segment_starts[1:], audio.size]
    out = []
    for unit in units(ends):
        spoken = [turn.segment_spoken[i] for i in unit.segments]
        text = " ".join(spoken)
        whole, marks = reference.whole(text)
        heard = speech_end(whole, whole.size, reference.sample_rate)
        key = key_st(whole, reference.sample_rate)
        words = chars = 0
        for index, part, final in zip(unit.segments, spoken, unit.ends, strict=True):
            words += len(part.split())
            chars += len(part) + 1
            boundary, by_marks = whole_boundary(marks, words, min(1.0, chars / len(text)), heard)
            out.append(
                EndPair(
                    turn.server,
                    turn.rate,
                    final,
                    end_contour(audio, stops[index], turn.sample_rate),
                    end_contour(whole, boundary, reference.sample_rate),
                    by_marks,
                    key,
                )
            )
    return out
