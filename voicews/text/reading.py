"""One segment as it is read: the text to synthesize, and where each written word's speech
starts among the spoken words, so word marks and heard text stay keyed to what was written."""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from .normalize import NormalizeOptions, StreamNormalizer

_WORD = re.compile(r"\S+")


@dataclass(frozen=True, slots=True)
class Reading:
    spoken: str
    """What the engine is given."""
    first_spoken: tuple[int, ...]
    """For each written word, the index of the first spoken word that says it (a written word
    read as nothing says it with the next)."""
    spoken_words: int

    def written_starts(self, starts: Sequence[int]) -> list[int] | None:
        """The engine's start of each spoken word, as the start of each written word; None if
        the engine placed another number of words than it was given."""
        if len(starts) != self.spoken_words or not starts:
            return None
        return [starts[index] for index in self.first_spoken]


def read(text: str, options: NormalizeOptions) -> Reading:
    """``text``, one segment of whole tokens, read as a person would say it."""
    normalizer = StreamNormalizer(options)
    spoken, offsets, owners, written = "", [], [], -1
    for piece in normalizer.push(text) + normalizer.flush():
        if piece.original.strip() and (written < 0 or piece.original[:1].isspace()):
            written += 1  # a piece is one token and the whitespace before it
        offsets.append(len(spoken))
        owners.append(max(written, 0))
        spoken += piece.spoken
    words = [match.start() for match in _WORD.finditer(spoken)]
    first: dict[int, int] = {}
    for index, start in enumerate(words):
        first.setdefault(owners[bisect_right(offsets, start) - 1], index)
    following = len(words) - 1
    starts = []
    for word in reversed(range(len(text.split()))):
        following = first.get(word, following)
        starts.append(max(following, 0))
    return Reading(spoken.strip(), tuple(reversed(starts)), len(words))
