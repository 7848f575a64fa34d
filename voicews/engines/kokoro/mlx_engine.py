"""Kokoro-82M on MLX: ``voicews serve --engine mlx-kokoro [--voice af_heart]``.

The same model, voices and phonemes as the onnxruntime engine (:mod:`.engine`): the weights
are converted once from the int8 ONNX export (:mod:`.mlx_weights`) and run in float32 by
:mod:`.mlx_model`, on Apple's GPU where MLX has one. Construct it on the thread that will call
``synthesize`` (the compute worker does): MLX streams belong to the thread that made them.
Nothing here touches MLX at import time.

- ``VOICEWS_MLX_DEVICE``: ``cpu`` or ``gpu`` to override MLX's default device.
- ``VOICEWS_CACHE_DIR``: where the converted weights are cached (``~/.cache/voicews``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ...audio import Audio
from ..base import SynthesisOptions, WordStarts
from .assets import (
    DEFAULT_VOICE,
    SAMPLE_RATE,
    language,
    load_voice,
    model_path,
    style,
    voices,
)
from .phonemes import PAD, inference_budget, phonemize, tokenize
from .timing import level, tail
from .words import PhonemeTimeline

if TYPE_CHECKING:
    from .mlx_model import Kokoro

log = logging.getLogger(__name__)


class MlxKokoroEngine:
    """Kokoro with every shipped voice; ``voice`` is the one used when a request names none."""

    name = "mlx-kokoro"
    concurrent = False  # MLX streams belong to the thread that made them
    sample_rate = SAMPLE_RATE

    def __init__(self, voice: str | None = None, *, cache_dir: Path | None = None) -> None:
        from ..mlx_device import describe_device, keep_compiled_kernels

        keep_compiled_kernels(cache_dir)
        import mlx.core as mx

        from .mlx_model import Kokoro
        from .mlx_weights import load_weights

        self.voice = voice or DEFAULT_VOICE
        self._packs = {name: load_voice(name) for name in voices()}
        if self.voice not in self._packs:
            load_voice(self.voice)  # raises, naming the voices there are
        device = os.environ.get("VOICEWS_MLX_DEVICE", "").lower()
        if device in ("cpu", "gpu"):
            mx.set_default_device(mx.cpu if device == "cpu" else mx.gpu)
        self.model: Kokoro = Kokoro(load_weights(model_path(), cache_dir))
        self.device = describe_device()
        log.info("mlx-kokoro: %s on %s", self.voice, self.device)

    def synthesize(self, text: str, options: SynthesisOptions) -> Iterator[Audio | WordStarts]:
        import mlx.core as mx

        voice = options.voice or self.voice
        if voice not in self._packs:
            raise ValueError(f"unknown Kokoro voice {voice!r}; choose from {', '.join(voices())}")
        pack, lang = self._packs[voice], language(voice)
        timeline = PhonemeTimeline()
        for phonemes in phonemize(text, lang, inference_budget(options.speed)):
            tokens = tokenize(phonemes)
            row = mx.array(style(pack, len(tokens))[0])
            end = tail(phonemes, options.speed, crop=options.eager or options.lean)
            prosody = self.model.prosody([PAD, *tokens, PAD], row, options.speed, tail=end)
            audio = np.array(self.model.decode(prosody, row), dtype=np.float32)
            audio *= level(prosody.modelled, prosody.durations)
            timeline.add(phonemes, prosody.durations, len(audio))
            yield np.clip(audio, -1.0, 1.0)
        if (words := timeline.words(text, lang)) is not None:
            yield words

    def warm(self) -> float:
        """On a GPU, a sentence through the whole model before serving (``WarmingEngine``):
        a fresh process's first kernels compile (10-14 s for MLX Piper on MLX CUDA), and no
        caller should wait for them. The seconds it took; none on MLX's CPU backend, whose
        kernels are built ahead of time (a sentence there costs seconds, and saves nothing)."""
        if self.device == "cpu":
            return 0.0
        start = time.perf_counter()
        for _ in self.synthesize("Warming up.", SynthesisOptions()):
            pass
        return time.perf_counter() - start
