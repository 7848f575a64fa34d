"""Kokoro's slow spellings as onnxruntime's fast kernels, the same arithmetic.

The export spells each adaptive instance norm (AdaIN: the style's per-channel scale and shift
over an instance norm across time) as nine element-wise nodes: a mean, a difference, its
square, a mean, a root, a quotient, a scale and a shift, each a pass over the layer's whole
activation. In the generator, at 24 kHz over 128 channels, those passes cost more than the
convolutions around them on this CPU's int8 kernels. :func:`fuse` writes each as one
``InstanceNormalization`` node with the style's scale and shift as its own (5.1 against 1.6 ms
over a second's activation of 128 channels), and each snake's ``Pow(s, 2)`` as ``Mul(s, s)``
(1.1 against 0.7 ms). The arithmetic changes only by float rounding; past the static graph's
int8 activations that is a different rendering of the same speech, not a worse one (DNSMOS
over 32 clips: 3.297 against 3.296, ``docs/engines.md``).

The generator's ``STFT`` of its harmonic source (20 points, hop 5, at 24 kHz) runs in
onnxruntime as a transform per frame: 27 ms for a second and a third of audio, against 1.2 ms
for the same sums as one convolution whose filters are each bin's windowed cosine and sine.
The bins at DC and Nyquist have no imaginary part, and the phase the export reads from it
(``atan(imag / real)`` moved to the real part's half plane) is PyTorch's angle as trained (pi
for a negative real part) only for a positive one: the convolution gives them a positive
imaginary part too small to move anything else (``_FLAT``). An exact zero there gives -pi, and
the audio came out 1.5 dB quieter, 8 dB SNR from the transform's.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from .edges import Edges, keep_used

_FLAT = 1e-20
"""The imaginary part given to the spectrum's DC and Nyquist bins (above)."""
_TIME = (2, -1)
"""The axis an instance norm of ``(1, channels, frames)`` reduces."""


def fuse(model: Any, scope: re.Pattern[str]) -> None:
    """Rewrite ``model`` (an ``onnx.ModelProto``, batch one) in place as described above, the
    nodes replaced dropped. Norms are fused where ``scope`` matches their name."""
    from onnx import helper

    graph = model.graph
    edges = Edges(graph)
    replaced: dict[int, list[Any]] = {}
    shape = helper.make_tensor("/fused/flat", 7, [1], [-1])  # INT64
    for node in graph.node:
        if node.op_type == "STFT" and (convolution := _stft_convolution(node, edges)):
            nodes, constants = convolution
            replaced[id(node)] = nodes
            graph.initializer.extend(constants)
        elif node.op_type == "Pow" and _scalar(edges, node.input[1]) == 2.0:
            square = helper.make_node("Mul", [node.input[0]] * 2, list(node.output), node.name)
            replaced[id(node)] = [square]
        elif node.op_type != "Div" or not scope.match(node.name):
            continue
        elif norm := _instance_norm(node, edges):
            for scale, shift, out in _affines(node, edges):
                replaced[id(out)] = _norm_node(norm, scale, shift, out, shape.name)
    graph.initializer.append(shape)
    keep_used(graph, [new for node in graph.node for new in replaced.get(id(node), [node])])


def _stft_convolution(stft: Any, edges: Edges) -> tuple[list[Any], list[Any]] | None:
    """``stft`` (one-sided, over a real signal, with a constant window and hop) as a
    convolution of the signal with each bin's windowed cosine and negated sine, strided by the
    hop (DC's and Nyquist's imaginary parts ``_FLAT``), its output laid out as the STFT's
    ``(batch, frames, bins, 2)``; None where it is not such an STFT."""
    from onnx import helper, numpy_helper

    inputs = [*stft.input, "", ""][:4]
    hop, window = (edges.constant(name) if name else None for name in inputs[1:3])
    onesided = next((a.i for a in stft.attribute if a.name == "onesided"), 1)
    if hop is None or hop.size != 1 or window is None or window.ndim != 1 or not onesided:
        return None
    size = window.size
    bins = size // 2 + 1
    turns = 2 * np.pi * np.outer(np.arange(bins), np.arange(size)) / size
    sines = -np.sin(turns)
    flat = [0, size // 2] if size % 2 == 0 else [0]
    sines[flat] = 0.0
    basis = np.concatenate([np.cos(turns), sines]) * window.astype(np.float64)
    bias = np.zeros(2 * bins, np.float32)
    bias[[bins + k for k in flat]] = _FLAT
    name = stft.name
    constants = [
        numpy_helper.from_array(basis.astype(np.float32)[:, None, :], f"{name}/basis"),
        numpy_helper.from_array(bias, f"{name}/bias"),
        numpy_helper.from_array(np.array([0, 1, -1], np.int64), f"{name}/signal_shape"),
        numpy_helper.from_array(np.array([0, 2, bins, -1], np.int64), f"{name}/parts_shape"),
    ]
    nodes = [
        helper.make_node("Reshape", [inputs[0], f"{name}/signal_shape"], [f"{name}/signal"]),
        helper.make_node(
            "Conv",
            [f"{name}/signal", f"{name}/basis", f"{name}/bias"],
            [f"{name}/sums"],
            f"{name}/Conv",
            strides=[int(hop)],
        ),
        helper.make_node("Reshape", [f"{name}/sums", f"{name}/parts_shape"], [f"{name}/parts"]),
        helper.make_node("Transpose", [f"{name}/parts"], list(stft.output), perm=[0, 3, 2, 1]),
    ]
    return nodes, constants


def _scalar(edges: Edges, name: str) -> float | None:
    value = edges.constant(name)
    return float(value) if value is not None and value.size == 1 else None


def _instance_norm(div: Any, edges: Edges) -> tuple[str, float] | None:
    """``(x, epsilon)`` where ``div`` is ``(x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps)``
    over time, else None."""
    made = edges.producer
    sub, root = made.get(div.input[0]), made.get(div.input[1])
    if sub is None or root is None or sub.op_type != "Sub" or root.op_type != "Sqrt":
        return None
    mean: Any = made.get(sub.input[1])
    plus = made.get(root.input[0])
    if not _time_mean(mean, edges) or mean.input[0] != sub.input[0]:
        return None
    if plus is None or plus.op_type != "Add" or (eps := _scalar(edges, plus.input[1])) is None:
        return None
    variance: Any = made.get(plus.input[0])
    square = made.get(variance.input[0]) if _time_mean(variance, edges) else None
    if square is None or square.op_type != "Mul" or list(square.input) != [sub.output[0]] * 2:
        return None
    return sub.input[0], eps


def _time_mean(node: Any, edges: Edges) -> bool:
    if node is None or node.op_type != "ReduceMean":
        return False
    keep = next((a.i for a in node.attribute if a.name == "keepdims"), 1)
    axes = edges.constant(node.input[1]) if len(node.input) > 1 else None
    return keep == 1 and axes is not None and tuple(axes.tolist()) in {(a,) for a in _TIME}


def _affines(div: Any, edges: Edges) -> list[tuple[str, str, Any]]:
    """``(scale, shift, node)`` for each ``Add(Mul(scale, norm), shift)`` that reads ``div``
    (the generator's first three blocks share one norm) with the style's per-channel scale and
    shift (``1 + gamma`` and ``beta``, sliced from the style's projection); none unless every
    reader is one."""
    made, readers = edges.producer, edges.consumers
    found = []
    for mul in readers.get(div.output[0], []):
        adds = readers.get(mul.output[0], [])
        if mul.op_type != "Mul" or len(adds) != 1 or adds[0].op_type != "Add":
            return []
        (scale,) = [name for name in mul.input if name != div.output[0]] or [""]
        (shift,) = [name for name in adds[0].input if name != mul.output[0]] or [""]
        gamma = made.get(scale)
        if not _sliced(made.get(shift)) or gamma is None or gamma.op_type != "Add":
            return []
        if not any(_sliced(made.get(name)) for name in gamma.input):
            return []
        found.append((scale, shift, adds[0]))
    return found


def _sliced(node: Any) -> bool:
    return node is not None and node.op_type in ("Split", "Slice")


def _norm_node(norm: tuple[str, float], scale: str, shift: str, out: Any, flat: str) -> list[Any]:
    from onnx import helper

    (x, eps), name = norm, out.name
    return [
        helper.make_node("Reshape", [scale, flat], [f"{name}/scale"], f"{name}/scale"),
        helper.make_node("Reshape", [shift, flat], [f"{name}/shift"], f"{name}/shift"),
        helper.make_node(
            "InstanceNormalization",
            [x, f"{name}/scale", f"{name}/shift"],
            list(out.output),
            f"{name}/InstanceNormalization",
            epsilon=eps,
        ),
    ]
