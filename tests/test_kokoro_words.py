"""Kokoro's word placement, shared by both engines: frames per token onto the words."""

from __future__ import annotations

from voicews.engines.base import WordStarts
from voicews.engines.kokoro.assets import SAMPLES_PER_FRAME
from voicews.engines.kokoro.phonemes import phonemize
from voicews.engines.kokoro.words import PhonemeTimeline


def test_words_start_where_their_phonemes_do_across_pieces() -> None:
    first, second = phonemize("Hello there. Goodbye now.", "en-us")  # two pieces
    timeline = PhonemeTimeline()
    for phonemes in (first, second):
        frames = [2, *[3] * len(phonemes), 2]  # a pad each side, three frames a symbol
        timeline.add(phonemes, frames, sum(frames) * SAMPLES_PER_FRAME)
    words = timeline.words("Hello there. Goodbye now.", "en-us")
    first_length = (4 + 3 * len(first)) * SAMPLES_PER_FRAME

    def at(piece: str, symbol: str) -> int:
        return (2 + 3 * piece.index(symbol)) * SAMPLES_PER_FRAME

    assert words == WordStarts(
        (
            at(first, "h"),
            at(first, "ð"),
            first_length + at(second, "ɡ"),
            first_length + at(second, "n"),
        )
    )


def test_no_words_without_speech_or_when_frames_miss_the_audio() -> None:
    assert PhonemeTimeline().words("Hello.", "en-us") is None
    (phonemes,) = phonemize("Hello.", "en-us")
    timeline = PhonemeTimeline()
    frames = [2, *[3] * len(phonemes), 2]
    timeline.add(phonemes, frames, sum(frames) * SAMPLES_PER_FRAME + 1)
    assert timeline.words("Hello.", "en-us") is None
