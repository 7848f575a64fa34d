"""A Piper ``.onnx`` voice's weights as MLX arrays, converted once and cached as safetensors.

Piper exports its VITS checkpoints to ONNX with weight norm already folded in. Most
initializers keep their training names (``enc_p.*``, ``dp.*``, ``flow.*``, ``dec.*``); the rest
are anonymous (``onnx::Conv_8168``) or oddly named (the phoneme embedding is called ``sid``), so
every convolution and gather is named here after the node that consumes it
(``/flow/flows.6/enc/in_layers.0/Conv`` -> ``flow.flows.6.enc.in_layers.0.weight``). Constant
folding also turned the duration predictor's first affine flow's ``exp(-logs)`` into a
``Constant`` node, which is read back the same way.

The ``onnx`` package is needed only for the first conversion of a voice; later loads read the
safetensors file. Loading creates MLX arrays, so it must run on the thread that will use them.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt

from ...cache import cache_dir, content_key

if TYPE_CHECKING:
    import mlx.core as mx

FORMAT_VERSION = 1
"""Bump when the cached layout changes, so stale caches are ignored rather than misread."""

_PREFIXES = ("enc_p.", "dp.", "flow.", "dec.", "emb_g.")
_METADATA_KEY = "voicews.mlx_piper"

Array = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class ConvAttrs:
    """How a convolution node was called: padding and dilation are not in the weights."""

    kind: str  # "Conv" or "ConvTranspose"
    dilation: int
    pad_left: int
    pad_right: int
    stride: int
    groups: int


@dataclass(frozen=True)
class VoiceWeights:
    """Converted weights (MLX layout: convolutions as ``(out, kernel, in)``) and conv calls."""

    arrays: dict[str, mx.array]
    convs: dict[str, ConvAttrs]

    def __getitem__(self, name: str) -> mx.array:
        return self.arrays[name]

    def __contains__(self, name: object) -> bool:
        return name in self.arrays

    def get(self, name: str) -> mx.array | None:
        return self.arrays.get(name)

    def conv(self, module: str) -> ConvAttrs:
        return self.convs[module]


def cache_path(model: Path, directory: Path | None = None) -> Path:
    """One file per voice content (not path), so an edited voice is converted again."""
    stem = model.name.removesuffix(".onnx")
    folder = (directory or cache_dir()) / "mlx-piper"
    return folder / f"{stem}-{content_key(model)}-v{FORMAT_VERSION}.safetensors"


def _module_of(node_name: str) -> str:
    """``/flow/flows.6/enc/in_layers.0/Conv`` -> ``flow.flows.6.enc.in_layers.0``."""
    return ".".join(node_name.strip("/").split("/")[:-1])


def read_onnx(model: Path) -> tuple[dict[str, Array], dict[str, ConvAttrs]]:
    """Training-named float32 weights (PyTorch layouts) and each conv's call, from the graph."""
    import onnx
    from onnx import helper, numpy_helper

    graph = onnx.load(str(model)).graph
    if any(i.name == "sid" for i in graph.input):
        raise NotImplementedError(f"{model.name}: multi-speaker Piper voices are not supported")
    values: dict[str, Any] = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    initializers = set(values)
    for node in graph.node:
        if node.op_type == "Constant":
            values[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)

    weights: dict[str, Array] = {}
    convs: dict[str, ConvAttrs] = {}
    for node in graph.node:
        module = _module_of(node.name)
        if node.op_type in ("Conv", "ConvTranspose") and module:
            for index, suffix in ((1, "weight"), (2, "bias")):
                if index < len(node.input) and node.input[index] in values:
                    weights[f"{module}.{suffix}"] = values[node.input[index]]
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            pads = list(attrs.get("pads", [0, 0]))
            convs[module] = ConvAttrs(
                kind=node.op_type,
                dilation=int(attrs.get("dilations", [1])[0]),
                pad_left=int(pads[0]),
                pad_right=int(pads[1]),
                stride=int(attrs.get("strides", [1])[0]),
                groups=int(attrs.get("group", 1)),
            )
        elif node.op_type == "Gather" and module and node.input[0] in initializers:
            table = values[node.input[0]]
            if table.ndim == 2 and np.issubdtype(table.dtype, np.floating):  # an embedding
                weights[f"{module}.weight"] = table
        elif node.name == "/dp/flows.0/Mul" and "dp.flows.0.logs" not in values:
            # ElementwiseAffine in reverse multiplies by exp(-logs), folded to a constant.
            folded = [values[i] for i in node.input if i in values]
            if folded:
                weights["dp.flows.0.logs"] = -np.log(np.asarray(folded[0], dtype=np.float64))
    for name, value in values.items():
        if name.startswith(_PREFIXES) and name not in weights:
            weights[name] = value
    _fold_weight_norm(weights)
    missing = [
        n
        for n in ("enc_p.emb.weight", "dec.conv_pre.weight", "dp.flows.0.logs")
        if n not in weights
    ]
    if missing:
        raise ValueError(f"{model.name}: not a Piper VITS export (missing {', '.join(missing)})")
    out = {
        k: np.ascontiguousarray(v, dtype=np.float32)
        for k, v in weights.items()
        if np.issubdtype(np.asarray(v).dtype, np.floating)
    }
    return out, convs


def _fold_weight_norm(weights: dict[str, Any]) -> None:
    """Exports made without ``remove_weight_norm`` keep ``weight_g``/``weight_v``: fold them."""
    for name in [n for n in weights if n.endswith(".weight_g")]:
        base = name.removesuffix("_g")
        g, v = weights.pop(name), weights.pop(base + "_v")
        norm = np.sqrt((v.astype(np.float64) ** 2).sum(axis=tuple(range(1, v.ndim)), keepdims=True))
        weights[base] = (g * v / norm).astype(np.float32)


def to_mlx_layout(weights: dict[str, Array], convs: dict[str, ConvAttrs]) -> dict[str, Array]:
    """Conv ``(O, I, K)`` -> ``(O, K, I)``; ConvTranspose ``(I, O, K)`` -> ``(O, K, I)``."""
    out = dict(weights)
    for module, attrs in convs.items():
        name = f"{module}.weight"
        if name not in out:
            continue
        w = out[name]
        if attrs.kind == "ConvTranspose":
            out[name] = np.ascontiguousarray(w.transpose(1, 2, 0))
        else:
            out[name] = np.ascontiguousarray(w.transpose(0, 2, 1))
    return out


def load_voice_weights(model: Path, directory: Path | None = None) -> VoiceWeights:
    """The voice's weights as MLX arrays: from the cache, converting the ``.onnx`` first if new.

    Runs MLX: call it on the thread that will run the model.
    """
    import mlx.core as mx

    path = cache_path(model, directory)
    if not path.is_file():
        weights, convs = read_onnx(model)
        arrays = to_mlx_layout(weights, convs)
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = json.dumps({k: asdict(a) for k, a in convs.items()})
        tmp = path.with_name(f"{path.stem}.tmp{os.getpid()}.safetensors")
        mx.save_safetensors(
            str(tmp), {k: mx.array(v) for k, v in arrays.items()}, metadata={_METADATA_KEY: meta}
        )
        os.replace(tmp, path)
    return read_converted(path)


def read_converted(path: Path) -> VoiceWeights:
    """A converted voice's safetensors file, as written above (also where no ``.onnx`` is)."""
    import mlx.core as mx

    loaded, metadata = cast(
        "tuple[dict[str, mx.array], dict[str, str]]", mx.load(str(path), return_metadata=True)
    )
    raw = json.loads(metadata[_METADATA_KEY])
    return VoiceWeights(arrays=loaded, convs={k: ConvAttrs(**v) for k, v in raw.items()})
