"""Kokoro's adaptive norms and snake squares fused into single kernels, and its STFT as a
convolution (``voicews.engines.kokoro.fused``), on small graphs spelled as the export spells
them: the same outputs to float rounding, none of the nodes they replace left, and nothing fused
outside the scope or where a norm's reader is not the style's affine."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

from voicews.engines.kokoro.fused import fuse

CHANNELS, FRAMES, STYLE = 8, 50, 4
SCOPE = re.compile(r"^/gen/")


def adain(prefix: str, x: str, nodes: list[onnx.NodeProto], readers: int = 1) -> list[str]:
    """The export's AdaIN over ``x``: its norm once, read by ``readers`` affines of the style."""
    node = helper.make_node
    p = prefix
    nodes += [
        node("ReduceMean", [x, "axes"], [f"{p}/mean"], f"{p}/ReduceMean"),
        node("Sub", [x, f"{p}/mean"], [f"{p}/d"], f"{p}/Sub"),
        node("Mul", [f"{p}/d", f"{p}/d"], [f"{p}/d2"], f"{p}/Mul_2"),
        node("ReduceMean", [f"{p}/d2", "axes"], [f"{p}/var"], f"{p}/ReduceMean_2"),
        node("Add", [f"{p}/var", "eps"], [f"{p}/ve"], f"{p}/Add_2"),
        node("Sqrt", [f"{p}/ve"], [f"{p}/sd"], f"{p}/Sqrt"),
        node("Div", [f"{p}/d", f"{p}/sd"], [f"{p}/n"], f"{p}/Div_1"),
    ]
    outs = []
    for r in range(readers):
        q = f"{p}/{r}"
        nodes += [
            node("MatMul", ["style", f"fc{r}"], [f"{q}/h"], f"{q}/fc"),
            node("Unsqueeze", [f"{q}/h", "last"], [f"{q}/h3"], f"{q}/Unsqueeze"),
            node(
                "Split",
                [f"{q}/h3"],
                [f"{q}/gamma", f"{q}/beta"],
                f"{q}/Split",
                axis=1,
                num_outputs=2,
            ),
            node("Add", [f"{q}/gamma", "one"], [f"{q}/g1"], f"{q}/Add_1"),
            node("Mul", [f"{q}/g1", f"{p}/n"], [f"{q}/gn"], f"{q}/Mul_3"),
            node("Add", [f"{q}/gn", f"{q}/beta"], [f"{q}/y"], f"{q}/Add_3"),
        ]
        outs.append(f"{q}/y")
    return outs


def model() -> onnx.ModelProto:
    node = helper.make_node
    nodes: list[onnx.NodeProto] = []
    (a,) = adain("/gen/a", "x", nodes)
    b, c = adain("/gen/b", "x", nodes, readers=2)
    (d,) = adain("/pred/d", "x", nodes)  # out of scope
    nodes += [
        node("Mul", ["alpha", a], ["ax"], "/gen/snake/Mul"),
        node("Sin", ["ax"], ["s"], "/gen/snake/Sin"),
        node("Pow", ["s", "two"], ["s2"], "/gen/snake/Pow"),
        node("Add", [a, "s2"], ["snake"], "/gen/snake/Add"),
        node("Sub", ["x", "x_mean_unused"], ["plain"], "/gen/plain/Sub"),  # not a norm
        node("Div", ["plain", "two"], ["halved"], "/gen/plain/Div"),
    ]
    rng = np.random.default_rng(0)
    initializers = [
        numpy_helper.from_array(np.array([2], np.int64), "axes"),
        numpy_helper.from_array(np.array([2], np.int64), "last"),
        numpy_helper.from_array(np.array(1e-5, np.float32), "eps"),
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        numpy_helper.from_array(np.ones((1, CHANNELS, 1), np.float32), "x_mean_unused"),
        numpy_helper.from_array(rng.uniform(0.5, 2, (1, CHANNELS, 1)).astype(np.float32), "alpha"),
    ] + [
        numpy_helper.from_array(rng.normal(size=(STYLE, 2 * CHANNELS)).astype(np.float32), f"fc{r}")
        for r in range(2)
    ]
    outputs = ["snake", b, c, d, "halved"]
    graph = helper.make_graph(
        nodes,
        "adain",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, CHANNELS, FRAMES]),
            helper.make_tensor_value_info("style", TensorProto.FLOAT, [1, STYLE]),
        ],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in outputs],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def run(proto: onnx.ModelProto) -> list[np.ndarray]:
    session = onnxruntime.InferenceSession(
        proto.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    rng = np.random.default_rng(1)
    x = (rng.normal(size=(1, CHANNELS, FRAMES)) * 3 + 5).astype(np.float32)
    style = rng.normal(size=(1, STYLE)).astype(np.float32)
    return list(session.run(None, {"x": x, "style": style}))


def test_norms_and_squares_become_single_kernels_with_the_same_outputs() -> None:
    shipped = model()
    fused = model()
    fuse(fused, SCOPE)
    ops = Counter(node.op_type for node in fused.graph.node)
    # Three affines in scope (one over a norm of its own, two over a shared one); the fourth is out
    # of scope and keeps its nine nodes; the snake's square is a product.
    assert ops["InstanceNormalization"] == 3 and ops["Pow"] == 0
    assert ops["ReduceMean"] == 2 and ops["Sqrt"] == 1
    assert ops["Div"] == 2  # the out-of-scope norm's, and the plain one (no norm)
    for before, after in zip(run(shipped), run(fused), strict=True):
        np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-5)


def test_a_one_sided_stft_becomes_a_convolution_with_the_same_spectrum() -> None:
    """The generator's STFT (a periodic Hann window of 20 points, hop 5) over a signal shaped as
    the export shapes it; a two-sided one is left as it is."""
    node = helper.make_node
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(20) / 20)).astype(np.float32)
    graph = helper.make_graph(
        [
            node("STFT", ["x", "hop", "window", "size"], ["one"], "/gen/STFT", onesided=1),
            node("STFT", ["x", "hop", "window", "size"], ["two"], "/gen/STFT_1", onesided=0),
        ],
        "stft",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, None, 1])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in ("one", "two")],
        [
            numpy_helper.from_array(np.array(5, np.int64), "hop"),
            numpy_helper.from_array(window, "window"),
            numpy_helper.from_array(np.array(20, np.int64), "size"),
        ],
    )
    shipped = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    fused = onnx.ModelProto()
    fused.CopyFrom(shipped)
    fuse(fused, SCOPE)
    assert Counter(n.op_type for n in fused.graph.node)["STFT"] == 1
    signal = np.random.default_rng(2).normal(size=(1, 2403, 1)).astype(np.float32)
    before, after = (
        onnxruntime.InferenceSession(p.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, {"x": signal}
        )
        for p in (shipped, fused)
    )
    frames = np.lib.stride_tricks.sliding_window_view(signal[0, :, 0], 20)[::5]
    spectrum = np.fft.rfft(frames.astype(np.float64) * window, axis=-1)
    exact = np.stack([spectrum.real, spectrum.imag], axis=-1)[None]
    assert after[0].shape == before[0].shape == exact.shape == (1, 477, 11, 2)
    # onnxruntime's own transform is off by up to ~1e-5 (spectra of ~10): the sums are closer.
    np.testing.assert_allclose(before[0], exact, atol=5e-5)
    np.testing.assert_allclose(after[0], exact, atol=5e-6)
    # DC and Nyquist: imaginary parts above zero, so the export reads PyTorch's angle from them.
    assert (after[0][..., [0, 10], 1] > 0).all()
    np.testing.assert_array_equal(after[1], before[1])
