"""Piper's text front end, shared by both engines: text to phonemes (markup escaped), phonemes
to inference-sized chunks, and word timings from phoneme ids and their durations (see
:mod:`voicews.alignment`)."""

from __future__ import annotations

import functools
import math
import re
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ..alignment import word_starts
from .base import WordStarts

if TYPE_CHECKING:
    from piper import PiperVoice

_MARKUP = re.compile(r"\[(?=\[)")  # piper-tts reads [[...]] as raw phonemes

MAX_PHONEMES = 200
"""Phonemes per inference at speed 1 (about 10 s of speech, what an ordinary 250-character
segment costs): a longer sentence, such as a 250-character run of CJK characters that this
voice spells out, is split, so that one step of the compute worker, and the memory one
inference takes, stay bounded whatever the text. Slower speeds stretch every phoneme and get
proportionally fewer."""
_CLAUSE_MARKS = frozenset(",;:")

BOS, EOS, PAD = "^", "$", "_"
ESPEAK_LOCK = threading.Lock()
"""espeak-ng keeps global state (its voice, its buffers): every caller in voicews holds this."""


def phonemize(voice: PiperVoice, text: str) -> list[list[str]]:
    """Piper's phonemes per sentence, text read as text: ``[[...]]``, which piper-tts would
    take as raw phonemes, is spoken as the characters it is. espeak-ng keeps global state:
    one caller at a time."""
    with ESPEAK_LOCK:
        return voice.phonemize(_MARKUP.sub("[ ", text))


def inference_chunks(sentences: Sequence[list[str]], speed: float) -> list[list[str]]:
    """Each sentence's phonemes, split where longer than the budget for ``speed``
    (``MAX_PHONEMES`` at speed 1) into near-equal pieces, each ending at a clause mark or
    word break where there is one."""
    budget = max(8, int(MAX_PHONEMES * min(speed, 1.0)))
    chunks: list[list[str]] = []
    for sentence in sentences:
        rest = sentence
        while len(rest) > budget:
            cut = _cut(rest, math.ceil(len(rest) / math.ceil(len(rest) / budget)))
            chunks.append(rest[:cut])
            rest = rest[cut:]
            while rest and rest[0] == " ":
                rest = rest[1:]
        if rest:
            chunks.append(rest)
    return chunks


def _cut(phonemes: list[str], limit: int) -> int:
    """How many phonemes the next piece takes: up to ``limit``, ending after a clause mark,
    else before a word break, in the second half of that span; else exactly ``limit``."""
    half = limit // 2
    for i in range(limit - 1, half, -1):
        if phonemes[i] in _CLAUSE_MARKS:
            return i + 1
    for i in range(limit, half, -1):
        if phonemes[i] == " ":
            return i
    return limit


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
