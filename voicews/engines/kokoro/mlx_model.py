"""Kokoro-82M's inference in MLX, as the int8 ONNX export computes it.

Kokoro is StyleTTS 2 with an ALBERT text model and an iSTFTNet decoder: phonemes -> ALBERT ->
durations (LSTMs) -> F0 and energy curves per frame -> a HiFi-GAN-like generator whose output
is a 20-point spectrum, inverted by an STFT. By component: :mod:`.mlx_text` (ALBERT, the text
encoder), :mod:`.mlx_prosody` (durations, F0, energy), :mod:`.mlx_decoder` (the generator, its
harmonic source and inverse STFT), over the blocks of :mod:`.mlx_layers`.

One utterance at a time, in ``(time, channels)`` layout (a batch of one needs no masks), with
plain classes built from the converted weights, like :mod:`voicews.engines.mlx_piper.model`,
whose matmul-per-tap convolutions (much faster than MLX's CPU ``conv1d``) are reused here.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import numpy as np
import numpy.typing as npt

from ..mlx_piper.layers import default_use_matmul
from .assets import LEAD_FRAMES
from .mlx_decoder import Decoder
from .mlx_layers import Weights
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
        durations = np.array(self.predictor.durations(features) / speed)
        frames = np.maximum(np.round(durations), 1).astype(np.int64)
        index = mx.array(np.repeat(np.arange(len(tokens)), frames).astype(np.int32))
        f0, n = self.predictor.f0_n(features[index], style[128:])
        drop = 0 if lead_frames is None else max(0, int(frames[0]) - lead_frames)
        frames[0] -= drop
        kept = frames if tail is None else rendered(frames, tail)
        stop = drop + int(kept.sum())
        return Prosody(
            durations=kept,
            modelled=frames,
            asr=encoded[index[drop:stop]],
            f0=f0[2 * drop : 2 * stop],
            n=n[2 * drop : 2 * stop],
        )

    def decode(self, prosody: Prosody, style: mx.array) -> mx.array:
        """The utterance's audio, 600 samples per frame (a lazy array: evaluate it)."""
        return self.decoder(prosody.asr, prosody.f0, prosody.n, style[:128])
