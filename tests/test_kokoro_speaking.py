"""Where a Kokoro segment said with its next word is cut: pure functions of the phonemes and
frames (``voicews.engines.kokoro.speaking``), no model run."""

from __future__ import annotations

import numpy as np

from voicews.engines.kokoro.assets import SAMPLES_PER_FRAME
from voicews.engines.kokoro.phonemes import phonemize
from voicews.engines.kokoro.speaking import FADE, cut, next_word_token


def test_the_next_word_starts_at_its_first_phonemes_token() -> None:
    (phonemes,) = phonemize("The next train to")
    assert phonemes == "ðə nˈɛkst tɹˈeɪn tuː"
    # Tokens count the leading pad: "t" of "tuː" is the 18th symbol, the 19th token.
    assert next_word_token("The next train to", phonemes, "en-us", 3) == 18
    (phonemes,) = phonemize("Hello world")
    assert next_word_token("Hello world", phonemes, "en-us", 1) == 8


def test_no_next_word_is_placed_past_the_text_or_with_nothing_before_it() -> None:
    (phonemes,) = phonemize("Hello world")
    assert next_word_token("Hello world", phonemes, "en-us", 2) is None
    assert next_word_token("Hello world", phonemes, "en-us", 0) is None


def test_the_cut_keeps_the_frames_before_the_token_and_fades_out() -> None:
    kept = np.array([2, 3, 4, 5, 1], dtype=np.int64)
    audio = np.ones(int(kept.sum()) * SAMPLES_PER_FRAME, dtype=np.float32)
    out, frames = cut(audio, kept, 3)
    assert frames.tolist() == [2, 3, 4, 0, 0] and kept.tolist() == [2, 3, 4, 5, 1]
    assert out.size == 9 * SAMPLES_PER_FRAME and out.dtype == np.float32
    assert out[:-FADE].min() == 1.0 and np.all(np.diff(out[-FADE:]) <= 0) and out[-1] < 0.01
