"""Kokoro's snakes read from tables (``voicews.engines.kokoro.snakes``), on a small graph
spelled as the static graph spells them (an adaptive norm with the style's scale and shift, the
snake, its rounding for an int8 convolution): onnxruntime gives the uint8 the snake gives,
within one step and seldom off, saturating beyond the table; the snake's nodes are gone."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

from voicews.engines.kokoro.snakes import LEVELS, tabulate

CHANNELS, FRAMES = 16, 4000


def model(alpha: np.ndarray, scale: float, zero: int) -> onnx.ModelProto:
    """``QuantizeLinear(snake(InstanceNorm(x) * gamma + beta))``, gamma and beta inputs."""
    node = helper.make_node
    nodes = [
        node("InstanceNormalization", ["x", "gamma", "beta"], ["y"], "/gen/norm", epsilon=1e-5),
        node("Mul", ["alpha", "y"], ["ay"], "/gen/Mul"),
        node("Sin", ["ay"], ["s"], "/gen/Sin"),
        node("Mul", ["s", "s"], ["s2"], "/gen/Pow"),
        node("Mul", ["inverse", "s2"], ["t"], "/gen/Mul_1"),
        node("Add", ["y", "t"], ["z"], "/gen/Add"),
        node("QuantizeLinear", ["z", "scale", "zero"], ["q"], "/gen/Quantize"),
    ]
    constants = {
        "alpha": alpha.reshape(1, -1, 1),
        "inverse": (1 / (alpha + 1e-9)).reshape(1, -1, 1),
        "scale": np.array(scale, np.float32),
        "zero": np.array(zero, np.uint8),
    }
    graph = helper.make_graph(
        nodes, "snake",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, CHANNELS, FRAMES]),
            helper.make_tensor_value_info("gamma", TensorProto.FLOAT, [CHANNELS]),
            helper.make_tensor_value_info("beta", TensorProto.FLOAT, [CHANNELS]),
        ],
        [helper.make_tensor_value_info("q", TensorProto.UINT8, [1, CHANNELS, FRAMES])],
        [numpy_helper.from_array(v.astype(np.float32) if v.dtype == np.float64 else v, k)
         for k, v in constants.items()],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def run(proto: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    session = onnxruntime.InferenceSession(
        proto.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    (out,) = session.run(None, feeds)
    return np.asarray(out).astype(int)


def test_a_snake_read_from_its_table_rounds_as_the_snake_does() -> None:
    rng = np.random.default_rng(7)
    # The export's range of alphas, small and negative ones included (1/a large there).
    alpha = np.concatenate([rng.uniform(0.1, 2.3, CHANNELS - 3), [0.02, -0.03, 1e-4]]).astype(
        np.float32
    )
    original = model(alpha, scale=0.12, zero=117)
    tabled = model(alpha, scale=0.12, zero=117)
    assert tabulate(tabled) == 1
    ops = Counter(n.op_type for n in tabled.graph.node)
    assert ops["Sin"] == ops["QuantizeLinear"] == 0 and ops["GatherElements"] == 1
    # Inputs well inside and far beyond the rounding's range (its ends saturate).
    feeds = {
        "x": rng.normal(0, 1, (1, CHANNELS, FRAMES)).astype(np.float32),
        "gamma": rng.uniform(2, 14, CHANNELS).astype(np.float32),
        "beta": rng.uniform(-3, 3, CHANNELS).astype(np.float32),
    }
    want, got = run(original, feeds), run(tabled, feeds)
    assert np.abs(got - want).max() <= 1
    off = np.mean(got != want)
    print(f"off by one step: {off:.4f} of {want.size} values; {LEVELS} levels")
    assert off < 0.02
    assert np.mean(want == 0) > 0.01 and np.mean(want == 255) > 0.01  # both ends reached


def test_only_a_snake_the_static_graph_rounds_is_tabled() -> None:
    """A snake whose sum feeds anything besides its rounding stays as it is."""
    proto = model(np.full(CHANNELS, 0.5, np.float32), scale=0.1, zero=128)
    proto.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, None))
    assert tabulate(proto) == 0
    assert Counter(n.op_type for n in proto.graph.node)["Sin"] == 1
