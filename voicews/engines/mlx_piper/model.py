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

from collections.abc import Sequence
from dataclasses import dataclass

import mlx.core as mx
import numpy as np
import numpy.typing as npt

from .durations import DurationPredictor
from .encoder import TextEncoder
from .flow import Flow
from .generator import Generator
from .layers import default_use_matmul, time_mask
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
        dp_noise = _normal(rng, (len(ids), 2), noise_w)
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
        eps = _normal(rng, m_p.shape, noise_scale)
        z_p = m_p + mx.array(eps) * mx.exp(logs_p)
        return Latents(z_p=z_p, durations=durations)

    def decoder_inputs(
        self,
        sentences: Sequence[list[int]],
        *,
        noise_scale: float,
        length_scales: Sequence[float],
        noise_w: float,
        rngs: Sequence[np.random.Generator],
    ) -> list[tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]]:
        """Each sentence's flow output (the decoder's input, on the host) and frames per
        phoneme id, for sentences that start together: :meth:`latents` then the flow, as for
        each alone (with its own ``rngs``, drawn as it draws them), but in one batch padded to
        the longest and masked as Piper masks one. Two evaluations however many sentences (the
        durations, then the flow), where each alone takes two: a GPU dispatches each operation
        once for all of them."""
        lengths = [len(ids) for ids in sentences]
        padded = np.zeros((len(sentences), max(lengths)), np.int32)
        noise = np.zeros((*padded.shape, 2), np.float32)
        for b, ids in enumerate(sentences):
            padded[b, : len(ids)] = ids
            noise[b, : len(ids)] = _normal(rngs[b], (len(ids), 2), noise_w)
        mask = time_mask(lengths, padded.shape[1])
        x, m, logs = self.encoder(mx.array(padded), lengths)
        logw = self.duration(x, mx.array(noise), mask)
        scales = mx.array(np.asarray(length_scales, np.float32)[:, None])
        w = mx.ceil(mx.exp(logw) * scales)
        mx.eval(w)  # the durations decide every shape after them
        widths = np.array(w).astype(np.int64)  # one copy to the host, not one a sentence
        durations = [widths[b, :n] for b, n in enumerate(lengths)]
        # A sentence of no frames is given one of zero mean and scale, as Piper clamps it:
        # the extra row past every sentence's phonemes.
        frames = [max(int(d.sum()), 1) for d in durations]
        index = np.full((len(sentences), max(frames)), padded.shape[1], np.int32)
        eps = np.zeros((*index.shape, self.channels), np.float32)
        for b, d in enumerate(durations):
            if d.sum() > 0:
                index[b, : frames[b]] = np.repeat(np.arange(lengths[b]), d)
            eps[b, : frames[b]] = _normal(rngs[b], (frames[b], self.channels), noise_scale)
        beyond = mx.zeros((len(sentences), 1, self.channels))
        at = mx.array(index)[..., None]
        m_p = mx.take_along_axis(mx.concatenate([m, beyond], axis=1), at, 1)
        logs_p = mx.take_along_axis(mx.concatenate([logs, beyond], axis=1), at, 1)
        z = self.flow.reverse(m_p + mx.array(eps) * mx.exp(logs_p), time_mask(frames, max(frames)))
        mx.eval(z)
        host = np.array(z, dtype=np.float32)
        return [(host[b, :n], d) for b, (n, d) in enumerate(zip(frames, durations, strict=True))]

    def decode(self, z_p: mx.array) -> mx.array:
        """One-shot: flow in reverse, then HiFi-GAN, over all frames at once."""
        return self.generator(self.flow.reverse(z_p))


def _normal(rng: np.random.Generator, shape: tuple[int, ...], scale: float) -> np.ndarray:
    """Standard normal noise times ``scale``, in float32: one draw for a sentence alone
    (:meth:`PiperVits.latents`) and beside others (:meth:`PiperVits.decoder_inputs`), so both
    give it the same noise."""
    return rng.standard_normal(shape).astype(np.float32) * np.float32(scale)
