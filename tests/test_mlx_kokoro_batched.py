"""Kokoro's sentences begun and decoded together by the compute worker, with the real model on
MLX's CPU backend: padded to the longest and masked, each sentence's prosody and audio are
what it has alone.

MLX's CPU backend takes some ten seconds of compute per second of Kokoro's audio, so the
decoder is checked on a few frames and the worker on two one-word sentences. Skipped where
MLX is not installed.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core", exc_type=ImportError)
pytest.importorskip("onnx")

from test_worker import Recorder  # noqa: E402

from bench.engines.measures import snr_db  # noqa: E402
from conftest import timeout  # noqa: E402
from voicews.compute.execution import ComputeWorker  # noqa: E402
from voicews.compute.jobs import JobAudio, JobWords, synthesis  # noqa: E402
from voicews.engines.base import Engine, SynthesisOptions, WindowedEngine, WordStarts  # noqa: E402
from voicews.engines.kokoro.assets import load_voice, model_path, style  # noqa: E402
from voicews.engines.kokoro.mlx_engine import MlxKokoroEngine, Sentence  # noqa: E402
from voicews.engines.kokoro.mlx_layers import Lengths  # noqa: E402
from voicews.engines.kokoro.mlx_model import Kokoro, Prosody  # noqa: E402
from voicews.engines.kokoro.mlx_weights import load_weights  # noqa: E402
from voicews.engines.kokoro.phonemes import PAD, phonemize, tokenize  # noqa: E402
from voicews.engines.kokoro.timing import tail  # noqa: E402

TEXTS = {"a": "Hello.", "b": "Okay."}  # 36 and 37 frames: one bucket (33-64)
LEAN = SynthesisOptions(lean=True)


@pytest.fixture(scope="module")
def weights_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("voicews-cache")
    load_weights(model_path(), directory)
    return directory


def prosody_of(model: Kokoro, text: str, voice: str) -> tuple[Prosody, mx.array]:
    (phonemes,) = phonemize(text)
    tokens = tokenize(phonemes)
    row = mx.array(style(load_voice(voice), len(tokens))[0])
    return model.prosody([PAD, *tokens, PAD], row), row[:128]


def test_a_padded_batch_knows_each_utterances_samples_on_every_time_axis() -> None:
    lengths = Lengths([3, 5])
    assert list(lengths.valid(5)) == [3, 5]  # frames
    assert list(lengths.valid(10)) == [6, 10]  # F0 values
    assert list(lengths.valid(601)) == [361, 601]  # the second stage: 120 a frame and one
    mask, count = lengths.mask(10)
    assert mask.shape == (2, 10, 1) and np.array(mask)[0, :, 0].tolist() == [1] * 6 + [0] * 4
    assert np.array(count).ravel().tolist() == [6, 10]
    with pytest.raises(ValueError, match="no time axis"):
        lengths.valid(7)


def test_utterances_decoded_together_are_each_alone(weights_cache: Path) -> None:
    """Three cuts of two voices' sentences, 5, 10 and 7 frames: one pass of the padded batch
    gives each the audio it has decoded alone, to float rounding."""
    model = Kokoro(load_weights(model_path(), weights_cache))
    (one, heart), (two, michael) = (
        prosody_of(model, "Hello there, friend.", "af_heart"),
        prosody_of(model, "Good morning to you.", "am_michael"),
    )
    cuts = [(one, heart, 20, 25), (two, michael, 10, 20), (one, heart, 30, 37)]
    asrs = [p.asr[a:b] for p, _, a, b in cuts]
    f0s = [p.f0[2 * a : 2 * b] for p, _, a, b in cuts]
    ns = [p.n[2 * a : 2 * b] for p, _, a, b in cuts]
    styles = [s for _, s, _, _ in cuts]
    together = model.decoder.batch(asrs, f0s, ns, mx.stack(styles))
    for asr, f0, n, s, got in zip(asrs, f0s, ns, styles, together, strict=True):
        alone = np.array(model.decoder(asr, f0, n, s))
        assert np.array(got).shape == alone.shape == (asr.shape[0] * 600,)
        np.testing.assert_allclose(np.array(got), alone, atol=2e-5)


def test_sentences_begun_together_get_the_prosody_each_gets_alone(weights_cache: Path) -> None:
    """Three sentences of 22, 37 and 9 tokens in two voices, at two speeds, one cropped at its
    end: one padded pass (attention, LSTMs, norms, convolutions over each one's own tokens and
    frames) gives each the durations, text features, F0 and energy it has alone."""
    model = Kokoro(load_weights(model_path(), weights_cache))
    sentences = []
    for text, voice, speed, cropped in (
        ("Hello there, friend.", "af_heart", 1.0, False),
        ("Good morning to you, how are you?", "am_michael", 1.2, False),
        ("Okay.", "af_heart", 1.0, True),
    ):
        (phonemes,) = phonemize(text)
        tokens = tokenize(phonemes)
        row = mx.array(style(load_voice(voice), len(tokens))[0])
        end = tail(phonemes, speed, crop=cropped)
        sentences.append(Sentence([PAD, *tokens, PAD], row, speed, end))
    assert [len(s.tokens) for s in sentences] == [22, 37, 9]  # padded to 37
    together = model.prosodies(sentences)
    for sentence, got in zip(sentences, together, strict=True):
        alone = model.prosody(sentence.tokens, sentence.style, sentence.speed, tail=sentence.tail)
        np.testing.assert_array_equal(got.durations, alone.durations)
        np.testing.assert_array_equal(got.modelled, alone.modelled)
        np.testing.assert_array_equal(np.array(got.asr), np.array(alone.asr))
        for mine, theirs in ((got.f0, alone.f0), (got.n, alone.n)):
            np.testing.assert_allclose(np.array(mine), np.array(theirs), rtol=1e-6, atol=1e-5)


def test_sessions_decoded_together_get_the_audio_each_gets_alone(
    weights_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two one-word sentences through the worker's batched lane: begun together (``begin``)
    and decoded in one step, each gets the frames, word starts and audio ``synthesize`` gives
    it (``lean``: the silence after each one's last sound is not rendered, on either side).

    The audio to 30 dB, not to float rounding: the F0 made together differs from the F0 made
    alone by float rounding (above), and the generator reads the harmonic source's phases,
    which jump by pi where a bin's value crosses the negative real axis (the model's own
    ``angle``). One unit in the last place of F0 alone moved these words' audio to 35-37 dB
    of it; the decoder given the same inputs is exact (above)."""
    monkeypatch.setenv("VOICEWS_MLX_DECODE", "whole")  # a GPU's way, on MLX's CPU backend
    monkeypatch.setenv("VOICEWS_MLX_MAX_BATCH", "4")
    monkeypatch.setenv("VOICEWS_MLX_BATCH_WAIT_MS", "20")
    engines: list[MlxKokoroEngine] = []

    def build() -> Engine:
        engines.append(MlxKokoroEngine(cache_dir=weights_cache))
        return engines[0]

    worker, rec = ComputeWorker(build), Recorder()
    worker.start()
    try:
        assert worker.warmed.wait(timeout(60))
        assert isinstance(engines[0], WindowedEngine) and engines[0].batched
        now = time.monotonic()
        for offset, (name, text) in enumerate(TEXTS.items()):
            work = synthesis(text, LEAN)
            worker.submit(rec.job(name, work, deadline=now + offset / 1000))
        for _ in TEXTS:  # MLX's CPU backend: some ten seconds a second of audio
            assert rec.finished.acquire(timeout=timeout(180))
    finally:
        worker.stop()
    assert worker.stats.largest_batch == 2  # both sentences in one decoder step
    assert worker.stats.begun_sentences == 2  # and begun together
    alone = engines[0]
    for name, text in TEXTS.items():
        got = [e.audio for e in rec.of(name) if isinstance(e, JobAudio)]
        words = [e.starts for e in rec.of(name) if isinstance(e, JobWords)]
        items = list(alone.synthesize(text, LEAN))
        want = [a for a in items if not isinstance(a, WordStarts)]
        assert [len(a) for a in got] == [len(a) for a in want]
        mine, theirs = np.concatenate(got), np.concatenate(want)
        assert snr_db(mine, theirs) > 30.0
        assert words == [a for a in items if isinstance(a, WordStarts)]
