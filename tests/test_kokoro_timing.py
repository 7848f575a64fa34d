"""Where a Kokoro piece's rendering ends, and the level given back for what it leaves out: pure
functions of the phonemes and frames (``voicews.engines.kokoro.timing``), no model run."""

from __future__ import annotations

import numpy as np

from voicews.engines.kokoro.timing import (
    CLAUSE_TAIL,
    LEVEL_DB,
    SENTENCE_TAIL,
    UNCROPPED,
    WORD_TAIL,
    Tail,
    level,
    rendered,
    tail,
)


def test_a_piece_ends_its_tail_after_its_last_sounding_phoneme_by_how_it_ends() -> None:
    # Indices count the leading pad: "ɹ" is the 11th symbol, the 12th token.
    assert tail("həlˈoʊ ðˈɛɹ.") == Tail(11, SENTENCE_TAIL)
    assert tail("həlˈoʊ ðˈɛɹ, ") == Tail(11, CLAUSE_TAIL)
    assert tail("həlˈoʊ ðˈɛɹ") == Tail(11, WORD_TAIL)
    assert tail("ʃˈʊɹ?!") == Tail(4, SENTENCE_TAIL)


def test_slower_speech_keeps_more_frames_and_an_uncropped_tail_keeps_all() -> None:
    assert tail("ʃˈʊɹ,", speed=0.5).frames == 2 * CLAUSE_TAIL
    assert tail("ʃˈʊɹ,", speed=2.0).frames == CLAUSE_TAIL  # never fewer than at speed 1
    assert tail("ʃˈʊɹ,", crop=False).frames == UNCROPPED


def test_the_frames_rendered_stop_the_tail_after_the_last_tokens_start() -> None:
    frames = np.array([[5.0, 3.0, 4.0, 20.0, 10.0]], dtype=np.float32)  # the graph's (1, T)
    assert rendered(frames, Tail(3, 6)).tolist() == [5, 3, 4, 6, 0]
    assert rendered(frames, Tail(3, 25)).tolist() == [5, 3, 4, 20, 5]
    assert rendered(frames, Tail(3, UNCROPPED)).tolist() == [5, 3, 4, 20, 10]


def test_the_level_given_back_grows_with_the_share_of_frames_left_out() -> None:
    assert level([5, 3, 4, 20, 10], [5, 3, 4, 20, 10]) == 1.0
    gain = level([5, 3, 4, 20, 10], [5, 3, 4, 6, 0])
    assert np.isclose(20 * np.log10(gain), LEVEL_DB * 24 / 42)
