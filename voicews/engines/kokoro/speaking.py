"""How both Kokoro engines speak a segment: piece by piece, or, cut mid-sentence, said with the
word its sentence goes on with and cut off where that word starts (``SynthesisOptions.then``).

Kokoro reads a segment given alone as a whole utterance, and its end sinks toward a statement's
close. With the next word in its input, its prosody carries the sentence on. Over 67 ends of
segments cut mid-sentence from held-out sentences (``python -m bench kokoro_endings``), ends
falling as a statement does: am_michael 41 alone, 11 with the next word, 9 inside the whole
sentence; af_heart 6, 1 and 4. The end's pitch sat 1.4-1.7 semitones from the same words' end
inside the whole sentence with the next word, 3.4-3.7 alone (median). The decoder renders only
a few frames past the next word's start (:data:`CUT_FRAMES`), fewer than the silence a piece
rendered whole ends with: 199-207 against 252-271 ms a segment, and as loud (+0.4-0.9 dB).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import numpy.typing as npt

from ...alignment import word_starts
from ...audio import Audio
from ..base import SynthesisOptions, WordStarts
from .assets import SAMPLES_PER_FRAME
from .phonemes import inference_budget, phonemize
from .timing import Tail, tail
from .words import PhonemeTimeline, word_phonemes

CUT_FRAMES = 4
"""Frames rendered past the next word's start: the decoder's edge falls after the cut (2 or 8
moved the ends' pitch and loudness no more than the tracker's noise)."""
FADE = 256
"""Samples faded out before the cut, where the next word's onset would start."""

Render = Callable[[str, Tail], tuple[Audio, npt.NDArray[np.int64]]]
"""A piece's phonemes, rendered up to its :class:`.timing.Tail`: its audio (with the level the
crop took given back, not yet clipped) and the frames of each of its tokens (pads included)."""


def speak(
    text: str, options: SynthesisOptions, language: str, render: Render
) -> Iterator[Audio | WordStarts]:
    """``text``'s audio and word starts as ``render`` makes them, the words after the audio; said
    with ``options.then`` where the two are one piece and that word can be placed, its words
    then first."""
    budget = inference_budget(options.speed)
    if options.then:
        said = f"{text} {options.then}"
        pieces = phonemize(said, language, budget)
        start = None
        if len(pieces) == 1:
            start = next_word_token(said, pieces[0], language, len(text.split()))
        if start is not None:
            audio, kept = cut(*render(pieces[0], Tail(start, CUT_FRAMES)), start)
            timeline = PhonemeTimeline()
            timeline.add(pieces[0], kept, len(audio))
            if (words := timeline.words(text, language)) is not None:
                yield words
            yield np.clip(audio, -1.0, 1.0)
            return
    timeline = PhonemeTimeline()
    crop = options.eager or options.lean
    for phonemes in phonemize(text, language, budget):
        audio, kept = render(phonemes, tail(phonemes, options.speed, crop))
        timeline.add(phonemes, kept, len(audio))
        yield np.clip(audio, -1.0, 1.0)
    if (words := timeline.words(text, language)) is not None:
        yield words


def next_word_token(said: str, phonemes: str, language: str, word: int) -> int | None:
    """The token of ``[PAD, *phonemes, PAD]`` at which word ``word`` of ``said`` starts (each
    word's phonemes aligned with the piece's); None where it cannot be placed, or where no
    sound comes before it."""
    spoken = [("^", 0), *((p, i + 1) for i, p in enumerate(phonemes)), ("$", len(phonemes) + 1)]
    starts = word_starts([word_phonemes(w, language) for w in said.split()], spoken)
    if starts is None or word >= len(starts) or starts[word] <= 1:
        return None
    return starts[word]


def cut(
    audio: Audio, kept: npt.NDArray[np.int64], token: int
) -> tuple[Audio, npt.NDArray[np.int64]]:
    """``audio`` up to where ``token`` starts, faded out there, and ``kept`` (each token's
    frames) with none from ``token`` on."""
    frames = kept.copy()
    frames[token:] = 0
    out = audio[: int(frames.sum()) * SAMPLES_PER_FRAME].copy()
    fade = min(FADE, out.size)
    out[out.size - fade :] *= np.cos(np.linspace(0, np.pi / 2, fade, dtype=np.float32))
    return out, frames
