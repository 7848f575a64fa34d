"""Kokoro-82M on onnxruntime (CPU): ``voicews serve --engine kokoro [--voice af_heart]``.

One inference per sentence, or per piece of a long one (:data:`.phonemes.MAX_PHONEMES`); the
model renders its input whole, so a segment's audio starts after its first piece. Frames per
token come from the graph (:mod:`.timing`, which also crops the leading pad's silence before the
decoder, and the silence after each piece's last sound where the options ask for speed): each
frame is 600 samples, so the words are placed on them as for Piper. The exported
graph has no random ops (its noise is fixed): the same text, voice and speed give the same
audio. The graph run is the shipped one with its decoder's convolutions (most of its compute)
quantized statically (:mod:`.graphs`): 0.5-0.8 of the compute per second of audio, the same
words heard.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ...audio import Audio
from ..base import SynthesisOptions, WordStarts
from ..ort import describe_session, lane_session
from .assets import (
    DEFAULT_VOICE,
    LEAD_FRAMES,
    SAMPLE_RATE,
    language,
    load_voice,
    model_path,
    style,
    voices,
)
from .graphs import static_graph
from .phonemes import PAD, inference_budget, phonemize, tokenize
from .timing import LAST, TAIL, level, rendered, tail, timed_graph
from .words import PhonemeTimeline

log = logging.getLogger(__name__)


class KokoroEngine:
    """Kokoro with every shipped voice loaded (a few hundred KB each); ``voice`` is the one
    used when a request names none. The worker's lanes share its one onnxruntime session
    (``voicews.engines.ort.lane_session``)."""

    name = "kokoro"
    concurrent = True  # one onnxruntime session runs the lanes' inferences; espeak-ng is locked
    sample_rate = SAMPLE_RATE

    def __init__(
        self,
        voice: str | None = None,
        graph: Path | None = None,
        lead_frames: int | None = LEAD_FRAMES,
    ) -> None:
        """``graph``: the ONNX graph to run; by default the shipped one with its decoder
        quantized statically (:func:`.graphs.static_graph`, made at first use).
        ``lead_frames``: the leading pad's cap (:data:`.assets.LEAD_FRAMES`; None: the
        model's own)."""
        self.voice = voice or DEFAULT_VOICE
        self._packs = {name: load_voice(name) for name in voices()}
        if self.voice not in self._packs:
            load_voice(self.voice)  # raises, naming the voices there are
        graph = graph or static_graph(model_path())
        self._session = lane_session(timed_graph(graph, lead_frames))
        self.device = describe_session(self._session)

    def sounding(self, options: SynthesisOptions) -> SynthesisOptions:
        """The voice, the speed and whether the silence after the last sound is cropped (a
        first segment's, or any while listeners wait): the look-ahead word and the windows
        change nothing here."""
        crop = options.eager or options.lean
        return SynthesisOptions(speed=options.speed, voice=options.voice or self.voice, lean=crop)

    def synthesize(self, text: str, options: SynthesisOptions) -> Iterator[Audio | WordStarts]:
        voice = options.voice or self.voice
        if voice not in self._packs:
            raise ValueError(f"unknown Kokoro voice {voice!r}; choose from {', '.join(voices())}")
        pack, lang = self._packs[voice], language(voice)
        speed = np.array([options.speed], dtype=np.float32)
        timeline = PhonemeTimeline()
        for phonemes in phonemize(text, lang, inference_budget(options.speed)):
            tokens = tokenize(phonemes)
            end = tail(phonemes, options.speed, crop=options.eager or options.lean)
            audio, frames = self._session.run(
                None,
                {
                    "tokens": np.array([[PAD, *tokens, PAD]], dtype=np.int64),
                    "style": style(pack, len(tokens)),
                    "speed": speed,
                    LAST: np.array([end.last], dtype=np.int64),
                    TAIL: np.array([end.frames], dtype=np.int64),
                },
            )
            kept = rendered(frames, end)
            audio = np.asarray(audio, dtype=np.float32).ravel() * level(frames, kept)
            timeline.add(phonemes, kept, len(audio))
            yield np.clip(audio, -1.0, 1.0)
        if (words := timeline.words(text, lang)) is not None:
            yield words
