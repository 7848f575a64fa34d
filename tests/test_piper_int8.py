"""Piper's int8 decoder (``engines/piper_int8.py``): made the same every time, heard close to the
float one, and run on the lanes' shared-weight sessions."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest

from conftest import side_by_side
from voicews.engines.ort import LaneSessions, external_weights
from voicews.engines.piper import PiperEngine, bundled_voice, split_at_decoder, with_durations
from voicews.engines.piper_int8 import FLOAT_ENV, QUANTIZED, calibration, int8_decoder, quantize

TEXT = "Of course, I will walk you through the setup one step at a time."


@pytest.fixture(scope="module")
def engine() -> Iterator[PiperEngine]:
    yield PiperEngine()


def float_decoder() -> Path:
    split = split_at_decoder(with_durations(bundled_voice()))
    assert split is not None
    return split[1]


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


def test_the_float_decoder_stays_a_switch_away(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FLOAT_ENV, "1")
    engine = PiperEngine()
    assert engine._decoder is not None
    model = engine._decoder._model
    graph = onnx.load(str(model), load_external_data=False).graph
    assert "QLinearConv" not in {n.op_type for n in graph.node}
    assert model == external_weights(float_decoder())


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
