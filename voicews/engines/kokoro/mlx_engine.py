"""Kokoro-82M on MLX: ``voicews serve --engine mlx-kokoro [--voice af_heart]``.

The same model, voices and phonemes as the onnxruntime engine (:mod:`.engine`): the weights
are converted once from the int8 ONNX export (:mod:`.mlx_weights`) and run in float32 by
:mod:`.mlx_model`, on Apple's GPU where MLX has one. Construct it on the thread that will call
``synthesize`` (the compute worker does): MLX streams belong to the thread that made them.
Nothing here touches MLX at import time.

Sessions' sentences are decoded together (``WindowedEngine``): a sentence is announced
(``Begin``), its prosody made, and its whole decoder input handed to the compute worker as
one window, which it stacks with other sessions' in one decoder step (``Decoder.batch``,
padded and masked, each utterance's audio its own to float rounding).

- ``VOICEWS_MLX_DEVICE``: ``cpu`` or ``gpu`` to override MLX's default device.
- ``VOICEWS_MLX_MAX_BATCH``, ``VOICEWS_MLX_BATCH_WAIT_MS``: as for ``mlx-piper``; a max batch
  of 1 decodes each sentence alone.
- ``VOICEWS_MLX_DECODE``: ``auto`` batches sessions' sentences where MLX's device is a GPU,
  ``whole`` everywhere (as it does ``mlx-piper``'s windows), anything else nowhere. On MLX's
  CPU backend compute is the cost, not dispatches, and padding adds to it: three sentences
  of 34, 40 and 60 frames decoded together took 53-60 s against 36-37 s one after another,
  their prosody 5.1 s against 2.6 s.
- ``VOICEWS_CACHE_DIR``: where the converted weights are cached (``~/.cache/voicews``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ...audio import Audio
from ..base import Begin, SynthesisOptions, Window, Windows, WordStarts
from ..mlx_piper.engine import MlxConfig
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
from .timing import Tail, level, tail
from .words import PhonemeTimeline

if TYPE_CHECKING:
    from .mlx_model import Kokoro, Prosody

log = logging.getLogger(__name__)

SAMPLES_PER_FRAME = 600
"""Audio the decoder gives a frame (24 kHz: 25 ms)."""


@dataclass(frozen=True, slots=True)
class Sentence:
    """What a sentence's prosody is made from (``Begin.sentence``)."""

    tokens: list[int]
    style: Any  # the voice's (256,) row for its length, an mx.array
    speed: float
    tail: Tail


@dataclass(frozen=True, slots=True)
class Utterance(Window):
    """A sentence's whole decoder input as the worker's window: ``z`` its text features per
    frame (``(frames, 512)``, an ``mx.array`` left on MLX's device, where the base class
    names a host array), with its F0 and energy, its style and the gain its cropped end is
    given back (``timing.level``)."""

    f0: Any = None
    n: Any = None
    style: Any = None
    gain: float = 1.0


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
        config = MlxConfig.from_env()
        device = config.device.lower()
        if device in ("cpu", "gpu"):
            mx.set_default_device(mx.cpu if device == "cpu" else mx.gpu)
        self.model: Kokoro = Kokoro(load_weights(model_path(), cache_dir))
        self.device = describe_device()
        self.max_batch = config.max_batch
        self.batch_wait = config.batch_wait_ms / 1000
        wanted = {"auto": self.device != "cpu", "whole": True}.get(config.decode, False)
        self.batched = wanted and self.max_batch > 1
        """The compute worker begins and decodes sessions' sentences together
        (``WindowedEngine``)."""
        log.info("mlx-kokoro: %s on %s", self.voice, self.device)

    def synthesize(self, text: str, options: SynthesisOptions) -> Iterator[Audio | WordStarts]:
        timeline, lang = PhonemeTimeline(), language(self._voice(options))
        for phonemes, sentence in self._sentences(text, options):
            prosody = self._prosody(sentence)
            audio = np.array(self.model.decode(prosody, sentence.style), dtype=np.float32)
            audio = _at_level(audio, level(prosody.modelled, prosody.durations))
            timeline.add(phonemes, prosody.durations, len(audio))
            yield audio
        if (words := timeline.words(text, lang)) is not None:
            yield words

    def windows_of(self, text: str, options: SynthesisOptions) -> Windows:
        """What ``synthesize`` gives, each sentence announced (``Begin``: the caller sends its
        prosody back, made with others', or None) and its whole decoder input left as one
        window to decode with other sessions' (:meth:`decode_windows`)."""
        timeline, lang = PhonemeTimeline(), language(self._voice(options))
        for phonemes, sentence in self._sentences(text, options):
            made = yield Begin(sentence)
            prosody = cast("Prosody", made) if made is not None else self._prosody(sentence)
            piece = self._utterance(prosody, sentence)
            timeline.add(phonemes, prosody.durations, piece.frames * SAMPLES_PER_FRAME)
            yield piece
        if (words := timeline.words(text, lang)) is not None:
            yield words

    def begin(self, sentences: Sequence[object]) -> list[Prosody]:
        """The prosody of sentences that sessions begin together, in one pass
        (``Kokoro.prosodies``: one LSTM step a token or frame for all of them, each its own
        to float rounding)."""
        if len(sentences) == 1:
            return [self._prosody(cast(Sentence, sentences[0]))]
        return self.model.prosodies(cast(Sequence[Sentence], sentences))

    def window_bucket(self, frames: int) -> int:
        """Sentences decoded together are padded to the longest: within a power of two of
        each other (32 frames at least), padding costs at most what they compute."""
        return max(32, 1 << (frames - 1).bit_length())

    def decode_windows(self, windows: Sequence[Window]) -> list[Audio]:
        """Each sentence's audio, decoded together (:meth:`Decoder.batch`), at its level."""
        import mlx.core as mx

        pieces = cast(Sequence[Utterance], windows)
        decoder = self.model.decoder
        if len(pieces) == 1:
            (p,) = pieces
            audio = [decoder(cast(Any, p.z), p.f0, p.n, p.style)]
        else:
            features = [cast(Any, p.z) for p in pieces]
            style = mx.stack([p.style for p in pieces])
            audio = decoder.batch(features, [p.f0 for p in pieces], [p.n for p in pieces], style)
        mx.eval(*audio)
        return [
            _at_level(np.array(samples, dtype=np.float32), piece.gain)
            for piece, samples in zip(pieces, audio, strict=True)
        ]

    def _voice(self, options: SynthesisOptions) -> str:
        voice = options.voice or self.voice
        if voice not in self._packs:
            raise ValueError(f"unknown Kokoro voice {voice!r}; choose from {', '.join(voices())}")
        return voice

    def _sentences(self, text: str, options: SynthesisOptions) -> Iterator[tuple[str, Sentence]]:
        """Each piece of ``text`` the model speaks at once: its phonemes, and what its
        prosody is made from."""
        import mlx.core as mx

        voice = self._voice(options)
        pack, lang = self._packs[voice], language(voice)
        for phonemes in phonemize(text, lang, inference_budget(options.speed)):
            tokens = tokenize(phonemes)
            row = mx.array(style(pack, len(tokens))[0])
            end = tail(phonemes, options.speed, crop=options.eager or options.lean)
            yield phonemes, Sentence([PAD, *tokens, PAD], row, options.speed, end)

    def _prosody(self, sentence: Sentence) -> Prosody:
        return self.model.prosody(
            sentence.tokens, sentence.style, sentence.speed, tail=sentence.tail
        )

    @staticmethod
    def _utterance(prosody: Prosody, sentence: Sentence) -> Utterance:
        frames = int(prosody.durations.sum())
        gain = level(prosody.modelled, prosody.durations)
        return Utterance(
            cast(Any, prosody.asr), 0, frames, prosody.f0, prosody.n, sentence.style[:128], gain
        )

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
        if self.batched:  # and the padded, masked graphs of sentences begun together
            sentences = [s for _, s in self._sentences("Hi.", SynthesisOptions())] * 2
            made = self.begin(sentences)
            self.decode_windows(
                [self._utterance(p, s) for p, s in zip(made, sentences, strict=True)]
            )
            together = 4  # the compiled LSTM step at every power of two up to a full batch
            while together < 2 * self.max_batch:
                evaluate(self.begin(sentences[:1] * together))
                together *= 2
        return time.perf_counter() - start


def evaluate(made: Sequence[Prosody]) -> None:
    """Compute the lazy decoder inputs of ``made`` now."""
    import mlx.core as mx

    mx.eval(*[x for p in made for x in (p.asr, p.f0, p.n)])


def _at_level(audio: Audio, gain: float) -> Audio:
    """A piece's audio with the loudness its cropped end took given back, within [-1, 1]."""
    out: Audio = np.clip(audio * np.float32(gain), -1.0, 1.0)
    return out
