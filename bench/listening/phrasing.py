"""What a listener hears of a reply's phrasing: its segments as words, and where they end.

Pure functions over texts, shared by ``continuity.py``, ``ttfa.py`` and their tests. A segment
is what one server synthesized in one go: a voicews ``segment`` event, or one of the sentences
wyoming-piper speaks one by one.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from voicews.text.segmenter import binds_forward

_SPACE = re.compile(r"\s+")


def char_deltas(text: str, size: int = 4) -> list[str]:
    """``text`` in deltas of ``size`` characters, cut anywhere (inside words and numbers too),
    as a client that forwards an LLM's bytes as they come may send them."""
    return [text[i : i + size] for i in range(0, len(text), size)]


def one_word_mid(segments: Sequence[str]) -> tuple[int, int]:
    """(segments of one word, segments) among those neither first nor last: heard as a
    prosody break. The first may be short by design and the last is what is left."""
    mid = segments[1:-1]
    return sum(len(text.split()) == 1 for text in mid), len(mid)


def split_phrases(segments: Sequence[str]) -> tuple[int, int]:
    """(cuts that split a phrase from its head, cuts): segment ends inside a reply, with no
    mark after them, on a word heard as leading into the next ("near | the beach", "should |
    bring it", "twelve | dollars": ``voicews.text.segmenter.binds_forward``)."""
    ends = [text.split()[-1] for text in segments[:-1] if text.split()]
    return sum(binds_forward(word) for word in ends), len(ends)


def words_per_segment(segments: Sequence[str]) -> list[int]:
    return [len(text.split()) for text in segments]


def median_words(turns: Sequence[Sequence[str]]) -> float:
    counts = [n for segments in turns for n in words_per_segment(segments)]
    return float(statistics.median(counts)) if counts else float("nan")


@dataclass(frozen=True, slots=True)
class Unit:
    """Consecutive segments from one sentence end to the next: spoken whole, the reference."""

    first: int
    """Index of its first segment."""
    ends: tuple[bool, ...]
    """For each of its segments, whether it ends a sentence (only the last one does)."""

    @property
    def segments(self) -> range:
        return range(self.first, self.first + len(self.ends))


def sentence_ends(sentences: Sequence[str], segments: Sequence[str]) -> list[bool] | None:
    """For each segment, whether it ends where one of the reply's ``sentences`` ends; None if
    the segments do not spell the reply (whitespace aside), so their ends cannot be placed."""
    ends, at = set(), 0
    for sentence in sentences:
        at += len(_SPACE.sub("", sentence))
        ends.add(at)
    if "".join(_SPACE.sub("", s) for s in segments) != "".join(
        _SPACE.sub("", s) for s in sentences
    ):
        return None
    out, at = [], 0
    for segment in segments:
        at += len(_SPACE.sub("", segment))
        out.append(at in ends)
    return out


def units(ends: Sequence[bool]) -> list[Unit]:
    """The segments grouped into units that each end a sentence (the last unit may not, when
    the reply's last segment does not close its sentence)."""
    out, first = [], 0
    for index, end in enumerate(ends):
        if end or index == len(ends) - 1:
            out.append(Unit(first, tuple(ends[first : index + 1])))
            first = index + 1
    return out
