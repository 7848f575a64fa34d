"""Kokoro's weights as MLX arrays, read once from the int8 ONNX export and cached as safetensors.

The export (kokoro-onnx's ``kokoro-v1.0.int8.onnx``) keeps PyTorch names for most biases and
norms (``encoder.predictor.F0.1.conv1.bias``), but its weights are int8 and many are anonymous:
weight-normed convolutions were folded to ``/decoder/decoder/encode/Mul_output_0``, ALBERT's
linears are ``onnx::MatMul_6548_3``, LSTMs ``onnx::LSTM_6930``. So every weight is named after
the node that consumes it and dequantized the way that node does:

- ``MatMulInteger`` / ``ConvInteger``: ``(q - zero_point) * scale``, the per-channel scale being
  the weight's factor in the ``Mul`` that rescales the node's integer output;
- ``Gather`` on an int8 table, then ``DequantizeLinear``: the embeddings;
- ``DynamicQuantizeLSTM``: per-direction scales, ``(dirs, in, 4H)`` layout, gates in ONNX's
  ``i o f c`` order, reordered here to PyTorch's ``i f g o``.

Names come out as in Kokoro's PyTorch checkpoint (``bert.*``, ``bert_encoder.*``,
``predictor.*``, ``text_encoder.*``, ``decoder.*``), with weight norm already folded. The
``onnx`` package is needed only for the first conversion; loading creates MLX arrays, so it
must run on the thread that will use them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ...cache import cache_dir, content_key

if TYPE_CHECKING:
    import mlx.core as mx

FORMAT_VERSION = 1
"""Bump when the cached layout changes, so stale caches are ignored rather than misread."""

Array = npt.NDArray[np.float32]

_ROOTS = ("bert", "bert_encoder", "predictor", "text_encoder")
_PREDICTOR_SCOPES = re.compile(r"^(F0|N)(\.\d+|_proj)$|^shared$")
"""Modules of the prosody predictor that the export scoped under ``/encoder/`` directly."""
_TRANSPOSED = re.compile(r"(\.pool|^decoder\.generator\.ups\.\d+)\.weight$")
_STFT_BUFFERS = {
    "decoder.decoder.generator.stft.istft.stft.inverse_basis": "decoder.generator.istft.basis",
    "decoder.decoder.generator.stft.istft.stft.window_sum": "decoder.generator.istft.window_sum",
}
"""Not trained weights but constants of the export's inverse STFT, kept to match it exactly."""


def cache_path(model: Path, directory: Path | None = None) -> Path:
    """One file per model content (not path), so another export is converted again."""
    stem = model.name.removesuffix(".onnx")
    folder = (directory or cache_dir()) / "mlx-kokoro"
    return folder / f"{stem}-{content_key(model)}-v{FORMAT_VERSION}.safetensors"


def module_of(node_name: str) -> str:
    """``/encoder/text_encoder/cnn.0/cnn.0.0/Conv_quant`` -> ``text_encoder.cnn.0.0``."""
    parts = node_name.strip("/").split("/")[:-1]
    # A repeated call gets a suffix (ALBERT's shared layer: ``attention_3/query_3``).
    parts = [re.sub(r"_\d+$", "", p) for p in parts]
    # nn.Sequential scopes repeat their parent: ``asr_res/asr_res.0``, ``cnn.0/cnn.0.0``.
    parts = [
        p for p, nxt in zip(parts, [*parts[1:], ""], strict=True) if not nxt.startswith(p + ".")
    ]
    if parts[:2] == ["decoder", "decoder"]:
        return ".".join(["decoder", *parts[2:]])
    if parts and parts[0] == "encoder" and len(parts) > 1:
        if parts[1] in _ROOTS:
            return ".".join(parts[1:])
        if _PREDICTOR_SCOPES.match(parts[1]):
            return ".".join(["predictor", *parts[1:]])
    raise ValueError(f"no module for ONNX node {node_name!r}")


def _torch_name(initializer: str) -> str:
    """``encoder.predictor.F0.1.conv1.bias`` -> ``predictor.F0.1.conv1.bias``."""
    if initializer.startswith("decoder.decoder."):
        return initializer.removeprefix("decoder.")
    return initializer.removeprefix("encoder.")


class _Graph:
    """The ONNX graph's constants and edges, for following a node to its rescaling ``Mul``."""

    def __init__(self, graph: Any) -> None:
        from onnx import numpy_helper

        self.nodes = list(graph.node)
        self.values: dict[str, np.ndarray[Any, Any]] = {
            t.name: numpy_helper.to_array(t) for t in graph.initializer
        }
        for node in self.nodes:
            if node.op_type == "Constant":
                self.values[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
        self.initializers = [t.name for t in graph.initializer]
        self.consumers: dict[str, list[Any]] = {}
        self.producer: dict[str, Any] = {}
        for node in self.nodes:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)
            for name in node.output:
                self.producer[name] = node

    def weight_scale(self, node: Any) -> np.ndarray[Any, Any]:
        """The weight's scale: its factor in ``Mul(input_scale, weight_scale)``, which the
        integer output is multiplied by after its bias ``Add`` and ``Cast``."""
        input_scale = self.producer[node.input[0]].output[1]
        frontier = [node.output[0]]
        while frontier:
            name = frontier.pop()
            for consumer in self.consumers.get(name, []):
                if consumer.op_type in ("Add", "Cast"):
                    frontier.append(consumer.output[0])
                elif consumer.op_type == "Mul":
                    product = self.producer.get(next(i for i in consumer.input if i != name))
                    if product is not None and input_scale in product.input:
                        factor = next(i for i in product.input if i != input_scale)
                        return self.values[factor]
        raise ValueError(f"no weight scale found for {node.name}")


def _per_output(values: np.ndarray[Any, Any], ndim: int, axis: int) -> np.ndarray[Any, Any]:
    """A per-channel scale or zero point shaped to broadcast along ``axis`` of the weight."""
    if values.ndim == 0:
        return values
    shape = [1] * ndim
    shape[axis] = values.shape[0]
    return values.reshape(shape)


def _reorder_gates(w: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """ONNX packs LSTM gates as ``i o f c``; PyTorch as ``i f g o`` (g is ONNX's c)."""
    i, o, f, c = np.split(w, 4, axis=0)
    return np.concatenate([i, f, c, o], axis=0)


def _lstm(g: _Graph, node: Any, module: str) -> dict[str, Array]:
    """A ``DynamicQuantizeLSTM``'s weights as PyTorch's ``nn.LSTM(bidirectional=True)`` ones."""
    w_q, r_q, bias = (g.values[n] for n in node.input[1:4])
    w_scale, w_zp, r_scale, r_zp = (g.values[n] for n in node.input[8:12])
    hidden4 = w_q.shape[2]
    out: dict[str, Array] = {}
    for d, suffix in enumerate(("", "_reverse")):
        w = (w_q[d].astype(np.float32) - np.float32(w_zp[d])) * np.float32(w_scale[d])
        r = (r_q[d].astype(np.float32) - np.float32(r_zp[d])) * np.float32(r_scale[d])
        out[f"{module}.weight_ih_l0{suffix}"] = _reorder_gates(w.T)
        out[f"{module}.weight_hh_l0{suffix}"] = _reorder_gates(r.T)
        out[f"{module}.bias_ih_l0{suffix}"] = _reorder_gates(bias[d, :hidden4])
        out[f"{module}.bias_hh_l0{suffix}"] = _reorder_gates(bias[d, hidden4:])
    return out


def read_onnx(model: Path) -> dict[str, Array]:
    """Kokoro's float32 weights under their PyTorch names and in PyTorch layouts."""
    import onnx

    g = _Graph(onnx.load(str(model)).graph)
    weights: dict[str, Array] = {}

    def put(name: str, value: Array) -> None:
        # ALBERT's one layer is called 12 times: every call must find the same weight.
        if name in weights and not np.array_equal(weights[name], value):
            raise ValueError(f"{model.name}: two different weights for {name}")
        weights[name] = np.ascontiguousarray(value, dtype=np.float32)

    for node in g.nodes:
        op = node.op_type
        if op in ("MatMulInteger", "ConvInteger") and node.input[1] in g.values:
            q = g.values[node.input[1]]
            axis = 1 if op == "MatMulInteger" else 0  # (in, out) or (out, in, k)
            zp = _per_output(g.values[node.input[3]], q.ndim, axis) if len(node.input) > 3 else 0
            scale = _per_output(g.weight_scale(node), q.ndim, axis)
            w = (q.astype(np.float32) - np.asarray(zp, np.float32)) * np.asarray(scale, np.float32)
            put(f"{module_of(node.name)}.weight", w.T if op == "MatMulInteger" else w)
        elif op in ("Conv", "ConvTranspose", "MatMul") and node.input[1] in g.values:
            if node.input[1] in _STFT_BUFFERS:
                continue
            w = g.values[node.input[1]]
            put(f"{module_of(node.name)}.weight", w.T if op == "MatMul" else w)
        elif op == "DequantizeLinear" and g.producer[node.input[0]].op_type == "Gather":
            table = g.producer[node.input[0]].input[0]
            q = g.values[table].astype(np.float32)
            zp = g.values[node.input[2]].astype(np.float32)
            put(_torch_name(table.removesuffix("_quantized")), (q - zp) * g.values[node.input[1]])
        elif op == "DynamicQuantizeLSTM":
            for name, value in _lstm(g, node, module_of(node.name)).items():
                put(name, value)
    for name in g.initializers:
        value = g.values[name]
        if name in _STFT_BUFFERS:
            put(_STFT_BUFFERS[name], value)
        elif (
            name.startswith(("encoder.", "decoder."))
            and np.issubdtype(value.dtype, np.floating)
            and not name.endswith(("_scale", "_quantized"))
        ):
            put(_torch_name(name), value)
    if "decoder.generator.conv_post.weight" not in weights:
        raise ValueError(f"{model.name}: not a Kokoro export")
    return weights


def to_mlx_layout(weights: dict[str, Array]) -> dict[str, Array]:
    """Convolutions ``(out, in/groups, k)`` -> ``(out, k, in/groups)``; transposed ones
    ``(in, out/groups, k)`` -> ``(out, k, in/groups)``; linears and the rest unchanged."""
    out = {}
    for name, w in weights.items():
        if w.ndim != 3 or not name.endswith(".weight"):
            out[name] = w
        elif not _TRANSPOSED.search(name) or w.shape[1] == 1:
            # A depthwise transposed one (the pools) reads the same: one channel per group.
            out[name] = np.ascontiguousarray(w.transpose(0, 2, 1))
        else:
            out[name] = np.ascontiguousarray(w.transpose(1, 2, 0))
    return out


def load_weights(model: Path, directory: Path | None = None) -> dict[str, mx.array]:
    """The model's weights as MLX arrays: from the cache, converting the ``.onnx`` first if new.

    Runs MLX: call it on the thread that will run the model.
    """
    import mlx.core as mx

    path = cache_path(model, directory)
    if not path.is_file():
        arrays = to_mlx_layout(read_onnx(model))
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.stem}.tmp{os.getpid()}.safetensors")
        mx.save_safetensors(str(tmp), {k: mx.array(v) for k, v in arrays.items()})
        os.replace(tmp, path)
    loaded: dict[str, mx.array] = mx.load(str(path))  # type: ignore[assignment]
    return loaded
