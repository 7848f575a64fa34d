"""Kokoro's text side in MLX: the phoneme-level ALBERT (what prosody is predicted from) and
the text encoder (the decoder's per-phoneme input)."""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np

from ..mlx_piper.layers import leaky_relu
from .mlx_layers import BiLSTM, Linear, Weights, layer_norm, same_conv

_GELU_C = math.sqrt(2.0 / math.pi)
_GELU_SCALE = (2.0 * _GELU_C * 0.044715) ** (1.0 / 3.0)
"""``s`` of ``gelu_scaled``: the cube root of the cubic term's factor in ``2u``."""


def gelu_scaled(t: mx.array) -> mx.array:
    """``s gelu(t / s)`` of ALBERT's ``gelu_new`` (ONNX Runtime's ``FastGelu``):
    ``0.5 x (1 + tanh(u))`` with ``u = c (x + 0.044715 x^3)`` is ``x sigmoid(2u)``, and of
    ``t = s x`` ``2u`` is ``t (2c / s + t^2)``: the ``s`` and ``1 / s`` are folded into the
    linears around it, one constant (a product and its broadcast) less."""
    return t * mx.sigmoid(t * ((2.0 * _GELU_C / _GELU_SCALE) + t * t))


class Albert:
    """The phoneme-level BERT: 12 calls of one shared transformer layer."""

    def __init__(self, w: Weights, layers: int = 12, heads: int = 12) -> None:
        p = "bert.embeddings"
        self.word, self.position = (
            w[f"{p}.word_embeddings.weight"],
            w[f"{p}.position_embeddings.weight"],
        )
        self.token_type = w[f"{p}.token_type_embeddings.weight"][0]
        self.emb_norm = (w[f"{p}.LayerNorm.weight"], w[f"{p}.LayerNorm.bias"])
        self.mapping = Linear(w, "bert.encoder.embedding_hidden_mapping_in")
        q = "bert.encoder.albert_layer_groups.0.albert_layers.0"
        # Query, key and value in one matmul, the attention's 1 / sqrt(head size) folded into
        # the query's weights (a power of two for Kokoro's 64: exact).
        head_dim = int(w[f"{q}.attention.query.weight"].shape[0]) // heads
        scales = {"query": 1.0 / math.sqrt(head_dim), "key": 1.0, "value": 1.0}
        self.qkv = Linear(
            {
                f"qkv.{part}": mx.concatenate(
                    [w[f"{q}.attention.{n}.{part}"] * scale for n, scale in scales.items()]
                )
                for part in ("weight", "bias")
            },
            "qkv",
        )
        self.dense = Linear(w, f"{q}.attention.dense")
        self.attn_norm = (w[f"{q}.attention.LayerNorm.weight"], w[f"{q}.attention.LayerNorm.bias"])
        # The FFN's output times s, the next linear's input divided by it (``gelu_scaled``).
        self.ffn = Linear(
            {f"f.{k}": w[f"{q}.ffn.{k}"] * _GELU_SCALE for k in ("weight", "bias")}, "f"
        )
        self.ffn_output = Linear(
            {
                "o.weight": w[f"{q}.ffn_output.weight"] / _GELU_SCALE,
                "o.bias": w[f"{q}.ffn_output.bias"],
            },
            "o",
        )
        self.out_norm = (
            w[f"{q}.full_layer_layer_norm.weight"],
            w[f"{q}.full_layer_layer_norm.bias"],
        )
        self.layers, self.heads = layers, heads

    def embed(self, ids: mx.array) -> mx.array:
        x = self.word[ids] + self.token_type + self.position[: ids.shape[-1]]
        return self.mapping(layer_norm(x, *self.emb_norm, 1e-12))

    def layer(self, x: mx.array, padding: mx.array | None = None) -> mx.array:
        """One call of the shared layer on ``(T, C)``, or on a padded batch ``(utterances, T,
        C)`` whose ``padding`` (``(utterances, 1, 1, T)``: minus infinity past each one's
        tokens) keeps every utterance's attention on its own tokens."""
        *lead, length, channels = x.shape
        n, head_dim = len(lead), channels // self.heads
        qkv = self.qkv(x).reshape(*lead, length, 3, self.heads, head_dim)
        qkv = qkv.transpose(n + 1, *range(n), n + 2, n, n + 3)
        q, k, v = mx.split(qkv, 3)  # (1, *lead, heads, T, head_dim) each
        scores = q @ k.swapaxes(-1, -2)
        p = mx.softmax(scores if padding is None else scores + padding, axis=-1)
        context = (p @ v).transpose(*range(1, n + 1), n + 2, 0, n + 1, n + 3)
        x = layer_norm(x + self.dense(context.reshape(*lead, length, -1)), *self.attn_norm, 1e-12)
        return layer_norm(x + self.ffn_output(gelu_scaled(self.ffn(x))), *self.out_norm, 1e-12)

    def __call__(self, ids: mx.array, lengths: list[int] | None = None) -> mx.array:
        """``ids`` ``(T,)``, or ``(utterances, T)`` padded past ``lengths``."""
        padding = None
        if lengths is not None:
            past = np.arange(ids.shape[-1])[None, :] >= np.asarray(lengths)[:, None]
            padding = mx.array(np.where(past, -np.inf, 0.0).astype(np.float32)[:, None, None])
        x = self.embed(ids)
        for _ in range(self.layers):
            x = self.layer(x, padding)
        return x


class TextEncoder:
    """Phoneme embeddings -> 3 conv/LayerNorm/LeakyReLU layers -> BiLSTM: the decoder's input."""

    def __init__(self, w: Weights, matmul: bool) -> None:
        self.embedding = w["text_encoder.embedding.weight"]
        n = sum(1 for k in w if k.startswith("text_encoder.cnn.") and k.endswith(".0.weight"))
        self.convs = [same_conv(w, f"text_encoder.cnn.{i}.0", matmul) for i in range(n)]
        self.norms = [
            (w[f"text_encoder.cnn.{i}.1.gamma"], w[f"text_encoder.cnn.{i}.1.beta"])
            for i in range(n)
        ]
        self.lstm = BiLSTM(w, "text_encoder.lstm")

    def lstm_input(self, ids: mx.array, mask: mx.array | None = None) -> mx.array:
        """What the BiLSTM reads ``(T, 512)``: run apart where the LSTM runs with another.
        The convolutions run batched ``(1, T, C)``: MLX's take that layout as is. Or a padded
        batch: ``ids`` ``(utterances, T)``, ``mask`` ``(utterances, T, 1)`` one on each one's
        tokens, zero past them (what a convolution reads there, as alone)."""
        x = self.embedding[ids] if mask is not None else self.embedding[ids][None]
        for conv, norm in zip(self.convs, self.norms, strict=True):
            x = leaky_relu(layer_norm(conv(x if mask is None else x * mask), *norm, 1e-5), 0.2)
        return x if mask is not None else x.reshape(x.shape[1:])

    def __call__(self, ids: mx.array) -> mx.array:
        return self.lstm(self.lstm_input(ids))
