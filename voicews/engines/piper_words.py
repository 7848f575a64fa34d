"""Word timings for Piper voices (both engines): phoneme ids and their durations back to
phonemes, then to the text's words (see :mod:`voicews.alignment`)."""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ..alignment import word_starts
from .base import WordStarts

if TYPE_CHECKING:
    from piper import PiperVoice

BOS, EOS, PAD = "^", "$", "_"
ESPEAK_LOCK = threading.Lock()
"""espeak-ng keeps global state (its voice, its buffers): every caller in voicews holds this."""


def phonemize(voice: PiperVoice, text: str) -> list[list[str]]:
    """Piper's phonemes per sentence. espeak-ng keeps global state: one caller at a time."""
    with ESPEAK_LOCK:
        return voice.phonemize(text)


class WordPlacer:
    """Places a text's words on the durations of the phoneme ids it was spoken with."""

    def __init__(self, voice: PiperVoice) -> None:
        self._voice = voice
        self._ids = voice.config.phoneme_id_map

    def place(
        self, text: str, sentences: Sequence[tuple[list[str], npt.NDArray[np.int64]]]
    ) -> WordStarts | None:
        """``sentences``: each spoken sentence's phonemes and samples per phoneme id, in
        order; the audio is their concatenation. None where the words cannot be placed."""
        spoken: list[tuple[str, int]] = []
        offset = 0
        for phonemes, id_samples in sentences:
            placed = self._spoken(phonemes, id_samples, offset)
            if placed is None:
                return None
            spoken += placed
            offset += int(id_samples.sum())
        starts = word_starts([self._phonemes(word) for word in text.split()], spoken)
        return None if starts is None else WordStarts(tuple(starts))

    def _spoken(
        self, phonemes: list[str], id_samples: npt.NDArray[np.int64], offset: int
    ) -> list[tuple[str, int]] | None:
        """Each phoneme with its start sample, laid out as ``phonemes_to_ids`` lays out ids:
        BOS and every known phoneme followed by a pad, then EOS."""
        pad = len(self._ids.get(PAD, ()))
        known = [p for p in phonemes if p in self._ids]
        counts = [len(self._ids[p]) + pad for p in [BOS, *known]] + [len(self._ids[EOS])]
        if sum(counts) != len(id_samples):
            return None
        bounds = np.concatenate([[0], np.cumsum(counts)])
        starts = offset + np.concatenate([[0], np.cumsum(id_samples)])[bounds[:-1]]
        return list(zip([BOS, *known, EOS], starts.tolist(), strict=True))

    @functools.lru_cache(maxsize=4096)  # noqa: B019 - one placer per engine, words repeat
    def _phonemes(self, word: str) -> list[str]:
        """A word's phonemes, phonemized alone (they are aligned against the sentence's)."""
        return [p for sentence in phonemize(self._voice, word) for p in sentence]
