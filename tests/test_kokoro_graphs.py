"""Kokoro's graphs made from the shipped int8 one: the float graph has no integer op left and
speaks as the int8 graph does; the static graph quantizes the generator's residual blocks with
fixed ranges and speaks the same text; both are made once into the cache."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from voicews.engines.base import SynthesisOptions, WordStarts  # noqa: E402
from voicews.engines.kokoro import KokoroEngine  # noqa: E402
from voicews.engines.kokoro.assets import SAMPLES_PER_FRAME, model_path  # noqa: E402
from voicews.engines.kokoro.calibration import CALIBRATION, sha256, shipped  # noqa: E402
from voicews.engines.kokoro.graphs import calibrate, float_graph, static_graph  # noqa: E402

pytestmark = pytest.mark.slow

TEXT = "Let me check that for you."


def ops(path: Path) -> Counter[str]:
    return Counter(
        node.op_type for node in onnx.load(str(path), load_external_data=False).graph.node
    )


def spoken(engine: KokoroEngine) -> tuple[np.ndarray, WordStarts]:
    audio, words = list(engine.synthesize(TEXT, SynthesisOptions()))
    assert isinstance(audio, np.ndarray) and isinstance(words, WordStarts)
    return audio, words


def log_spectrum(x: np.ndarray) -> np.ndarray:
    frames = np.lib.stride_tricks.sliding_window_view(x, 1024)[::256] * np.hanning(1024)
    return np.log(np.abs(np.fft.rfft(frames, axis=1)) + 1e-3)


@pytest.fixture(scope="module")
def int8() -> tuple[np.ndarray, WordStarts]:
    return spoken(KokoroEngine(graph=model_path()))


def test_the_float_graph_has_float_ops_only_and_speaks_as_the_int8_one(
    int8: tuple[np.ndarray, WordStarts],
) -> None:
    shipped, made = ops(model_path()), ops(float_graph(model_path()))
    assert shipped["ConvInteger"] == 87 and shipped["DynamicQuantizeLSTM"] == 6
    integer = ("ConvInteger", "MatMulInteger", "DynamicQuantizeLSTM", "DynamicQuantizeLinear")
    assert not any(made[op] for op in integer)
    # Every integer convolution in float, and the STFT as one more (voicews.engines.kokoro.fused).
    assert made["LSTM"] == 6 and made["Conv"] == shipped["Conv"] + shipped["ConvInteger"] + 1
    assert shipped["STFT"] == 1 and made["STFT"] == 0
    audio, words = spoken(KokoroEngine(graph=float_graph(model_path())))
    reference, reference_words = int8
    # The same weights: durations within a frame per word, the spectrum close (the int8 graph
    # rounds every activation to 8 bits, this one does not).
    assert abs(len(audio) - len(reference)) <= 2 * SAMPLES_PER_FRAME
    gaps = np.abs(np.array(words.samples) - np.array(reference_words.samples))
    assert gaps.max() <= SAMPLES_PER_FRAME
    n = min(len(audio), len(reference))
    distance = np.sqrt(np.mean((log_spectrum(audio[:n]) - log_spectrum(reference[:n])) ** 2))
    print(f"float against int8: log-spectral distance {distance:.2f}")
    assert distance < 1.0
    assert 0.8 < np.std(audio) / np.std(reference) < 1.25


def test_the_static_graph_quantizes_the_decoder_with_fixed_ranges(
    int8: tuple[np.ndarray, WordStarts],
) -> None:
    shipped, made = ops(model_path()), ops(static_graph(model_path()))
    # The generator's residual blocks: 6 of 3 + 3 resblocks, 6 of 2 noise_res; the decoder's
    # blocks before it: two and a 1x1 shortcut each of encode and decode.0-3; the rest as shipped.
    assert made["QLinearConv"] == 63 and made["ConvInteger"] == shipped["ConvInteger"] - 63
    # Their adaptive norms as single kernels (6 a residual block, 2 a decoder block; the first
    # residual blocks of a stage share one norm in the export, three here), the rest as shipped.
    assert made["InstanceNormalization"] == 48 + 10
    assert made["STFT"] == 0
    # Their snakes read from tables (voicews.engines.kokoro.snakes), one per norm.
    assert made["GatherElements"] == 48 and made["Sin"] == shipped["Sin"] - 48
    assert made["ReduceMean"] == shipped["ReduceMean"] - 2 * 54  # 54 norms, two read thrice
    audio, words = spoken(KokoroEngine(graph=static_graph(model_path())))
    reference, reference_words = int8
    assert abs(len(audio) - len(reference)) <= 2 * SAMPLES_PER_FRAME
    assert len(words.samples) == len(reference_words.samples)
    assert 0.7 < np.std(audio) / np.std(reference) < 1.4


def test_the_shipped_ranges_are_this_models_and_what_calibration_measures() -> None:
    """The static graph is built from ranges measured once and shipped (seconds at first use,
    not a calibration run of minutes): they carry this model's checksum, name every tensor a
    calibration run measures, and are the mean of each run's extremes, not the widest: one
    calibration sentence in one voice lies near them, beyond them somewhere."""
    ranges = shipped()
    assert ranges.model_sha256 == sha256(model_path())
    one = calibrate(model_path(), ["af_heart"], CALIBRATION[:1])
    assert one.tensors.keys() == ranges.tensors.keys() and len(one.tensors) > 48
    beyond = 0
    for name, (low, high) in one.tensors.items():
        shipped_low, shipped_high = (np.array(v) for v in ranges.tensors[name])
        span = shipped_high - shipped_low
        assert np.all(np.abs(low - shipped_low) <= span), name
        assert np.all(np.abs(high - shipped_high) <= span), name
        beyond += bool(np.any(low < shipped_low) or np.any(high > shipped_high))
    assert beyond > 0


def test_graphs_are_made_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The second call finds the cached file: no conversion (``onnx.load`` is not called)."""
    first = float_graph(model_path())
    modified = first.stat().st_mtime_ns

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("converted again")

    monkeypatch.setattr(onnx, "load", refuse)
    assert float_graph(model_path()) == first and first.stat().st_mtime_ns == modified
