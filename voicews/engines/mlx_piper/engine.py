"""The ``mlx-piper`` engine: Piper voices run by MLX, audio streamed window by window.

Construct it on the thread that will call ``synthesize`` (the compute worker does): MLX
streams belong to the thread that created them, and the constructor loads the weights.
Nothing here touches MLX at import time.

Per-server settings come from the environment, per-session ones from ``SynthesisOptions``:

- ``VOICEWS_MLX_CHUNK_FRAMES`` (``chunk_frames``): latent frames per window once ramped up.
- ``VOICEWS_MLX_INITIAL_CHUNK_FRAMES``: the first window's frames; windows double from it.
- ``VOICEWS_MLX_DECODE``: ``stream`` (default; exact, state carried across windows) or
  ``overlap`` (windows decoded alone with context, crossfaded).
- ``VOICEWS_MLX_OVERLAP_FRAMES`` (``overlap_frames``): context frames for ``overlap``. A
  session that sets ``overlap_frames`` asks for overlap decoding with that context.
- ``VOICEWS_MLX_DEVICE``: ``cpu`` or ``gpu`` to override MLX's default device.
- ``VOICEWS_CACHE_DIR``: where converted weights are cached (``~/.cache/voicews``).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ...audio import Audio
from ..base import SynthesisOptions, WordStarts
from ..piper_words import WordPlacer, inference_chunks, phonemize

if TYPE_CHECKING:
    from .model import PiperVits

log = logging.getLogger(__name__)

DEFAULT_CHUNK_FRAMES = 64
"""Measured with bench/mlx_chunked.py (9 s sentence, MLX CPU): streaming costs 10-20% more
compute than the one-shot decode at 64 frames, 25-45% at 16-32; 128 saves a few percent more
but holds the compute worker (which switches jobs between windows) twice as long."""
DEFAULT_INITIAL_CHUNK_FRAMES = 8
"""Measured: the first window, with the lookahead the layers after it need, then costs a
fraction of the encoder's time, so compute before first audio is about a tenth of the whole
segment's; 4 gains nothing measurable, 16 costs more."""
DEFAULT_OVERLAP_FRAMES = 24
"""For ``overlap`` decoding: the flow sees 32 frames each way, and measured SNR against the
one-shot decode was 64-103 dB with 24 frames of context, but only 24-44 dB with 16 and 20-34
with 12 (three sentences, 32-frame windows)."""
DECODE_MODES = ("stream", "overlap")


def _env_int(name: str, default: int, minimum: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    value = int(raw)
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, not {value}")
    return value


class MlxPiperEngine:
    """One Piper voice (``.onnx`` with its ``.onnx.json``) on MLX's default device."""

    name = "mlx-piper"
    concurrent = False  # MLX streams belong to the thread that made them

    def __init__(
        self,
        voice: str | Path | None = None,
        *,
        cache_dir: Path | None = None,
        seed: int | None = None,
    ) -> None:
        import mlx.core as mx
        from piper import PiperVoice
        from piper.config import PiperConfig

        from ..piper import bundled_voice
        from .model import PiperVits
        from .weights import load_voice_weights

        model = Path(voice) if voice else bundled_voice()
        config_path = model.with_name(model.name + ".json")
        if not model.is_file() or not config_path.is_file():
            raise FileNotFoundError(f"Piper voice needs {model} and {config_path}")
        config = PiperConfig.from_dict(json.loads(config_path.read_text(encoding="utf-8")))
        if config.num_speakers > 1:
            raise NotImplementedError(f"{model.name}: multi-speaker voices are not supported")
        device = os.environ.get("VOICEWS_MLX_DEVICE", "").lower()
        if device in ("cpu", "gpu"):
            mx.set_default_device(mx.cpu if device == "cpu" else mx.gpu)
        # Only piper-tts's phonemizer is used: no onnxruntime session is created.
        self._phonemizer = PiperVoice(session=None, config=config)
        self._words = WordPlacer(self._phonemizer)
        self._hop = int(config.hop_length)
        self._noise_scale = float(config.noise_scale)
        self._noise_w = float(config.noise_w_scale)
        self._length_scale = float(config.length_scale)
        self.sample_rate: int = config.sample_rate
        self.model: PiperVits = PiperVits(load_voice_weights(model, cache_dir))
        self.device = str(mx.default_device())
        self._rng = np.random.default_rng(seed)
        self.chunk_frames = _env_int("VOICEWS_MLX_CHUNK_FRAMES", DEFAULT_CHUNK_FRAMES, 1)
        self.initial_chunk_frames = _env_int(
            "VOICEWS_MLX_INITIAL_CHUNK_FRAMES", DEFAULT_INITIAL_CHUNK_FRAMES, 1
        )
        self.overlap_frames = _env_int("VOICEWS_MLX_OVERLAP_FRAMES", DEFAULT_OVERLAP_FRAMES, 0)
        self.decode_mode = os.environ.get("VOICEWS_MLX_DECODE", "stream") or "stream"
        if self.decode_mode not in DECODE_MODES:
            raise ValueError(f"VOICEWS_MLX_DECODE must be one of {DECODE_MODES}")
        log.info("mlx-piper: %s on %s", model.name, self.device)

    def phoneme_ids(self, text: str, speed: float = 1.0) -> list[list[int]]:
        """Piper's phoneme ids for each inference of ``text``: per sentence, exactly as
        piper-tts makes them, with a long sentence split as the other engine splits it."""
        return [ids for _, ids in self._sentences(text, speed)]

    def _sentences(self, text: str, speed: float) -> list[tuple[list[str], list[int]]]:
        sentences = [p for p in phonemize(self._phonemizer, text) if p]
        return [
            (phonemes, self._phonemizer.phonemes_to_ids(phonemes))
            for phonemes in inference_chunks(sentences, speed)
        ]

    def synthesize(self, text: str, options: SynthesisOptions) -> Iterator[Audio | WordStarts]:
        from .decode import overlap_windows, streaming_windows, window_plan

        chunk = options.chunk_frames or self.chunk_frames
        initial = min(self.initial_chunk_frames, chunk)
        overlap = options.overlap_frames
        if overlap is None and self.decode_mode == "overlap":
            overlap = self.overlap_frames
        timed = []
        for phonemes, ids in self._sentences(text, options.speed):
            latents = self.model.latents(
                ids,
                noise_scale=self._noise_scale,
                length_scale=self._length_scale / options.speed,
                noise_w=self._noise_w,
                rng=self._rng,
            )
            plan = window_plan(int(latents.z_p.shape[0]), chunk, initial)
            if overlap is None:
                windows = streaming_windows(self.model, latents.z_p, plan)
            else:
                windows = overlap_windows(self.model, latents.z_p, plan, overlap)
            for audio in windows:
                yield np.array(audio, dtype=np.float32)
            timed.append((phonemes, latents.durations * self._hop))
        placed = self._words.place(text, timed) if timed else None
        if placed is not None:
            yield placed
