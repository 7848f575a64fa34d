"""Kokoro's text side in MLX: the phoneme-level ALBERT (what prosody is predicted from) and
the text encoder (the decoder's per-phoneme input)."""

from __future__ import annotations

import math

import mlx.core as mx

from ..mlx_piper.layers import leaky_relu
from .mlx_layers import BiLSTM, Linear, Weights, layer_norm, same_conv


def gelu_tanh(x: mx.array) -> mx.array:
    """ALBERT's ``gelu_new`` (ONNX Runtime's ``FastGelu``)."""
    return 0.5 * x * (1.0 + mx.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


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
        self.query, self.key, self.value = (
            Linear(w, f"{q}.attention.{n}") for n in ("query", "key", "value")
        )
        self.dense = Linear(w, f"{q}.attention.dense")
        self.attn_norm = (w[f"{q}.attention.LayerNorm.weight"], w[f"{q}.attention.LayerNorm.bias"])
        self.ffn, self.ffn_output = Linear(w, f"{q}.ffn"), Linear(w, f"{q}.ffn_output")
        self.out_norm = (
            w[f"{q}.full_layer_layer_norm.weight"],
            w[f"{q}.full_layer_layer_norm.bias"],
        )
        self.layers, self.heads = layers, heads

    def embed(self, ids: mx.array) -> mx.array:
        x = self.word[ids] + self.token_type + self.position[: ids.shape[0]]
        return self.mapping(layer_norm(x, *self.emb_norm, 1e-12))

    def layer(self, x: mx.array) -> mx.array:
        """One call of the shared layer (no mask: a batch of one has no padding)."""
        length, head_dim = x.shape[0], x.shape[1] // self.heads

        def split(t: mx.array) -> mx.array:
            return t.reshape(length, self.heads, head_dim).transpose(1, 0, 2)

        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        p = mx.softmax((q @ k.transpose(0, 2, 1)) * (1.0 / math.sqrt(head_dim)), axis=-1)
        context = (p @ v).transpose(1, 0, 2).reshape(length, -1)
        x = layer_norm(x + self.dense(context), *self.attn_norm, 1e-12)
        return layer_norm(x + self.ffn_output(gelu_tanh(self.ffn(x))), *self.out_norm, 1e-12)

    def __call__(self, ids: mx.array) -> mx.array:
        x = self.embed(ids)
        for _ in range(self.layers):
            x = self.layer(x)
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

    def __call__(self, ids: mx.array) -> mx.array:
        x = self.embedding[ids]
        for conv, norm in zip(self.convs, self.norms, strict=True):
            x = leaky_relu(layer_norm(conv(x), *norm, 1e-5), 0.2)
        return self.lstm(x)
