"""HiFi-GAN: latents to audio, upsampled through residual blocks."""

from __future__ import annotations

import math
from dataclasses import dataclass

import mlx.core as mx

from .layers import (
    FINAL_LRELU_SLOPE,
    LRELU_SLOPE,
    Conv,
    Upsample,
    conv_from,
    count_modules,
    leaky_relu,
)
from .weights import VoiceWeights


@dataclass(frozen=True)
class ResBlock:
    """HiFi-GAN residual block: stages of (leaky ReLU, conv) chains, each added to its input."""

    stages: list[list[Conv]]

    def __call__(self, x: mx.array) -> mx.array:
        for stage in self.stages:
            y = x
            for conv in stage:
                y = conv(leaky_relu(y, LRELU_SLOPE))
            x = x + y
        return x


class Generator:
    """HiFi-GAN: latent frames -> waveform, ``hop`` samples per frame."""

    def __init__(self, w: VoiceWeights, matmul: bool) -> None:
        self.conv_pre = conv_from(w, "dec.conv_pre", matmul)
        self.ups = []
        for i in range(count_modules(w, "dec.ups.{}.weight")):
            attrs = w.conv(f"dec.ups.{i}")
            self.ups.append(
                Upsample(
                    w[f"dec.ups.{i}.weight"],
                    w[f"dec.ups.{i}.bias"],
                    attrs.stride,
                    attrs.pad_left,
                    matmul=matmul,
                )
            )
        blocks = []
        for b in range(count_modules(w, "dec.resblocks.{}.convs1.0.weight")):
            p = f"dec.resblocks.{b}"
            pairs = count_modules(w, p + ".convs1.{}.weight")
            blocks.append(
                ResBlock(
                    [
                        [
                            conv_from(w, f"{p}.convs1.{j}", matmul),
                            conv_from(w, f"{p}.convs2.{j}", matmul),
                        ]
                        for j in range(pairs)
                    ]
                )
            )
        for b in range(count_modules(w, "dec.resblocks.{}.convs.0.weight")):
            p = f"dec.resblocks.{b}"
            blocks.append(
                ResBlock(
                    [
                        [conv_from(w, f"{p}.convs.{j}", matmul)]
                        for j in range(count_modules(w, p + ".convs.{}.weight"))
                    ]
                )
            )
        per_up = len(blocks) // len(self.ups)
        self.resblocks = [blocks[i * per_up : (i + 1) * per_up] for i in range(len(self.ups))]
        self.conv_post = conv_from(w, "dec.conv_post", matmul)
        self.hop = math.prod(up.stride for up in self.ups)

    def __call__(self, z: mx.array) -> mx.array:
        x = self.conv_pre(z)
        for up, blocks in zip(self.ups, self.resblocks, strict=True):
            x = up(leaky_relu(x, LRELU_SLOPE))
            total = blocks[0](x)
            for block in blocks[1:]:
                total = total + block(x)
            x = total * (1.0 / len(blocks))
        return mx.tanh(self.conv_post(leaky_relu(x, FINAL_LRELU_SLOPE)))[:, 0]
