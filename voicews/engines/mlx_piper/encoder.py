"""The text encoder: phoneme embeddings through relative-position attention layers."""

from __future__ import annotations

import math
from dataclasses import dataclass

import mlx.core as mx

from .layers import Conv, conv_from, count_modules, layer_norm, layer_norm_params
from .weights import VoiceWeights


@dataclass(frozen=True)
class _AttentionLayer:
    q: Conv
    k: Conv
    v: Conv
    o: Conv
    rel_k: mx.array  # (2 * window + 1, head_channels)
    rel_v: mx.array
    norm_1: tuple[mx.array, mx.array]
    ffn_1: Conv
    ffn_2: Conv
    norm_2: tuple[mx.array, mx.array]


class TextEncoder:
    """Phoneme ids -> hidden states and the prior's mean and log-scale per phoneme."""

    def __init__(self, w: VoiceWeights, matmul: bool) -> None:
        p = "enc_p.encoder"
        self.embedding = w["enc_p.emb.weight"]
        self.hidden = int(self.embedding.shape[1])
        self.layers = [
            _AttentionLayer(
                q=conv_from(w, f"{p}.attn_layers.{i}.conv_q", matmul),
                k=conv_from(w, f"{p}.attn_layers.{i}.conv_k", matmul),
                v=conv_from(w, f"{p}.attn_layers.{i}.conv_v", matmul),
                o=conv_from(w, f"{p}.attn_layers.{i}.conv_o", matmul),
                rel_k=w[f"{p}.attn_layers.{i}.emb_rel_k"][0],
                rel_v=w[f"{p}.attn_layers.{i}.emb_rel_v"][0],
                norm_1=layer_norm_params(w, f"{p}.norm_layers_1.{i}"),
                ffn_1=conv_from(w, f"{p}.ffn_layers.{i}.conv_1", matmul, same=True),
                ffn_2=conv_from(w, f"{p}.ffn_layers.{i}.conv_2", matmul, same=True),
                norm_2=layer_norm_params(w, f"{p}.norm_layers_2.{i}"),
            )
            for i in range(count_modules(w, p + ".attn_layers.{}.conv_q.weight"))
        ]
        rel = self.layers[0].rel_k
        self.window = (int(rel.shape[0]) - 1) // 2
        self.head_channels = int(rel.shape[1])
        self.heads = self.hidden // self.head_channels
        self.proj = conv_from(w, "enc_p.proj", matmul)
        self.out_channels = self.proj.out_channels // 2

    def __call__(self, ids: mx.array) -> tuple[mx.array, mx.array, mx.array]:
        x = self.embedding[ids] * math.sqrt(self.hidden)
        offsets = mx.arange(ids.shape[0])[None, :] - mx.arange(ids.shape[0])[:, None]
        for layer in self.layers:
            x = layer_norm(x + self._attention(layer, x, offsets), layer.norm_1)
            y = layer.ffn_2(mx.maximum(layer.ffn_1(x), 0.0))
            x = layer_norm(x + y, layer.norm_2)
        stats = self.proj(x)
        return x, stats[:, : self.out_channels], stats[:, self.out_channels :]

    def _attention(self, layer: _AttentionLayer, x: mx.array, offsets: mx.array) -> mx.array:
        """Self-attention with relative position keys and values within +-window."""
        length, heads, dk, window = x.shape[0], self.heads, self.head_channels, self.window

        def split(t: mx.array) -> mx.array:
            return t.reshape(length, heads, dk).transpose(1, 0, 2)

        q = split(layer.q(x)) * (1.0 / math.sqrt(dk))
        k, v = split(layer.k(x)), split(layer.v(x))
        in_window = mx.abs(offsets) <= window
        rel_logits = q @ layer.rel_k.T  # (heads, T, 2w+1), by offset j - i
        rel_index = mx.broadcast_to(
            mx.clip(offsets + window, 0, 2 * window), (heads, *offsets.shape)
        )
        scores = q @ k.transpose(0, 2, 1)
        scores = scores + mx.where(in_window, mx.take_along_axis(rel_logits, rel_index, 2), 0.0)
        p = mx.softmax(scores, axis=-1)
        # The attention weight of each relative offset, for the relative value embeddings.
        cols = mx.arange(length)[:, None] + mx.arange(2 * window + 1)[None, :] - window
        in_range = (cols >= 0) & (cols < length)
        col_index = mx.broadcast_to(mx.clip(cols, 0, length - 1), (heads, *cols.shape))
        rel_weights = mx.where(in_range, mx.take_along_axis(p, col_index, 2), 0.0)
        out = p @ v + rel_weights @ layer.rel_v
        return layer.o(out.transpose(1, 0, 2).reshape(length, heads * dk))
