"""Kokoro-82M on onnxruntime (CPU): ``voicews serve --engine kokoro [--voice af_heart]``.

One inference per sentence, or per piece of a long one (:data:`.phonemes.MAX_PHONEMES`): the
text side once, then the decoder, whole or, for a piece of 3 s or more while the worker is calm,
in two windows whose first gives its audio while the second is decoded (:mod:`.windows`). Frames per
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
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...audio import Audio
from ..base import SynthesisOptions, WordStarts
from ..ort import describe_session, lane_session
from .assets import (
    DEFAULT_VOICE,
    LEAD_FRAMES,
    SAMPLE_RATE,
    SAMPLES_PER_FRAME,
    language,
    load_voice,
    model_path,
    style,
    voices,
)
from .graphs import static_graph
from .phonemes import PAD, inference_budget, phonemize, tokenize
from .timing import ASR, ENERGY, LAST, PITCH, TAIL, halves, level, rendered, tail, timed_graph
from .windows import FADE, cut, joined, spans
from .words import PhonemeTimeline

GAP = tokenize(" ")[0]
"""The token between words: where a long piece's windows meet (:mod:`.windows`)."""

log = logging.getLogger(__name__)


class KokoroEngine:
    """Kokoro with every shipped voice loaded (a few hundred KB each); ``voice`` is the one
    used when a request names none. The worker's lanes share its two onnxruntime sessions, the
    text side and the decoder (``voicews.engines.ort.lane_session``)."""

    name = "kokoro"
    concurrent = True  # the lanes share its onnxruntime sessions; espeak-ng is locked
    sample_rate = SAMPLE_RATE

    def __init__(
        self,
        voice: str | None = None,
        graph: Path | None = None,
        lead_frames: int | None = LEAD_FRAMES,
        windowed: bool = True,
    ) -> None:
        """``graph``: the ONNX graph to run; by default the shipped one with its decoder
        quantized statically (:func:`.graphs.static_graph`, made at first use).
        ``lead_frames``: the leading pad's cap (:data:`.assets.LEAD_FRAMES`; None: the
        model's own). ``windowed``: a long piece's decoder runs in two windows (:mod:`.windows`;
        False: whole, as benches compare)."""
        self.voice = voice or DEFAULT_VOICE
        self._windowed = windowed
        self._packs = {name: load_voice(name) for name in voices()}
        if self.voice not in self._packs:
            load_voice(self.voice)  # raises, naming the voices there are
        graph = graph or static_graph(model_path())
        prosody, decoder = halves(timed_graph(graph, lead_frames))
        self._prosody, self._decoder = lane_session(prosody), lane_session(decoder)
        self.device = describe_session(self._decoder)

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
            tokens = [PAD, *tokenize(phonemes), PAD]
            end = tail(phonemes, options.speed, crop=options.eager or options.lean)
            voiced = style(pack, len(tokens) - 2)
            feeds = {
                "tokens": np.array([tokens], dtype=np.int64),
                "style": voiced,
                "speed": speed,
                LAST: np.array([end.last], dtype=np.int64),
                TAIL: np.array([end.frames], dtype=np.int64),
            }
            aligned, pitch, energy, frames = self._prosody.run(None, feeds)
            kept = rendered(frames, end)
            piece = _Piece(aligned, pitch, energy, voiced, level(frames, kept))
            # A busy worker's pieces are decoded whole: windows let the planner cut longer
            # segments, which then hold a lane longer (``docs/engines.md``).
            at = cut(kept, tokens, GAP) if self._windowed and not options.lean else None
            if at is None:
                yield np.clip(self._decode(piece, 0, piece.frames), -1.0, 1.0)
            else:  # the first window's audio goes while the second is decoded
                (_, first_stop), (second_start, _) = spans(piece.frames, at)
                first = self._decode(piece, 0, first_stop)
                yield np.clip(first[: at * SAMPLES_PER_FRAME - FADE], -1.0, 1.0)
                second = self._decode(piece, second_start, piece.frames)
                yield np.clip(joined(first, second, at, second_start), -1.0, 1.0)
            timeline.add(phonemes, kept, piece.frames * SAMPLES_PER_FRAME)
        if (words := timeline.words(text, lang)) is not None:
            yield words

    def _decode(self, piece: _Piece, start: int, stop: int) -> np.ndarray:
        """The decoder over ``piece``'s frames ``start`` to ``stop``, at the piece's level."""
        (audio,) = self._decoder.run(
            None,
            {
                ASR: piece.aligned[:, :, start:stop],
                PITCH: piece.pitch[:, 2 * start : 2 * stop],
                ENERGY: piece.energy[:, 2 * start : 2 * stop],
                "style": piece.style,
            },
        )
        return np.asarray(audio, dtype=np.float32).ravel() * piece.gain


@dataclass(frozen=True, slots=True)
class _Piece:
    """What the decoder renders a piece from (the text side's outputs: two values of pitch and
    energy a frame), and the gain that gives it its whole loudness (``timing.level``)."""

    aligned: np.ndarray
    pitch: np.ndarray
    energy: np.ndarray
    style: np.ndarray
    gain: float

    @property
    def frames(self) -> int:
        return int(self.aligned.shape[2])
