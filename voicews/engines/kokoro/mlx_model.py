"""Kokoro-82M's inference in MLX, as the int8 ONNX export computes it.

Kokoro is StyleTTS 2 with an ALBERT text model and an iSTFTNet decoder: phonemes -> ALBERT ->
durations (LSTMs) -> F0 and energy curves per frame -> a HiFi-GAN-like generator whose output
is a 20-point spectrum, inverted by an STFT. By component: :mod:`.mlx_text` (ALBERT, the text
encoder), :mod:`.mlx_prosody` (durations, F0, energy), :mod:`.mlx_decoder` (the generator, its
harmonic source and inverse STFT), over the blocks of :mod:`.mlx_layers`.

One utterance at a time, in ``(time, channels)`` layout (a batch of one needs no masks), or
several padded to the longest and masked (``prosodies``, ``Decoder.batch``: sentences sessions
begin together), with plain classes built from the converted weights, like
:mod:`voicews.engines.mlx_piper.model`, whose matmul-per-tap convolutions (much faster than
MLX's CPU ``conv1d``) are reused here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import mlx.core as mx
import numpy as np
import numpy.typing as npt

from ..mlx_piper.layers import default_use_matmul
from .assets import LEAD_FRAMES
from .mlx_decoder import Decoder
from .mlx_layers import Lengths, Weights
from .mlx_prosody import Predictor
from .mlx_text import Albert, TextEncoder
from .timing import Tail, rendered


@dataclass(frozen=True)
class Prosody:
    """Everything before the decoder, for one utterance."""

    durations: npt.NDArray[np.int64]
    """Frames per token (pads included) the decoder renders, at the requested speed."""
    modelled: npt.NDArray[np.int64]
    """Frames per token as the model gives them (the leading pad cropped, the tail not)."""
    asr: mx.array  # (frames, 512)
    f0: mx.array  # (2 * frames,)
    n: mx.array  # (2 * frames,)


class Sentence(Protocol):
    """What ``Kokoro.prosody`` is given, for ``Kokoro.prosodies``: ``tokens`` with the pad at
    each end, the voice's ``style`` row, ``speed``, and the ``tail`` rendered."""

    @property
    def tokens(self) -> list[int]: ...
    @property
    def style(self) -> Any: ...
    @property
    def speed(self) -> float: ...
    @property
    def tail(self) -> Tail | None: ...


class Kokoro:
    """The whole model: ``prosody`` (ALBERT, durations, F0/N, text encoder) then ``decode``."""

    def __init__(self, weights: Weights, *, matmul: bool | None = None) -> None:
        matmul = default_use_matmul() if matmul is None else matmul
        self.bert = Albert(weights)
        self.predictor = Predictor(weights, matmul)
        self.text_encoder = TextEncoder(weights, matmul)
        self.decoder = Decoder(weights, matmul)

    def prosody(
        self,
        tokens: list[int],
        style: mx.array,
        speed: float = 1.0,
        lead_frames: int | None = LEAD_FRAMES,
        tail: Tail | None = None,
    ) -> Prosody:
        """``tokens`` with the pad (0) at each end, ``style`` the voice's ``(256,)`` row. The
        leading pad is aligned whole and cropped to ``lead_frames`` for the decoder, and the
        end to ``tail`` (None: not), as the ONNX engine crops them (:mod:`.timing`)."""
        ids = mx.array(tokens, dtype=mx.int32)
        # The text encoder's BiLSTM runs with the duration encoder's first (the same length).
        features, encoded = self.predictor.features_alongside(
            self.bert(ids),
            style[128:],
            (self.text_encoder.lstm, self.text_encoder.lstm_input(ids)),
        )
        assert encoded is not None
        frames = _frames(np.array(self.predictor.durations(features)), speed)
        index = np.repeat(np.arange(len(tokens)), frames).astype(np.int32)
        f0, n = self.predictor.f0_n(features[mx.array(index)], style[128:])
        return _cropped(frames, index, encoded, f0, n, lead_frames, tail)

    def prosodies(self, sentences: Sequence[Sentence]) -> list[Prosody]:
        """``prosody`` of several sentences in one pass (a GPU's: one dispatch of each
        operation, and one LSTM step a token or frame, for all of them), padded to the
        longest: each one's attention, LSTMs, norms and convolutions see its own tokens and
        frames only, so it gets its own prosody to float rounding."""
        tokens = [s.tokens for s in sentences]
        lengths = [len(t) for t in tokens]
        width = max(lengths)
        ids = mx.array(np.array([[*t, *[0] * (width - len(t))] for t in tokens], np.int32))
        mask = Lengths(lengths).mask(width)[0]  # (sentences, width, 1): one on their tokens
        styles = mx.stack([s.style[128:] for s in sentences])
        features, encoded = self.predictor.features_alongside(
            self.bert(ids, lengths),
            styles,
            (self.text_encoder.lstm, self.text_encoder.lstm_input(ids, mask)),
            lengths,
        )
        assert encoded is not None
        durations = np.array(self.predictor.durations(features, lengths))
        frames = [
            _frames(row[:length], s.speed)
            for row, length, s in zip(durations, lengths, sentences, strict=True)
        ]
        spans = Lengths([int(f.sum()) for f in frames])
        # Each utterance's tokens repeated to its frames, in the flattened batch; the padding
        # repeats its first row (what it holds is masked out wherever it would be read).
        counts = spans.frames.tolist()
        index = np.zeros((len(frames), spans.padded), np.int32)
        for i, (f, count) in enumerate(zip(frames, counts, strict=True)):
            index[i, :count] = np.repeat(np.arange(len(f)), f) + i * width
        f0, n = self.predictor.f0_n(
            features.reshape(-1, features.shape[-1])[mx.array(index)], styles, spans
        )
        flat = encoded.reshape(-1, encoded.shape[-1])
        return [
            _cropped(f, index[i, :c], flat, f0[i, : 2 * c], n[i, : 2 * c], LEAD_FRAMES, s.tail)
            for i, (f, c, s) in enumerate(zip(frames, counts, sentences, strict=True))
        ]

    def decode(self, prosody: Prosody, style: mx.array) -> mx.array:
        """The utterance's audio, 600 samples per frame (a lazy array: evaluate it)."""
        return self.decoder(prosody.asr, prosody.f0, prosody.n, style[:128])


def _frames(durations: npt.NDArray[np.float32], speed: float) -> npt.NDArray[np.int64]:
    """Frames per token from the model's durations at speed 1: at least one each."""
    return np.maximum(np.round(durations / speed), 1).astype(np.int64)


def _cropped(
    frames: npt.NDArray[np.int64],
    index: npt.NDArray[np.int32],
    encoded: mx.array,
    f0: mx.array,
    n: mx.array,
    lead_frames: int | None,
    tail: Tail | None,
) -> Prosody:
    """The decoder's inputs of an utterance whose tokens last ``frames`` (``index``: each
    frame's token), its leading pad cropped to ``lead_frames`` and its end to ``tail``."""
    drop = 0 if lead_frames is None else max(0, int(frames[0]) - lead_frames)
    modelled = frames.copy()
    modelled[0] -= drop
    kept = modelled if tail is None else rendered(modelled, tail)
    stop = drop + int(kept.sum())
    return Prosody(
        durations=kept,
        modelled=modelled,
        asr=encoded[mx.array(index[drop:stop])],
        f0=f0[2 * drop : 2 * stop],
        n=n[2 * drop : 2 * stop],
    )
