"""Where each word of a text starts in the audio, from how long each spoken phoneme lasted.

Piper's duration predictor says how many samples each phoneme gets, but espeak's phonemes do
not map one to one onto the text's words: it joins short words ("in the" is spoken as one word) and
expands others ("1999" becomes three words). So each text word is phonemized alone and that
sequence is aligned with the spoken one, symbol by symbol; a word starts where its first
matched symbol was spoken, and a word with no match (a reduced "a") where its predecessor's
last matched symbol ended.
"""

from __future__ import annotations

from collections.abc import Sequence
from difflib import SequenceMatcher

SILENT = frozenset("\u02c8\u02cc ,.!?;:\u2014\u2013-'\"()\u2026^$_")
"""Stress marks, word breaks, punctuation and Piper's sentence markers: no sound of their own."""

MIN_MATCHED = 0.5
"""Below this share of the words' symbols found in the speech, the phonemizations differ too
much (another language, a voice with its own phoneme set) to place words: none are given."""


def word_starts(
    words: Sequence[Sequence[str]], spoken: Sequence[tuple[str, int]]
) -> list[int] | None:
    """Each word's start sample, non-decreasing, or None when the alignment is not trustworthy.

    ``words``: every text word's phonemes, phonemized alone. ``spoken``: the phonemes as
    spoken, each with the sample it starts at.
    """
    symbols: list[str] = []
    owner: list[int] = []
    for index, phonemes in enumerate(words):
        kept = [p for p in phonemes if p not in SILENT]
        symbols += kept
        owner += [index] * len(kept)
    voiced = [(p, start) for p, start in spoken if p not in SILENT]
    if not voiced:
        return None
    matcher = SequenceMatcher(None, symbols, [p for p, _ in voiced], autojunk=False)
    first: list[int | None] = [None] * len(words)
    after: list[int | None] = [None] * len(words)  # one past the last matched spoken symbol
    matched = 0
    for a, b, size in matcher.get_matching_blocks():
        for k in range(size):
            word = owner[a + k]
            if first[word] is None:
                first[word] = b + k
            after[word] = b + k + 1
        matched += size
    if matched < MIN_MATCHED * len(symbols):
        return None
    starts: list[int] = []
    previous_end = 0
    for word in range(len(words)):
        found = first[word]
        index = min(found if found is not None else previous_end, len(voiced) - 1)
        starts.append(max(voiced[index][1], starts[-1] if starts else 0))
        previous_end = after[word] or previous_end
    return starts
