"""Kokoro's assets and phonemizer (shared by its engines): the joined model, the shipped voices,
text -> phonemes -> token ids."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
import pytest

from voicews.cache import CACHE_ENV
from voicews.engines import engine_voices
from voicews.engines.kokoro import assets
from voicews.engines.kokoro.phonemes import (
    MAX_PHONEMES,
    _fit,
    inference_budget,
    phonemize,
    tokenize,
)


def test_the_model_is_joined_once_into_the_cache_and_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    path = assets.model_path()
    assert path == tmp_path / "kokoro" / assets.MODEL_NAME
    assert path.stat().st_size == 92_361_271
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest.startswith(assets.MODEL_SHA256_PREFIX)
    assert [p.name for p in path.parent.iterdir()] == [assets.MODEL_NAME]  # no temporary left
    mtime = path.stat().st_mtime_ns
    assert assets.model_path() == path and path.stat().st_mtime_ns == mtime


def test_shipped_voices_load_as_style_packs() -> None:
    assert assets.DEFAULT_VOICE in assets.voices()
    assert {"af_heart", "bm_george"} <= set(assets.voices())
    for name in assets.voices():
        pack = assets.load_voice(name)
        assert pack.shape == (510, 1, 256) and pack.dtype == np.float32
        assert np.isfinite(pack).all() and 0.05 < float(np.abs(pack).mean()) < 1.0
    pack = assets.load_voice("af_heart")
    assert assets.style(pack, 12).shape == (1, 256)
    assert np.array_equal(assets.style(pack, 12), pack[11])
    assert np.array_equal(assets.style(pack, 9999), pack[-1])
    assert assets.language("af_heart") == "en-us" and assets.language("bf_emma") == "en"


def test_an_unknown_voice_is_refused_naming_the_choices() -> None:
    with pytest.raises(ValueError, match=r"unknown Kokoro voice 'zz_nobody'.*af_heart"):
        assets.load_voice("zz_nobody")
    with pytest.raises(ValueError, match=r"unknown Kokoro voice 'zz_nobody'.*af_heart"):
        engine_voices("kokoro", "zz_nobody")
    with pytest.raises(ValueError, match=r"unknown engine 'nope'.*kokoro"):
        engine_voices("nope")
    assert engine_voices("kokoro", "bm_george")[0] == "bm_george"
    assert set(engine_voices("kokoro")) == set(assets.voices())
    assert engine_voices("piper") == ("en_US-joe-medium",)
    assert engine_voices("piper", "/x/en_GB-alba-medium.onnx") == ("en_GB-alba-medium",)


def test_phonemes_keep_clause_punctuation_and_split_sentences() -> None:
    assert phonemize("Hello, world! How are you?") == ["həlˈoʊ, wˈɜːld!", "hˈaʊ ɑːɹ juː?"]
    assert phonemize("Hello, world!", "en") == ["həlˈəʊ, wˈɜːld!"]  # British
    # hexgrad's fixes: "pm" without the palatal mark, American "ninety" with a flap-like d.
    assert phonemize("It is 5:30 pm, ninety") == ["ɪɾ ɪz fˈaɪv θˈɜːɾi pˌiːjˈɛm, nˈaɪndi"]
    # espeak reads the whole text: a decimal point stays one number, a title no sentence end.
    [spoken] = phonemize("Dr. Smith paid $3.50.")
    assert "pɔɪnt fˈaɪv" in spoken and "dˈɑːktɚ smˈɪθ" in spoken
    vocab = assets.vocab()
    for piece in phonemize("He said “yes” (quietly) — then left… Ünïcödé café 日本."):
        assert piece and all(p in vocab for p in piece)
        assert tokenize(piece) == [vocab[p] for p in piece]


def test_text_is_text_and_what_espeak_cannot_take_is_dropped() -> None:
    # espeak's phoneme input ([[...]]) would say "hello"; here it is read as the characters.
    [read] = phonemize("[[h@l'oU]]")
    assert "həlˈoʊ" not in read and "æt" in read
    # A NUL or an unpaired surrogate (valid JSON) would break espeak-ng: the rest is spoken.
    assert phonemize("a\x00b \ud800 c") == phonemize("a b c")
    assert phonemize("") == phonemize("...") == phonemize(" \n ") == []


def test_long_sentences_are_cut_to_the_context_at_the_best_boundary() -> None:
    pieces = phonemize("word " * 300 + ".")
    assert len(pieces) > 1 and all(len(p) <= assets.MAX_TOKENS for p in pieces)
    assert all(not p.startswith(" ") and not p.endswith(" ") for p in pieces)
    # clauses first, then words, then mid-word as a last resort
    assert _fit(["ab,", "cd."], 5) == ["ab,", "cd."]
    assert _fit(["ab cd ef."], 5) == ["ab cd", "ef."]
    assert _fit(["abcdefgh"], 3) == ["abc", "def", "gh"]


def test_an_inference_takes_at_most_the_budget_in_near_equal_pieces() -> None:
    """One Kokoro inference of a whole 510-token context holds the worker for seconds: a
    clause over the budget is cut between words into near-equal pieces; slower speech, whose
    every token is longer, gets proportionally fewer tokens per inference."""
    assert inference_budget(1.0) == inference_budget(4.0) == MAX_PHONEMES
    assert inference_budget(0.5) == MAX_PHONEMES // 2 and inference_budget(0.25) == 25
    text = (
        "The morning train runs along the river past the old mill and the orchards and the"
        " fields of wheat until it reaches the harbour where the boats come in at dawn."
    )
    (whole,) = phonemize(text)
    for speed in (1.0, 0.5):
        budget = inference_budget(speed)
        pieces = phonemize(text, limit=budget)
        print(f"speed {speed}: pieces of {[len(p) for p in pieces]} tokens")
        assert len(pieces) == math.ceil(len(whole) / budget)
        assert all(len(p) <= budget for p in pieces)
        assert max(map(len, pieces)) - min(map(len, pieces)) < budget // 3
        assert " ".join(pieces) == whole  # cut between words, nothing lost
    # A short clause stays whole; clauses are cut at their punctuation first.
    assert phonemize("Hello, world! How are you?", limit=13) == [
        "həlˈoʊ,",
        "wˈɜːld!",
        "hˈaʊ ɑːɹ juː?",
    ]
