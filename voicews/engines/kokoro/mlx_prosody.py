"""Kokoro's prosody predictor in MLX: durations per phoneme, then F0 and energy per half
frame, all conditioned on the voice's style vector."""

from __future__ import annotations

import mlx.core as mx

from .mlx_layers import (
    AdainResBlock,
    AdaLayerNorm,
    BiLSTM,
    Lengths,
    Linear,
    StyleBank,
    Weights,
    grouped_same_conv,
    run_bilstms,
)


class Predictor:
    """Durations per phoneme, then F0 and energy (N) per half frame."""

    def __init__(self, w: Weights, matmul: bool) -> None:
        self.bert_encoder = Linear(w, "bert_encoder")
        p = "predictor"
        self.lstms = [BiLSTM(w, f"{p}.text_encoder.lstms.{i}") for i in (0, 2, 4)]
        self.duration_styles, self.prosody_styles = StyleBank(), StyleBank()
        self.norms = [
            AdaLayerNorm(w, f"{p}.text_encoder.lstms.{i}", self.duration_styles) for i in (1, 3, 5)
        ]
        self.lstm = BiLSTM(w, f"{p}.lstm")
        self.duration_proj = Linear(w, f"{p}.duration_proj.linear_layer")
        self.shared = BiLSTM(w, f"{p}.shared")
        # F0's and energy's branches (the same blocks on the same input) as one: each block
        # on the channels of both, F0's first (grouped convolutions, one instance norm). The
        # second doubles the frame rate.
        self.f0_n_blocks = [
            AdainResBlock(w, [f"{p}.F0.{i}", f"{p}.N.{i}"], matmul, self.prosody_styles, group)
            for i, group in enumerate(("frames", "frames", "frames x2"))
        ]
        self.f0_n_proj = grouped_same_conv(w, [f"{p}.F0_proj", f"{p}.N_proj"], matmul)

    def features(self, bert: mx.array, style: mx.array) -> mx.array:
        """The duration encoder's output ``(T, 512 + 128)``: what frames are expanded from."""
        return self.features_alongside(bert, style)[0]

    def features_alongside(
        self,
        bert: mx.array,
        style: mx.array,
        other: tuple[BiLSTM, mx.array] | None = None,
        lengths: list[int] | None = None,
    ) -> tuple[mx.array, mx.array | None]:
        """``features``, and ``other``'s BiLSTM over its input (of the same length, as the
        text encoder's is) where given: it runs with the first LSTM here, which does not
        depend on it, one batched step for both (half the LSTM steps). With ``lengths``, a
        padded batch of utterances: ``(utterances, T, C)``, ``style`` one row each."""
        x = self.bert_encoder(bert)
        rows = style if lengths is None else style[:, None]
        s = mx.broadcast_to(rows, (*x.shape[:-1], style.shape[-1]))
        styles = self.duration_styles(style)
        together = None
        for i, (lstm, norm) in enumerate(zip(self.lstms, self.norms, strict=True)):
            x = mx.concatenate([x, s], axis=-1)
            if i == 0 and other is not None:
                x, together = run_bilstms([lstm, other[0]], [x, other[1]], lengths)
            else:
                x = lstm(x, lengths)
            x = norm(x, styles)
        return mx.concatenate([x, s], axis=-1), together

    def durations(self, features: mx.array, lengths: list[int] | None = None) -> mx.array:
        """Frames per phoneme before rounding (at speed 1)."""
        return mx.sigmoid(self.duration_proj(self.lstm(features, lengths))).sum(axis=-1)

    def f0_n(
        self, frames: mx.array, style: mx.array, lengths: Lengths | None = None
    ) -> tuple[mx.array, mx.array]:
        """F0 (Hz) and energy, two values per frame, from the features expanded to frames
        (the blocks batched, ``(1, T, C)``: MLX's convolutions take that layout as is). With
        ``lengths``, a padded batch ``(utterances, frames, C)``, ``style`` one row each: each
        utterance's values are its own to float rounding (norms over its own frames,
        convolutions' inputs zero past them), whatever its padding holds."""
        x = self.shared(frames, None if lengths is None else lengths.frames.tolist())
        x, styles = mx.concatenate([x, x], axis=-1), self.prosody_styles(style)
        if lengths is None:
            x = x[None]
        styles.lengths = lengths
        for block in self.f0_n_blocks:
            x = block(x, styles)
        f0_n = self.f0_n_proj(styles.masked(x))  # (utterances, 2 * frames, 2)
        if lengths is None:
            return f0_n[0, :, 0], f0_n[0, :, 1]
        return f0_n[..., 0], f0_n[..., 1]
