"""Kokoro's graph as onnxruntime runs it fastest on a CPU, made once from the shipped int8 one.

The export quantizes dynamically: every ``MatMulInteger`` and ``ConvInteger`` rounds its input
to uint8 at each call (``DynamicQuantizeLinear``), then rescales its int32 output, and its
LSTMs are ``DynamicQuantizeLSTM``. :func:`float_graph` turns each integer node, with its
input's quantization, its integer bias and its rescaling, into the float node over the
dequantized weight ``(q - zero_point) * scale`` (the scales as the graph's rescaling ``Mul``
holds them, found as :mod:`.mlx_weights` finds them) and the float bias; nodes left without a
consumer go. :func:`static_graph` quantizes the decoder's convolutions in that float graph
again, statically: int8 weights per output channel, and the activation ranges shipped in
:mod:`.calibration` (measured once by :func:`calibrate`), so no input is re-quantized at run
time, and reads the snake activations before them from tables (:mod:`.snakes`). Both write the
decoder's adaptive norms as single kernels and its STFT as a convolution first (:mod:`.fused`).
The weights are the shipped ones: nothing is retrained or downloaded.
"""

from __future__ import annotations

import inspect
import logging
import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from ...cache import cache_dir, file_key, write_atomically
from .calibration import CALIBRATION, Ranges, measure, reader, sha256, shipped
from .edges import Edges, keep_used
from .fused import fuse
from .snakes import tabulate

log = logging.getLogger(__name__)

FORMAT_VERSION = 6
"""Bump when a conversion changes, so a stale graph is made again."""

STATIC = re.compile(r"^/decoder/decoder/(generator/(resblocks|noise_res)\.|encode/|decode\.)")
"""The nodes :func:`static_graph` quantizes statically: the generator's residual blocks, most
of the model's compute, and the decoder's blocks before it (4-5% of a sentence's compute on one
thread, the same speech judged in pairs: ``docs/engines.md``). The rest is as shipped:
quantizing every convolution statically lost words, WER 0.16-0.23 against 0.00-0.06."""


def _derived(model: Path, kind: str) -> Path:
    """Where the ``kind`` graph made from ``model`` is cached: keyed by the int8 file (its path,
    size and time) and :data:`FORMAT_VERSION`."""
    stem = model.name.removesuffix(".onnx").replace(".int8", "")
    return cache_dir() / "kokoro" / f"{stem}.{kind}-{file_key(model)}-v{FORMAT_VERSION}.onnx"


def float_graph(model: Path) -> Path:
    """The float graph of ``model``, made once into the cache (a few seconds)."""
    out = _derived(model, "float")
    if out.is_file():
        return out
    import onnx

    graph = onnx.load(str(model))
    dequantize(graph)
    _fuse(graph)
    write_atomically(out, graph.SerializeToString())
    return out


def static_graph(model: Path) -> Path:
    """``model`` with the decoder's convolutions (:data:`STATIC`) quantized
    statically, made once into the cache from the shipped ranges (:mod:`.calibration`;
    seconds), or calibrated where those are another model's or this onnxruntime cannot take
    them (minutes)."""
    out = _derived(model, "static")
    if out.is_file():
        return out
    proto, convolutions = _decoder_in_float(model)
    partial = out.with_name(f"{out.name}.float{os.getpid()}")
    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
    ranges = shipped()
    usable = ranges.model_sha256 == sha256(model) and _takes_ranges()
    if not usable:
        log.warning(
            "calibrating Kokoro's static graph, once (minutes on two cores): the shipped "
            "ranges are another model's, or this onnxruntime cannot take them"
        )
    try:
        write_atomically(partial, proto.SerializeToString())
        _quantize(partial, tmp, ranges if usable else None, [n.name for n in convolutions])
        _tabulate(tmp)
        tmp.replace(out)
    finally:
        partial.unlink(missing_ok=True)
        tmp.unlink(missing_ok=True)
    return out


def calibrate(
    model: Path, voices: Iterable[str] | None = None, sentences: Iterable[str] = CALIBRATION
) -> Ranges:
    """The ranges :func:`static_graph` needs, measured on ``model`` (minutes for every
    calibration sentence in every voice: :func:`.calibration.measure`)."""
    proto, convolutions = _decoder_in_float(model)
    with tempfile.TemporaryDirectory(prefix="voicews-kokoro-") as tmp:
        partial = Path(tmp) / "partial.onnx"
        partial.write_bytes(proto.SerializeToString())
        return measure(partial, sha256(model), _activations(convolutions), voices, sentences)


def _decoder_in_float(model: Path) -> tuple[Any, list[Any]]:
    """``model`` with the :data:`STATIC` nodes in float, and its convolutions among them."""
    import onnx

    proto = onnx.load(str(model))
    dequantize(proto, STATIC)
    _fuse(proto)
    convolutions = [n for n in proto.graph.node if n.op_type == "Conv" and STATIC.match(n.name)]
    return proto, convolutions


def _fuse(model: Any) -> None:
    """The decoder's norms and squares as single kernels, and its STFT as a convolution
    (:mod:`.fused`)."""
    fuse(model, STATIC)


def _tabulate(path: Path) -> None:
    """The snakes that the quantized convolutions of ``path`` read, as tables (:mod:`.snakes`)."""
    import onnx

    proto = onnx.load(str(path))
    tabulate(proto)
    path.write_bytes(proto.SerializeToString())


def _activations(convolutions: list[Any]) -> set[str]:
    """What a quantized convolution reads and writes, besides its weight and bias."""
    return {name for n in convolutions for name in (n.input[0], n.output[0])}


def _takes_ranges() -> bool:
    """Whether ``quantize_static`` takes ranges measured before (``calibration_cache_path``,
    a recent onnxruntime's: 1.32 has it)."""
    from onnxruntime.quantization import quantize_static

    return "calibration_cache_path" in inspect.signature(quantize_static).parameters


def _quantize(partial: Path, out: Path, ranges: Ranges | None, convolutions: list[str]) -> None:
    """Quantize ``convolutions`` of ``partial`` into ``out``: with ``ranges``, or calibrating
    (every calibration sentence in every voice) where there are none."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    with tempfile.TemporaryDirectory(prefix="voicews-kokoro-") as tmp:
        options: dict[str, Any] = {  # as :func:`.calibration.measure` measures them
            "calibration_data_reader": reader(),
            "extra_options": {"CalibMovingAverage": True},
        }
        if ranges is not None:
            cache = Path(tmp) / "ranges.json"
            ranges.cache_file(cache)
            options = {"calibration_data_reader": None, "calibration_cache_path": cache}
        quantize_static(
            str(partial), str(out),
            quant_format=QuantFormat.QOperator, op_types_to_quantize=["Conv"], per_channel=True,
            nodes_to_quantize=convolutions,
            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
            calibrate_method=CalibrationMethod.MinMax, **options,
        )  # fmt: skip


def _per_channel(values: np.ndarray[Any, Any], ndim: int, axis: int) -> np.ndarray[Any, Any]:
    if values.ndim == 0:
        return values.astype(np.float32)
    shape = [1] * ndim
    shape[axis] = values.shape[0]
    return values.reshape(shape).astype(np.float32)


def _integer_node(edges: Edges, node: Any) -> tuple[list[Any], Any, list[Any]]:
    """An integer matmul or convolution with its weight as an initializer: the nodes that
    compute it (removed), the float node that replaces them, and its new initializers."""
    from onnx import helper

    quantize = edges.producer[node.input[0]]  # DynamicQuantizeLinear(x) -> q, scale, zero point
    removed, tail = [node], node
    bias_name = None
    after = edges.consumers[node.output[0]]
    if len(after) == 1 and after[0].op_type == "Add":  # the bias, quantized by the input's scale
        add = after[0]
        quantized_bias = next(i for i in add.input if i != node.output[0])
        bias_name = _float_bias(edges, quantized_bias)
        removed.append(add)
        tail = add
    cast = edges.only_consumer(tail.output[0], "Cast")
    rescale = edges.only_consumer(cast.output[0], "Mul")
    removed += [cast, rescale]
    product = edges.producer[next(i for i in rescale.input if i != cast.output[0])]
    input_scale = quantize.output[1]
    if product.op_type != "Mul" or input_scale not in product.input:
        raise ValueError(f"{node.name}: no Mul(input scale, weight scale) rescales it")
    weight_scale = edges.array(next(i for i in product.input if i != input_scale))
    q = edges.array(node.input[1])
    axis = 1 if node.op_type == "MatMulInteger" else 0  # (in, out) or (out, in, k)
    zero = _per_channel(edges.array(node.input[3]), q.ndim, axis) if len(node.input) > 3 else 0
    weight = (q.astype(np.float32) - zero) * _per_channel(weight_scale, q.ndim, axis)
    weight_name = f"{node.input[1].removesuffix('_quantized')}_float"
    inputs = [quantize.input[0], weight_name]
    if node.op_type == "MatMulInteger":
        replacement = helper.make_node("MatMul", inputs, [rescale.output[0]], name=node.name)
    else:
        if bias_name is not None:
            inputs.append(bias_name)
        replacement = helper.make_node(
            "Conv", inputs, [rescale.output[0]], name=node.name,
            **{a.name: helper.get_attribute_value(a) for a in node.attribute},
        )  # fmt: skip
    from onnx import numpy_helper

    return removed, replacement, [numpy_helper.from_array(weight, weight_name)]


def _float_bias(edges: Any, quantized: str) -> str:
    """The float bias behind ``Reshape(Cast(Floor(Div(bias, scale))))``: its initializer."""
    node = edges.producer[quantized]
    while node.op_type != "Div":
        node = edges.producer[node.input[0]]
    if node.input[0] not in edges.initializers:
        raise ValueError(f"{quantized}: its float bias is not an initializer")
    name: str = node.input[0]
    return name


def _lstm(edges: Edges, node: Any) -> tuple[Any, list[Any]]:
    """``DynamicQuantizeLSTM`` -> ``LSTM``: per-direction dequantized weights, moved from
    ``(dirs, in, 4H)`` to ONNX's ``(dirs, 4H, in)`` (both keep the gates as ``i o f c``)."""
    from onnx import helper, numpy_helper

    inputs = list(node.input[:8])
    initializers = []
    # W with its scale and zero point (inputs 8, 9), then R with its own (10, 11).
    for slot, scale, zero in ((1, 8, 9), (2, 10, 11)):
        name = node.input[slot]
        q = edges.array(name).astype(np.float32)
        zero_point = edges.array(node.input[zero]).astype(np.float32)[:, None, None]
        weight = (q - zero_point) * edges.array(node.input[scale])[:, None, None]
        inputs[slot] = f"{name.removesuffix('_quantized')}_float"
        initializers.append(
            numpy_helper.from_array(np.ascontiguousarray(weight.transpose(0, 2, 1)), inputs[slot])
        )
    while inputs and not inputs[-1]:
        inputs.pop()
    replacement = helper.make_node(
        "LSTM", inputs, list(node.output), name=node.name,
        **{a.name: helper.get_attribute_value(a) for a in node.attribute},
    )  # fmt: skip
    return replacement, initializers


def dequantize(model: Any, scope: re.Pattern[str] | None = None) -> None:
    """Rewrite ``model`` (an ``onnx.ModelProto``) in place as described above: every integer
    node, or those whose name ``scope`` matches."""
    graph = model.graph
    edges = Edges(graph)
    removed: set[int] = set()
    replacements: dict[int, Any] = {}
    added: dict[str, Any] = {}  # by name: ALBERT's one layer is called 12 times, same weights
    for node in graph.node:
        if scope is not None and not scope.match(node.name):
            continue
        if node.op_type in ("MatMulInteger", "ConvInteger") and node.input[1] in edges.initializers:
            gone, replacement, weights = _integer_node(edges, node)
            removed.update(id(n) for n in gone)
            replacements[id(node)] = replacement
            added.update((w.name, w) for w in weights)
        elif node.op_type == "DynamicQuantizeLSTM":
            replacement, weights = _lstm(edges, node)
            removed.add(id(node))
            replacements[id(node)] = replacement
            added.update((w.name, w) for w in weights)
    nodes = []
    for node in graph.node:
        if id(node) in replacements:
            nodes.append(replacements[id(node)])
        elif id(node) not in removed:
            nodes.append(node)
    graph.initializer.extend(added.values())
    keep_used(graph, nodes)
