"""Where each word of a segment starts, from the frames Kokoro gives each phoneme token.

Both Kokoro engines render a segment piece by piece (:func:`.phonemes.phonemize`), and each
piece's frames per token times :data:`.assets.SAMPLES_PER_FRAME` are its audio exactly; the
words are placed on those phonemes as for Piper (:func:`voicews.alignment.word_starts`).
"""

from __future__ import annotations

import functools

import numpy as np
import numpy.typing as npt

from ...alignment import word_starts
from ..base import WordStarts
from .assets import SAMPLES_PER_FRAME
from .phonemes import phonemize


class PhonemeTimeline:
    """The phonemes a segment's pieces spoke so far, each with the sample it starts at."""

    def __init__(self) -> None:
        self._spoken: list[tuple[str, int]] = []
        self._samples = 0
        self._timed = True

    def add(self, phonemes: str, frames: npt.ArrayLike, audio_samples: int) -> None:
        """One piece: its phonemes, the frames of each token (the pads around it included)
        and the length of the audio it gave."""
        samples = np.asarray(frames).ravel().astype(np.int64) * SAMPLES_PER_FRAME
        starts = self._samples + np.concatenate([[0], np.cumsum(samples)[:-1]])
        self._spoken += zip(["^", *phonemes, "$"], starts.tolist(), strict=True)
        self._timed = self._timed and int(samples.sum()) == audio_samples
        self._samples += audio_samples

    def words(self, text: str, language: str) -> WordStarts | None:
        """Where each word of ``text`` starts; None when nothing was spoken, when the frames
        do not add up to the audio, or when the alignment is not trustworthy."""
        if not self._spoken or not self._timed:
            return None
        placed = word_starts([word_phonemes(w, language) for w in text.split()], self._spoken)
        return None if placed is None else WordStarts(tuple(placed))


@functools.lru_cache(maxsize=4096)
def word_phonemes(word: str, language: str) -> str:
    """A word's phonemes, phonemized alone (they are aligned against the sentence's)."""
    return " ".join(phonemize(word, language))
