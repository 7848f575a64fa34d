"""Piper's VITS inference in MLX: text encoder, stochastic duration predictor, flow, HiFi-GAN.

Everything runs on one utterance at a time in ``(time, channels)`` layout, so Piper's masks
(all ones for a batch of one) disappear. Hyperparameters are not hard-coded: kernel sizes come
from the weights, dilations, paddings and strides from the ONNX nodes that used them, and the
HiFi-GAN's residual block kind from the weight names, so Piper's other qualities (x_low, low,
high) should load as well; the bundled medium voice is the one tested. Plain classes rather
than ``mlx.nn.Module``: the weights never train, and the code type-checks where MLX is absent.

Convolutions run as one matmul per kernel tap by default on the CPU: MLX's CPU ``conv1d`` and
``conv_transpose1d`` are several times slower there (see ``python -m bench mlx_chunked``). The
transposed convolutions always run polyphase (one stride-1 convolution whose outputs are
interleaved), which gives the same result without multiplying stuffed zeros.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import numpy as np
import numpy.typing as npt

from .durations import DurationPredictor
from .encoder import TextEncoder
from .flow import Flow
from .generator import Generator
from .layers import default_use_matmul
from .weights import VoiceWeights


@dataclass(frozen=True)
class Latents:
    """One sentence after the encoder and durations: the prior sample the decoder turns to audio."""

    z_p: mx.array  # (frames, channels)
    durations: npt.NDArray[np.int64]  # frames per phoneme id


class PiperVits:
    """A whole Piper voice: ``latents`` (encoder + durations) then ``decode`` (flow + HiFi-GAN)."""

    def __init__(self, weights: VoiceWeights, *, matmul: bool | None = None) -> None:
        matmul = default_use_matmul() if matmul is None else matmul
        self.weights = weights
        self.matmul = matmul
        self.encoder = TextEncoder(weights, matmul)
        self.duration = DurationPredictor(weights, matmul)
        self.flow = Flow(weights, matmul)
        self.generator = Generator(weights, matmul)
        self.hop = self.generator.hop
        self.channels = self.encoder.out_channels

    def latents(
        self,
        ids: list[int],
        *,
        noise_scale: float,
        length_scale: float,
        noise_w: float,
        rng: np.random.Generator | None = None,
    ) -> Latents:
        """Encoder, stochastic durations, and the prior sample, as Piper's ``infer`` does."""
        rng = rng or np.random.default_rng()
        x, m, logs = self.encoder(mx.array(ids, dtype=mx.int32))
        dp_noise = rng.standard_normal((len(ids), 2)).astype(np.float32) * np.float32(noise_w)
        logw = self.duration(x, mx.array(dp_noise))
        w = mx.ceil(mx.exp(logw) * length_scale)
        mx.eval(w)  # the one host round trip: the durations decide every shape after them
        durations = np.array(w).astype(np.int64)
        frames = int(durations.sum())
        if frames == 0:  # Piper clamps to one frame, which its path leaves at zero
            m_p, logs_p = mx.zeros((1, self.channels)), mx.zeros((1, self.channels))
        else:
            index = mx.array(np.repeat(np.arange(len(ids)), durations).astype(np.int32))
            m_p, logs_p = m[index], logs[index]
        eps = rng.standard_normal(m_p.shape).astype(np.float32) * np.float32(noise_scale)
        z_p = m_p + mx.array(eps) * mx.exp(logs_p)
        return Latents(z_p=z_p, durations=durations)

    def decode(self, z_p: mx.array) -> mx.array:
        """One-shot: flow in reverse, then HiFi-GAN, over all frames at once."""
        return self.generator(self.flow.reverse(z_p))
