"""The text encoder: phoneme embeddings through relative-position attention layers."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from .layers import (
    Conv,
    conv_from,
    count_modules,
    layer_norm,
    layer_norm_params,
    masked,
    time_mask,
)
from .weights import VoiceWeights


@dataclass(frozen=True)
class _AttentionLayer:
    q: Conv
    """Scaled by ``1 / sqrt(head_channels)``, as attention scales its queries."""
    k: Conv
    v: Conv
    o: Conv
    rel_k: mx.array  # (head_channels, 2 * window + 1): transposed once, for the queries
    rel_v: mx.array  # (2 * window + 1, head_channels)
    norm_1: tuple[mx.array, mx.array]
    ffn_1: Conv
    ffn_2: Conv
    norm_2: tuple[mx.array, mx.array]


class TextEncoder:
    """Phoneme ids -> hidden states and the prior's mean and log-scale per phoneme."""

    def __init__(self, w: VoiceWeights, matmul: bool) -> None:
        p = "enc_p.encoder"
        self.hidden = int(w["enc_p.emb.weight"].shape[1])
        # Constant factors folded into the weights once: each would be an operation a call.
        self.embedding = w["enc_p.emb.weight"] * math.sqrt(self.hidden)
        head_channels = int(w[f"{p}.attn_layers.0.emb_rel_k"].shape[2])
        self.layers = [
            _AttentionLayer(
                q=conv_from(w, f"{p}.attn_layers.{i}.conv_q", matmul, scale=head_channels**-0.5),
                k=conv_from(w, f"{p}.attn_layers.{i}.conv_k", matmul),
                v=conv_from(w, f"{p}.attn_layers.{i}.conv_v", matmul),
                o=conv_from(w, f"{p}.attn_layers.{i}.conv_o", matmul),
                rel_k=mx.array(np.ascontiguousarray(w[f"{p}.attn_layers.{i}.emb_rel_k"][0].T)),
                rel_v=w[f"{p}.attn_layers.{i}.emb_rel_v"][0],
                norm_1=layer_norm_params(w, f"{p}.norm_layers_1.{i}"),
                ffn_1=conv_from(w, f"{p}.ffn_layers.{i}.conv_1", matmul, same=True),
                ffn_2=conv_from(w, f"{p}.ffn_layers.{i}.conv_2", matmul, same=True),
                norm_2=layer_norm_params(w, f"{p}.norm_layers_2.{i}"),
            )
            for i in range(count_modules(w, p + ".attn_layers.{}.conv_q.weight"))
        ]
        rel = self.layers[0].rel_v
        self.window = (int(rel.shape[0]) - 1) // 2
        self.head_channels = int(rel.shape[1])
        self.heads = self.hidden // self.head_channels
        self.proj = conv_from(w, "enc_p.proj", matmul)
        self.out_channels = self.proj.out_channels // 2

    def __call__(
        self, ids: mx.array, lengths: Sequence[int] | None = None
    ) -> tuple[mx.array, mx.array, mx.array]:
        """``ids``: ``(T,)`` for one sentence; or ``(B, T)``, sentences padded after their
        ``lengths``, whose outputs within those lengths are each one's alone (to float
        rounding): the padding is masked as Piper masks a batch."""
        x = self.embedding[ids]
        mask = None if lengths is None else time_mask(lengths, int(ids.shape[-1]))
        positions = _Positions.of(int(ids.shape[-1]), self.heads, self.window, lengths)
        for layer in self.layers:
            x = layer_norm(x + self._attention(layer, x, positions), layer.norm_1)
            y = layer.ffn_2(masked(mx.maximum(layer.ffn_1(masked(x, mask)), 0.0), mask))
            x = layer_norm(x + y, layer.norm_2)
        stats = self.proj(x)
        return x, stats[..., : self.out_channels], stats[..., self.out_channels :]

    def _attention(self, layer: _AttentionLayer, x: mx.array, at: _Positions) -> mx.array:
        """Self-attention with relative position keys and values within +-window."""
        *batch, length, _ = x.shape
        heads, dk = self.heads, self.head_channels

        def split(t: mx.array) -> mx.array:
            return t.reshape(*batch, length, heads, dk).swapaxes(-3, -2)

        q, k, v = split(layer.q(x)), split(layer.k(x)), split(layer.v(x))
        rel_logits = q @ layer.rel_k  # (..., heads, T, 2w+1), by offset j - i
        scores = q @ k.swapaxes(-1, -2)
        scores = scores + mx.take_along_axis(rel_logits, at.rel_index, -1) * at.in_window
        if at.padding is not None:
            scores = scores + at.padding
        p = mx.softmax(scores, axis=-1)
        # The attention weight of each relative offset, for the relative value embeddings.
        rel_weights = mx.take_along_axis(p, at.col_index, -1) * at.in_range
        out = p @ v + rel_weights @ layer.rel_v
        return layer.o(out.swapaxes(-3, -2).reshape(*batch, length, heads * dk))


@dataclass(frozen=True)
class _Positions:
    """Where relative attention reads, for ``length`` phonemes (or sentences of ``lengths``
    padded to it): built on the host once per call, so its every layer's indices and masks
    cost no operation."""

    rel_index: mx.array
    """``(heads, T, T)`` (``(1, heads, T, T)`` in a batch): the relative key embedding each
    (query, key) pair reads."""
    in_window: mx.array
    """Shaped as ``rel_index``: 1 where the key is within the window of the query."""
    col_index: mx.array
    """``(heads, T, 2w + 1)`` (``(B, heads, T, 2w + 1)`` in a batch): the key each (query,
    offset) pair is."""
    in_range: mx.array
    """Shaped as ``col_index``: 1 where that key is inside its sentence."""
    padding: mx.array | None
    """``(B, 1, 1, T)``: -1e4 on the keys past each sentence's end (Piper's masked fill: their
    weight is then exactly 0); None for one sentence."""

    @classmethod
    def of(
        cls, length: int, heads: int, window: int, lengths: Sequence[int] | None = None
    ) -> _Positions:
        ends = np.asarray([length] if lengths is None else lengths)[:, None, None]
        offsets = np.arange(length)[None, :] - np.arange(length)[:, None]
        cols = np.arange(length)[:, None] + np.arange(-window, window + 1)[None, :]
        shared = () if lengths is None else (1,)

        def per_head(a: np.ndarray, dtype: type) -> mx.array:
            """``a`` for every head: by sentence, ``(B, T, ...)`` as ``(B, heads, T, ...)``;
            the same for every sentence, ``(T, ...)`` as ``(heads, T, ...)``, or in a batch
            ``(1, heads, T, ...)``, which its gathers and products broadcast."""
            if a.ndim == 3:
                shape, a = (a.shape[0], heads, *a.shape[1:]), a[:, None]
            else:
                shape = (*shared, heads, *a.shape)
            return mx.array(np.ascontiguousarray(np.broadcast_to(a, shape), dtype))

        def per_sentence(a: np.ndarray) -> np.ndarray:
            """``(B, T, ...)`` by sentence; one sentence's ``(T, ...)`` alone."""
            return a[0] if lengths is None else a

        padding = None
        if lengths is not None:
            past = np.arange(length)[None, :] >= np.asarray(lengths)[:, None]
            padding = mx.array((past * np.float32(-1e4))[:, None, None, :].astype(np.float32))
        return cls(
            rel_index=per_head(np.clip(offsets + window, 0, 2 * window), np.int32),
            in_window=per_head(np.abs(offsets) <= window, np.float32),
            col_index=per_head(per_sentence(np.clip(cols, 0, ends - 1)), np.int32),
            in_range=per_head(per_sentence((cols >= 0) & (cols < ends)), np.float32),
            padding=padding,
        )
