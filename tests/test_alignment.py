# ruff: noqa: RUF001, RUF003 - the phonemes are IPA, as espeak writes them
"""Placing a text's words on phoneme durations: pure, with phonemes as espeak gives them."""

from __future__ import annotations

from voicews.alignment import word_starts


def spoken(*phonemes_and_samples: tuple[str, int]) -> list[tuple[str, int]]:
    """Phonemes with their lengths in samples -> phonemes with their start samples."""
    out, start = [], 0
    for phoneme, samples in phonemes_and_samples:
        out.append((phoneme, start))
        start += samples
    return out


def test_words_espeak_joins_are_split_again() -> None:
    # "in the year": espeak speaks "ɪnðə jˈɪɹ", two words for three.
    speech = spoken(
        ("^", 100), ("ɪ", 10), ("n", 20), ("ð", 30), ("ə", 40), (" ", 5),
        ("j", 50), ("ˈ", 0), ("ɪ", 60), ("ɹ", 70), ("$", 0),
    )  # fmt: skip
    words = [["ɪ", "n"], ["ð", "ˈ", "ɛ"], ["j", "ˈ", "ɪ", "ɹ"]]  # "the" alone is stressed
    assert word_starts(words, speech) == [100, 130, 205]


def test_a_number_spoken_as_several_words_starts_at_its_first() -> None:
    speech = spoken(
        ("^", 0), ("p", 10), ("e", 10), (" ", 1), ("f", 10), ("o", 10), (" ", 1),
        ("t", 10), ("u", 10), (" ", 1), ("f", 10), ("o", 10),
    )  # fmt: skip
    words = [["p", "e"], ["f", "o", " ", "t", "u"], ["f", "o"]]  # "paid 42 for"
    assert word_starts(words, speech) == [0, 21, 63]


def test_a_word_with_no_match_starts_where_the_one_before_ended() -> None:
    # "it's a fact": the article is reduced ("ɐ") where alone it is "eɪ".
    speech = spoken(("ɪ", 10), ("t", 10), ("s", 10), (" ", 2), ("ɐ", 20), (" ", 2), ("f", 10))
    words = [["ɪ", "t", "s"], ["e", "ɪ"], ["f"]]
    # "eɪ" shares "ɪ" with "ɪts", but matching is in order: "ɐ" is where "a" begins.
    assert word_starts(words, speech) == [0, 32, 54]


def test_a_word_without_phonemes_is_placed_and_order_holds() -> None:
    speech = spoken(("a", 10), ("b", 10), ("c", 10))
    assert word_starts([["a"], [], ["—"], ["b"], ["c"]], speech) == [0, 10, 10, 10, 20]


def test_phonemes_that_do_not_match_place_no_word() -> None:
    speech = spoken(("a", 10), ("b", 10), ("c", 10))
    assert word_starts([["x", "y"], ["z"]], speech) is None
    assert word_starts([["a"]], []) is None
