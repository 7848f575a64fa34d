"""Piper's int8 decoder and front (``engines/piper_int8.py``): made the same every time, heard
close to the float ones, and run on the lanes' shared-weight sessions."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest

from conftest import side_by_side
from voicews.engines.ort import LaneSessions, external_weights
from voicews.engines.piper import PiperEngine, bundled_voice, split_at_decoder, with_durations
from voicews.engines.piper_int8 import (
    FLOAT_ENV,
    FRONT_QUANTIZED,
    QUANTIZED,
    calibration,
    int8_decoder,
    int8_front,
    quantize,
    quantize_front,
)

TEXT = "Of course, I will walk you through the setup one step at a time."


@pytest.fixture(scope="module")
def engine() -> Iterator[PiperEngine]:
    yield PiperEngine()


def float_decoder() -> Path:
    return float_graphs()[1]


def float_front() -> Path:
    return float_graphs()[0]


def float_graphs() -> tuple[Path, Path]:
    split = split_at_decoder(with_durations(bundled_voice()))
    assert split is not None
    return split


def snr(audio: np.ndarray, reference: np.ndarray) -> float:
    return float(10 * np.log10(np.sum(reference**2) / np.sum((audio - reference) ** 2)))


def test_the_first_two_stages_residual_convolutions_are_int8(engine: PiperEngine) -> None:
    graph = onnx.load(str(int8_decoder(float_decoder(), engine.quiet_latents))).graph
    quantized = {n.name.removesuffix("_quant") for n in graph.node if n.op_type == "QLinearConv"}
    convolutions = [
        n.name for n in onnx.load(str(float_decoder())).graph.node if n.op_type == "Conv"
    ]
    assert quantized == {name for name in convolutions if QUANTIZED.match(name)}
    assert len(quantized) == 12
    assert int8_decoder(float_decoder(), engine.quiet_latents) == int8_decoder(
        float_decoder(), engine.quiet_latents
    )  # made once


def test_it_is_built_the_same_byte_for_byte(engine: PiperEngine, tmp_path: Path) -> None:
    for name in ("a.onnx", "b.onnx"):
        quantize(float_decoder(), calibration(engine.quiet_latents), tmp_path / name)
    assert (tmp_path / "a.onnx").read_bytes() == (tmp_path / "b.onnx").read_bytes()


def test_its_audio_stays_close_to_the_float_decoders(engine: PiperEngine) -> None:
    """Measured 21.1 dB on this sentence (held-out sentences: 22 dB mean, 16 at worst);
    the words and DNSMOS are ``python -m bench piper_int8``'s."""
    floating = LaneSessions(float_decoder(), narrow=0)
    for frames in engine.quiet_latents(TEXT):
        whole = (0, frames.shape[2])
        reference = floating.run(None, {engine._decoder_input: frames})[0].reshape(-1)
        reference = np.clip(reference, -1.0, 1.0)
        assert 15.0 < snr(engine.decode(frames, whole), reference) < 40.0  # close, not float


def test_the_float_graphs_stay_a_switch_away(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FLOAT_ENV, "1")
    engine = PiperEngine()
    assert engine._decoder is not None
    for model, made_from in (
        (engine._decoder._model, float_decoder()),
        (engine._voice.session._model, float_front()),
    ):
        graph = onnx.load(str(model), load_external_data=False).graph
        assert "QLinearConv" not in {n.op_type for n in graph.node}
        assert model == external_weights(made_from)


def test_the_fronts_flow_convolutions_are_int8_its_noise_unseeded(
    engine: PiperEngine,
) -> None:
    """The text encoder and the duration predictor stay in float; the noise the voice draws
    stays unseeded (it was seeded only while the ranges were measured)."""
    made = int8_front(float_front(), engine._feeds)
    assert engine._voice.session._model == external_weights(made)
    graph = onnx.load(str(made)).graph
    quantized = {n.name.removesuffix("_quant") for n in graph.node if n.op_type == "QLinearConv"}
    convolutions = [n.name for n in onnx.load(str(float_front())).graph.node if n.op_type == "Conv"]
    assert quantized == {name for name in convolutions if FRONT_QUANTIZED.match(name)}
    assert len(quantized) == 40
    assert any(name.startswith(("/dp/", "/enc_p/")) for name in convolutions)
    noises = [n for n in graph.node if n.op_type.startswith("RandomNormal")]
    assert noises and not any(a.name == "seed" for n in noises for a in n.attribute)


def test_the_int8_front_is_built_the_same_byte_for_byte(
    engine: PiperEngine, tmp_path: Path
) -> None:
    feeds = [
        f for text in ("Good morning.", "Is there anything else?") for f in engine._feeds(text)
    ]
    for name in ("a.onnx", "b.onnx"):
        quantize_front(float_front(), feeds, tmp_path / name)
    assert (tmp_path / "a.onnx").read_bytes() == (tmp_path / "b.onnx").read_bytes()


def test_the_int8_front_keeps_the_float_ones_durations_near(engine: PiperEngine) -> None:
    """Noise off: the same phonemes last within a frame or two of the float front's (its
    latents and words are the bench's: ``python -m bench piper_int8 --front``)."""
    floating = LaneSessions(float_front(), narrow=0)
    for feeds in engine._feeds(TEXT):
        quiet = {**feeds, "scales": np.array([0.0, 1.0, 0.0], dtype=np.float32)}
        reference = floating.run(None, quiet)[1].reshape(-1)
        durations = engine._voice.session.run(None, quiet)[1].reshape(-1)
        assert abs(durations.sum() - reference.sum()) <= 4
        assert np.abs(durations - reference).max() <= 2


def test_its_shared_weight_sessions_side_by_side_give_what_one_alone_gives(
    engine: PiperEngine,
) -> None:
    sessions = LaneSessions(int8_decoder(float_decoder(), engine.quiet_latents), narrow=1)
    graph = onnx.load(str(sessions._model), load_external_data=False).graph
    shared = [t for t in graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert any(t.data_type == onnx.TensorProto.INT8 for t in shared)  # int8 weights shared
    feeds = {engine._decoder_input: engine.quiet_latents("Thank you.")[0]}
    alone = sessions.run(None, feeds)[0]
    results = side_by_side(lambda: sessions.run(None, feeds)[0], threads=3, runs=2)
    assert len(results) == 6
    for audio in results:
        np.testing.assert_allclose(audio, alone, atol=1e-4)
