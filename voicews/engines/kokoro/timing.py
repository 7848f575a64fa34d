"""The graph the onnxruntime engine runs: frames per token given out, both ends' silence cropped.

The words are placed on the frames each token takes, so the graph gives them as a second
output. And the decoder's cost is per frame, while the model gives the leading pad 14-20
frames (0.35-0.5 s of silence, of which the stitcher keeps 15 ms) and a piece's last sound
19-22 frames after it (its last phoneme's lengthening, the punctuation, the end pad; the
stitcher keeps 40-260 ms): a short segment spent half its compute on silence nobody hears.
The frames keep their place in the alignment, so the durations, pitch and energy are the
model's own; only the decoder's inputs (the aligned text features, and pitch and energy at
twice the frame rate) lose all but the leading pad's last :data:`.assets.LEAD_FRAMES`, and
all after :class:`Tail`'s frames from the last sounding token's start (inputs ``last`` and
``tail``: the engine chooses them per piece). The frames given out are the model's (the lead
cropped): :func:`rendered` clips them to what was rendered.

The decoder normalizes each channel over the whole piece (instance norms), so fewer silent
frames make the speech quieter: :func:`level` gives that back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ...cache import cache_dir, write_atomically
from .assets import LEAD_FRAMES
from .phonemes import CLAUSE_MARKS, PUNCTUATION, SENTENCE_MARKS

DURATIONS = "/encoder/Clip_output_0"
"""Frames per input token (pads included), after speed: the alignment's, rounded."""
FRAMES = "frames"
"""The output: :data:`DURATIONS` with the leading pad's as rendered."""
ASR = "/encoder/MatMul_1_output_0"
"""The decoder's inputs in the export: the aligned text features ``(1, 512, F)``, and pitch
and energy ``(1, 2F)``."""
PITCH, ENERGY = "/encoder/Reshape_output_0", "/encoder/Reshape_1_output_0"
PARTS = ("prosody", "decoder")
LAST, TAIL = "last", "tail"
"""The graph's inputs (int64, shape ``(1,)``): :attr:`Tail.last` and :attr:`Tail.frames`."""

SENTENCE_TAIL, CLAUSE_TAIL, WORD_TAIL = 17, 12, 8
"""Frames rendered from the start of a piece's last sounding token, by how the piece ends: its
sound lasts at most 6 frames from there in 95% of 282 pieces measured (three voices: 99%
within 12, the rest breath), and the stitcher keeps 260, 140 and 40 ms of pause after a
sentence, a clause and a word (``voicews.audio.StitchConfig``), about 10, 6 and 2 frames."""
LEVEL_DB = 8.0
"""dB the speech of a piece loses per unit of the share of its frames cropped at its end
(282 pieces, three voices: slope 7.0-9.2, 0.46 dB left after it, fitted through zero)."""
UNCROPPED = 1 << 20
"""A tail so long that nothing is cropped."""
_SILENT = frozenset(PUNCTUATION + " ")


@dataclass(frozen=True, slots=True)
class Tail:
    """What of a piece's end the decoder renders: ``frames`` from the start of the token at
    ``last`` (in the padded tokens, ``[PAD, *tokens, PAD]``)."""

    last: int
    frames: int


def tail(phonemes: str, speed: float = 1.0, crop: bool = True) -> Tail:
    """Where a piece's rendering should end: its last sounding phoneme (not punctuation, not a
    space) and the frames after its start for the ending (:data:`SENTENCE_TAIL` ...), more
    below speed 1, as the sound stretches; with ``crop`` False, all of it."""
    sounding = [i for i, symbol in enumerate(phonemes) if symbol not in _SILENT]
    last = sounding[-1] + 1 if sounding else len(phonemes) + 1
    end = phonemes.rstrip()[-1:]
    frames = WORD_TAIL
    if end and end in SENTENCE_MARKS:
        frames = SENTENCE_TAIL
    elif end and end in CLAUSE_MARKS:
        frames = CLAUSE_TAIL
    return Tail(last, math.ceil(frames / min(speed, 1.0)) if crop else UNCROPPED)


def rendered(frames: npt.ArrayLike, end: Tail) -> npt.NDArray[np.int64]:
    """The frames of each token the decoder rendered, of ``frames`` (the graph's output, the
    lead cropped) with ``end`` cropped as the graph crops it."""
    counts = np.rint(np.asarray(frames, dtype=np.float64).ravel()).astype(np.int64)
    stops = np.cumsum(counts)
    keep = min(int(stops[-1]), int(stops[end.last] - counts[end.last]) + end.frames)
    kept: npt.NDArray[np.int64] = np.clip(np.minimum(stops, keep) - (stops - counts), 0, None)
    return kept


def level(frames: npt.ArrayLike, kept: npt.ArrayLike) -> float:
    """The gain that gives a piece cropped from ``frames`` to ``kept`` frames per token the
    loudness it would have had whole (:data:`LEVEL_DB`)."""
    total = float(np.sum(frames))
    cropped = (total - float(np.sum(kept))) / total if total > 0 else 0.0
    return float(10 ** (LEVEL_DB * cropped / 20))


def timed_graph(model: Path, lead_frames: int | None = LEAD_FRAMES) -> Path:
    """``model`` with :data:`FRAMES` as a second output, its leading pad cropped to
    ``lead_frames`` before the decoder (not when None) and its end to the inputs :data:`LAST`
    and :data:`TAIL`, made once into the cache."""
    lead = "" if lead_frames is None else f"-lead{lead_frames}"
    patched = cache_dir() / "kokoro" / f"{model.stem}-timed2{lead}.onnx"
    if patched.is_file():
        return patched
    import onnx
    from onnx import TensorProto, helper

    graph = onnx.load(str(model))
    _crop(graph.graph, lead_frames)
    graph.graph.input.extend(
        helper.make_tensor_value_info(name, TensorProto.INT64, [1]) for name in (LAST, TAIL)
    )
    graph.graph.output.append(helper.make_tensor_value_info(FRAMES, TensorProto.FLOAT, None))
    write_atomically(patched, graph.SerializeToString())
    return patched


def halves(timed: Path) -> tuple[Path, Path]:
    """The :func:`timed_graph` ``timed`` cut before its decoder, made once into the cache: the
    prosody (its inputs to :data:`ASR`, :data:`PITCH`, :data:`ENERGY` and :data:`FRAMES`) and
    the decoder (those three and the style to the audio), so that a long piece's decoder can
    run in windows (:mod:`.windows`)."""
    prosody, decoder = (timed.with_name(f"{timed.stem}-{part}.onnx") for part in PARTS)
    if prosody.is_file() and decoder.is_file():
        return prosody, decoder
    import onnx
    from onnx.utils import Extractor

    graph = onnx.load(str(timed))
    inputs = [i.name for i in graph.graph.input]
    extract = Extractor(graph).extract_model
    write_atomically(decoder, extract([ASR, PITCH, ENERGY, "style"], ["audio"]).SerializeToString())
    made = extract(inputs, [ASR, PITCH, ENERGY, FRAMES])
    write_atomically(prosody, made.SerializeToString())
    return prosody, decoder


def _crop(graph: Any, lead_frames: int | None) -> None:
    """Add ``frames = [min(d0, lead)] ++ d[1:]`` after :data:`DURATIONS`, and slice each
    decoder input right after it is made to the frames from ``d0 - min(d0, lead)`` to the
    tail's end: ``min(sum(frames), start of frames[last] + tail)`` frames later."""
    from onnx import TensorProto, helper, numpy_helper

    make = helper.make_node
    lead = np.inf if lead_frames is None else lead_frames
    constants: dict[str, npt.NDArray[Any]] = {
        "crop/lead": np.array(lead, np.float32),
        "crop/zero": np.array([0], np.int64),
        "crop/one": np.array([1], np.int64),
        "crop/two": np.array([2], np.int64),
        "crop/axis": np.array(1, np.int64),
        "crop/end": np.array([np.iinfo(np.int64).max], np.int64),
    }
    graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in constants.items())
    after = {
        DURATIONS: [
            make("Slice", [DURATIONS, "crop/zero", "crop/one", "crop/one"], ["crop/d0"]),
            make("Slice", [DURATIONS, "crop/one", "crop/end", "crop/one"], ["crop/rest"]),
            make("Min", ["crop/d0", "crop/lead"], ["crop/kept"]),
            make("Concat", ["crop/kept", "crop/rest"], [FRAMES], axis=1),
            make("Sub", ["crop/d0", "crop/kept"], ["crop/cropped"]),
            make("Cast", ["crop/cropped"], ["crop/cropped64"], to=TensorProto.INT64),
            make("Reshape", ["crop/cropped64", "crop/one"], ["crop/drop"]),
            make("Mul", ["crop/drop", "crop/two"], ["crop/drop2"]),
            # The tail: where the last sounding token starts, plus its frames, at most all.
            make("CumSum", [FRAMES, "crop/axis"], ["crop/stops"]),
            make("Sub", ["crop/stops", FRAMES], ["crop/starts"]),
            make("Gather", ["crop/starts", LAST], ["crop/start"], axis=1),
            make("Cast", [TAIL], ["crop/tail"], to=TensorProto.FLOAT),
            make("Add", ["crop/start", "crop/tail"], ["crop/wanted"]),
            make("ReduceSum", [FRAMES], ["crop/total"], keepdims=1),
            make("Min", ["crop/wanted", "crop/total"], ["crop/kept_end"]),
            make("Cast", ["crop/kept_end"], ["crop/kept64"], to=TensorProto.INT64),
            make("Reshape", ["crop/kept64", "crop/one"], ["crop/keep"]),
            make("Add", ["crop/drop", "crop/keep"], ["crop/stop"]),
            make("Mul", ["crop/stop", "crop/two"], ["crop/stop2"]),
        ]
    }
    for name, start, stop, axis in (
        (ASR, "crop/drop", "crop/stop", "crop/two"),
        (PITCH, "crop/drop2", "crop/stop2", "crop/one"),
        (ENERGY, "crop/drop2", "crop/stop2", "crop/one"),
    ):
        whole = f"{name}/whole"
        producer = next(node for node in graph.node if name in node.output)
        producer.output[list(producer.output).index(name)] = whole
        after[whole] = [make("Slice", [whole, start, stop, axis], [name])]
    nodes = list(graph.node)
    del graph.node[:]
    for node in nodes:
        graph.node.append(node)
        for output in node.output:
            for made in after.get(output, []):
                made.name = f"/crop/{made.output[0].replace('/', '_')}"
                graph.node.append(made)
