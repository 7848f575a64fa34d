"""The graph the onnxruntime engine runs: frames per token given out, the leading pad cropped.

The words are placed on the frames each token takes, so the graph gives them as a second
output. And the model gives the leading pad 14-20 frames (0.35-0.5 s of silence, of which the
stitcher keeps 15 ms) while the decoder's cost is per frame: a quarter of a short segment's
compute went on silence nobody hears. The pad's frames keep their place in the alignment, so
the durations, pitch and energy are the model's own; only the decoder's inputs (the aligned
text features, and pitch and energy at twice the frame rate) lose all but the pad's last
:data:`.assets.LEAD_FRAMES`, and the frames given out count what was rendered.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ...cache import cache_dir, write_atomically
from .assets import LEAD_FRAMES

DURATIONS = "/encoder/Clip_output_0"
"""Frames per input token (pads included), after speed: the alignment's, rounded."""
FRAMES = "frames"
"""The output: :data:`DURATIONS` with the leading pad's as rendered."""
ASR = "/encoder/MatMul_1_output_0"
"""The decoder's inputs in the export: the aligned text features ``(1, 512, F)``, and pitch
and energy ``(1, 2F)``."""
PITCH, ENERGY = "/encoder/Reshape_output_0", "/encoder/Reshape_1_output_0"


def timed_graph(model: Path, lead_frames: int | None = LEAD_FRAMES) -> Path:
    """``model`` with :data:`FRAMES` as a second output and its leading pad cropped to
    ``lead_frames`` before the decoder (not when None), made once into the cache."""
    lead = "" if lead_frames is None else f"-lead{lead_frames}"
    patched = cache_dir() / "kokoro" / f"{model.stem}-timed{lead}.onnx"
    if patched.is_file():
        return patched
    import onnx
    from onnx import TensorProto, helper

    graph = onnx.load(str(model))
    _crop_lead(graph.graph, lead_frames)
    graph.graph.output.append(helper.make_tensor_value_info(FRAMES, TensorProto.FLOAT, None))
    write_atomically(patched, graph.SerializeToString())
    return patched


def _crop_lead(graph: Any, lead_frames: int | None) -> None:
    """Add ``frames = [min(d0, lead)] ++ d[1:]`` after :data:`DURATIONS`, and slice the first
    ``d0 - min(d0, lead)`` frames off each decoder input right after it is made (with no lead,
    ``frames`` is :data:`DURATIONS` and nothing is sliced)."""
    from onnx import TensorProto, helper, numpy_helper

    make = helper.make_node
    if lead_frames is None:
        at = next(i for i, node in enumerate(graph.node) if DURATIONS in node.output)
        graph.node.insert(at + 1, make("Identity", [DURATIONS], [FRAMES], name="/lead/frames"))
        return
    constants: dict[str, npt.NDArray[Any]] = {
        "lead/frames": np.array(lead_frames, np.float32),
        "lead/zero": np.array([0], np.int64),
        "lead/one": np.array([1], np.int64),
        "lead/two": np.array([2], np.int64),
        "lead/end": np.array([np.iinfo(np.int64).max], np.int64),
    }
    graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in constants.items())
    after = {
        DURATIONS: [
            make("Slice", [DURATIONS, "lead/zero", "lead/one", "lead/one"], ["lead/d0"]),
            make("Slice", [DURATIONS, "lead/one", "lead/end", "lead/one"], ["lead/rest"]),
            make("Min", ["lead/d0", "lead/frames"], ["lead/kept"]),
            make("Concat", ["lead/kept", "lead/rest"], [FRAMES], axis=1),
            make("Sub", ["lead/d0", "lead/kept"], ["lead/cropped"]),
            make("Cast", ["lead/cropped"], ["lead/cropped64"], to=TensorProto.INT64),
            make("Reshape", ["lead/cropped64", "lead/one"], ["lead/drop"]),
            make("Mul", ["lead/drop", "lead/two"], ["lead/drop2"]),
        ]
    }
    for name, drop, axis in ((ASR, "lead/drop", "lead/two"), (PITCH, "lead/drop2", "lead/one"),
                             (ENERGY, "lead/drop2", "lead/one")):  # fmt: skip
        whole = f"{name}/whole"
        producer = next(node for node in graph.node if name in node.output)
        producer.output[list(producer.output).index(name)] = whole
        after[whole] = [make("Slice", [whole, drop, "lead/end", axis], [name])]
    nodes = list(graph.node)
    del graph.node[:]
    for node in nodes:
        graph.node.append(node)
        for output in node.output:
            for made in after.get(output, []):
                made.name = f"/lead/{made.output[0].replace('/', '_')}"
                graph.node.append(made)
