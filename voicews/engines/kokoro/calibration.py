"""The activation ranges of Kokoro's static graph: measured once, shipped beside the config.

The static graph (:func:`.graphs.static_graph`) quantizes the inputs and outputs of its
convolutions with fixed ranges. Measuring them runs every :data:`CALIBRATION` sentence in every
shipped voice through a graph instrumented at each of those tensors: minutes on two busy
cores, too long for a first start. So they are measured once (``python -m bench
kokoro_calibrate``) and shipped in :data:`RANGES` with the sha256 of the model they were
measured on; the graph is then built from the shipped weights and ranges in seconds.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

RANGES = Path(__file__).with_name("static_ranges.json")

CALIBRATION = (
    "Hello there, how can I help?",
    "The museum opens at nine on weekdays, and at ten on Sundays.",
    "Could you spell that for me, please?",
    "Thanks! I will call you back later today, around four.",
    "Wow, that is a great idea; let us try it.",
)
"""Sentences whose activations set the static graph's ranges: a greeting, a long statement,
a question, an exclamation, numbers read as words. None is spoken in a test or a benchmark."""


@dataclass(frozen=True)
class Ranges:
    """Each calibrated tensor's range (float32, exactly as measured: one each, or one per
    channel), and the sha256 of the int8 model they were measured on."""

    model_sha256: str
    tensors: dict[str, tuple[list[float], list[float]]]

    def to_json(self) -> str:
        tensors = {k: [lo, hi] for k, (lo, hi) in sorted(self.tensors.items())}
        return json.dumps({"model_sha256": self.model_sha256, "tensors": tensors}) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Ranges:
        body = json.loads(text)
        tensors = {k: (list(lo), list(hi)) for k, (lo, hi) in body["tensors"].items()}
        return cls(str(body["model_sha256"]), tensors)

    def cache_file(self, path: Path) -> None:
        """Write them as onnxruntime's calibration cache (``quantize_static``'s
        ``calibration_cache_path``), which then skips its calibration run."""
        from onnxruntime.quantization.calibrate import (
            CalibrationMethod,
            TensorData,
            TensorsData,
            save_tensors_data,
        )

        data = {
            name: TensorData(lowest=_array(lo), highest=_array(hi))
            for name, (lo, hi) in self.tensors.items()
        }
        save_tensors_data(TensorsData(CalibrationMethod.MinMax, data), path)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def shipped() -> Ranges:
    return Ranges.from_json(RANGES.read_text(encoding="utf-8"))


def measure(
    graph: Path,
    model_sha256: str,
    tensors: Iterable[str],
    voices: Iterable[str] | None = None,
    sentences: Iterable[str] = CALIBRATION,
) -> Ranges:
    """Run ``sentences`` in ``voices`` (all shipped ones by default) through ``graph``, the
    model with the convolutions to quantize in float, and keep the ranges of ``tensors``: the
    mean over the runs of each run's lowest and highest value (onnxruntime's MinMax with
    ``moving_average``). The extremes of all runs instead, set by a rare peak, left the
    common values fewer steps: DNSMOS OVRL 0.053 under the shipped int8 graph's against 0.006
    (32 clips, two voices: ``python -m bench kokoro_ab`` gives the held-out figures)."""
    from onnxruntime.quantization import CalibrationMethod, create_calibrator

    wanted = set(tensors)
    with tempfile.TemporaryDirectory(prefix="voicews-calibration-") as tmp:
        calibrator = create_calibrator(
            graph, ["Conv"], augmented_model_path=str(Path(tmp) / "augmented.onnx"),
            calibrate_method=CalibrationMethod.MinMax, extra_options={"moving_average": True},
        )  # fmt: skip
        calibrator.collect_data(reader(voices, sentences))
        measured = calibrator.compute_data()
    ranges = {}
    for name in wanted:
        lo, hi = measured[name].range_value
        ranges[name] = (_floats(lo), _floats(hi))
    return Ranges(model_sha256, ranges)


def _floats(values: Any) -> list[float]:
    """float32 values as JSON keeps them exactly (a double holds every float32)."""
    return [float(v) for v in np.asarray(values, dtype=np.float32).ravel()]


def _array(values: list[float]) -> np.ndarray[Any, Any]:
    return np.array(values, dtype=np.float32)


def reader(voices: Iterable[str] | None = None, sentences: Iterable[str] = CALIBRATION) -> Any:
    """onnxruntime's calibration reader over ``sentences`` in ``voices`` (every shipped one)."""
    from onnxruntime.quantization import CalibrationDataReader

    feeds = _feeds(voices, tuple(sentences))

    class Reader(CalibrationDataReader):  # type: ignore[misc]
        def get_next(self) -> dict[str, Any] | None:
            return next(feeds, None)

    return Reader()


def _feeds(voices: Iterable[str] | None, sentences: tuple[str, ...]) -> Iterator[dict[str, Any]]:
    from .assets import language, load_voice, style
    from .assets import voices as shipped_voices
    from .phonemes import MAX_PHONEMES, PAD, phonemize, tokenize

    for voice in voices if voices is not None else shipped_voices():
        pack = load_voice(voice)
        for text in sentences:
            for phonemes in phonemize(text, language(voice), MAX_PHONEMES):
                tokens = tokenize(phonemes)
                yield {
                    "tokens": np.array([[PAD, *tokens, PAD]], dtype=np.int64),
                    "style": style(pack, len(tokens)),
                    "speed": np.array([1.0], dtype=np.float32),
                }
