"""Kokoro-82M's inference in MLX, as the int8 ONNX export computes it.

Kokoro is StyleTTS 2 with an ALBERT text model and an iSTFTNet decoder: phonemes -> ALBERT ->
durations (LSTMs) -> F0 and energy curves per frame -> a HiFi-GAN-like generator whose output
is a 20-point spectrum, inverted by an STFT. mlx-audio 0.6.2 has the same architecture; this
module follows the ONNX graph instead where the two differ: the export has no random source
(SineGen's initial phases and noise are gone) and inverts its STFT with a transposed
convolution whose window normalisation covers only the first 20 samples.

One utterance at a time, in ``(time, channels)`` layout (a batch of one needs no masks), with
plain classes built from the converted weights, like :mod:`voicews.engines.mlx_piper.model`,
whose matmul-per-tap convolutions (much faster than MLX's CPU ``conv1d``) are reused here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import mlx.core as mx
import numpy as np
import numpy.typing as npt

from ..mlx_piper.model import Conv, Upsample, default_use_matmul, leaky_relu
from .assets import SAMPLE_RATE

Weights = dict[str, mx.array]

_HARMONICS = 9
_SINE_AMP = 0.1
_VOICED_THRESHOLD = 10.0
_N_FFT = 20
_HOP = 5
_UPSAMPLE = 300
"""F0 samples per F0 value: F0 runs at twice the frame rate."""


def _conv(w: Weights, module: str, matmul: bool, *, dilation: int = 1) -> Conv:
    """A stride-1 convolution with 'same' padding (every one of Kokoro's has an odd kernel)."""
    weight = w[f"{module}.weight"]
    pad = dilation * (int(weight.shape[1]) - 1) // 2
    return Conv(
        weight,
        w.get(f"{module}.bias"),
        dilation=dilation,
        pad_left=pad,
        pad_right=pad,
        matmul=matmul,
    )


class StridedConv:
    """A strided convolution as a stride-1 one over blocks of ``stride`` samples: the kernel is
    zero-padded to whole blocks, so nothing is computed for the outputs that are skipped."""

    def __init__(
        self, weight: mx.array, bias: mx.array, stride: int, padding: int, matmul: bool
    ) -> None:
        w = np.asarray(weight)  # (O, K, I)
        out_channels, kernel, in_channels = w.shape
        blocks = -(-kernel // stride)
        padded = np.zeros((out_channels, blocks * stride, in_channels), np.float32)
        padded[:, :kernel] = w
        self._conv = Conv(
            mx.array(padded.reshape(out_channels, blocks, stride * in_channels)),
            bias,
            matmul=matmul,
        )
        self.kernel, self.stride, self.padding = int(kernel), stride, padding
        self.blocks = blocks

    def __call__(self, x: mx.array) -> mx.array:
        length, channels = x.shape
        out = (length + 2 * self.padding - self.kernel) // self.stride + 1
        total = (out + self.blocks - 1) * self.stride
        right = max(total - length - self.padding, 0)
        x = mx.pad(x, [(self.padding, right), (0, 0)])[:total]
        return self._conv.valid(x.reshape(total // self.stride, self.stride * channels))[:out]


def instance_norm(x: mx.array, eps: float = 1e-5) -> mx.array:
    mean = mx.mean(x, axis=0, keepdims=True)
    centered = x - mean
    return centered * mx.rsqrt(mx.mean(centered * centered, axis=0, keepdims=True) + eps)


def layer_norm(x: mx.array, weight: mx.array, bias: mx.array, eps: float) -> mx.array:
    return mx.fast.layer_norm(x, weight, bias, eps)


class Linear:
    """``x @ W.T + b``, with ``W.T`` made contiguous once."""

    def __init__(self, w: Weights, module: str) -> None:
        self.weight_t = mx.array(np.ascontiguousarray(np.asarray(w[f"{module}.weight"]).T))
        self.bias = w.get(f"{module}.bias")

    def __call__(self, x: mx.array) -> mx.array:
        return x @ self.weight_t if self.bias is None else mx.addmm(self.bias, x, self.weight_t)


class AdaIN:
    """Instance norm whose scale and shift come from the style vector."""

    def __init__(self, w: Weights, module: str) -> None:
        self.fc = Linear(w, f"{module}.fc")

    def __call__(self, x: mx.array, style: mx.array) -> mx.array:
        gamma, beta = mx.split(self.fc(style), 2)
        return (1.0 + gamma) * instance_norm(x) + beta


class AdaLayerNorm:
    def __init__(self, w: Weights, module: str) -> None:
        self.fc = Linear(w, f"{module}.fc")

    def __call__(self, x: mx.array, style: mx.array) -> mx.array:
        gamma, beta = mx.split(self.fc(style), 2)
        return (1.0 + gamma) * mx.fast.layer_norm(x, None, None, 1e-5) + beta


class BiLSTM:
    """PyTorch's bidirectional one-layer LSTM; both directions advance in one batched step."""

    def __init__(self, w: Weights, module: str) -> None:
        def both(name: str) -> tuple[mx.array, mx.array]:
            return w[f"{module}.{name}_l0"], w[f"{module}.{name}_l0_reverse"]

        w_ih, b_ih, b_hh, w_hh = (
            both("weight_ih"),
            both("bias_ih"),
            both("bias_hh"),
            both("weight_hh"),
        )
        self.hidden = int(w_hh[0].shape[1])
        # Input projections for both directions in one matmul: (in, 2 * 4H).
        self.w_in = mx.concatenate([w_ih[0].T, w_ih[1].T], axis=1)
        self.b_in = mx.concatenate([b_ih[0] + b_hh[0], b_ih[1] + b_hh[1]])
        self.w_h = mx.stack([w_hh[0].T, w_hh[1].T])  # (2, H, 4H)

    def __call__(self, x: mx.array) -> mx.array:
        length, hidden = x.shape[0], self.hidden
        projected = mx.addmm(self.b_in, x, self.w_in).reshape(length, 2, 4 * hidden)
        h = mx.zeros((2, 1, hidden))
        c = mx.zeros((2, 1, hidden))
        forward, backward = [], []
        for t in range(length):
            step = mx.stack([projected[t, 0], projected[length - 1 - t, 1]])[:, None, :]
            gates = step + h @ self.w_h
            i, f, g, o = mx.split(gates, 4, axis=-1)
            c = mx.sigmoid(f) * c + mx.sigmoid(i) * mx.tanh(g)
            h = mx.sigmoid(o) * mx.tanh(c)
            forward.append(h[0, 0])
            backward.append(h[1, 0])
        return mx.concatenate([mx.stack(forward), mx.stack(backward[::-1])], axis=1)


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
        self.convs = [_conv(w, f"text_encoder.cnn.{i}.0", matmul) for i in range(n)]
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


class DepthwiseUpsample:
    """``ConvTranspose1d(C, C, 3, stride=2, padding=1, output_padding=1, groups=C)``: T -> 2T."""

    def __init__(self, weight: mx.array, bias: mx.array) -> None:
        self.taps = weight[:, :, 0].T  # (3, C)
        self.bias = bias

    def __call__(self, x: mx.array) -> mx.array:
        nxt = mx.pad(x[1:], [(0, 1), (0, 0)])
        even = x * self.taps[1] + self.bias
        odd = x * self.taps[2] + nxt * self.taps[0] + self.bias
        return mx.stack([even, odd], axis=1).reshape(2 * x.shape[0], x.shape[1])


class AdainResBlock:
    """StyleTTS 2's ``AdainResBlk1d``: two AdaIN/LeakyReLU/conv stages beside a shortcut,
    optionally doubling the frame rate (nearest on the shortcut, a transposed conv inside)."""

    def __init__(self, w: Weights, module: str, matmul: bool) -> None:
        self.norm1, self.norm2 = AdaIN(w, f"{module}.norm1"), AdaIN(w, f"{module}.norm2")
        self.conv1, self.conv2 = (
            _conv(w, f"{module}.conv1", matmul),
            _conv(w, f"{module}.conv2", matmul),
        )
        self.shortcut = (
            _conv(w, f"{module}.conv1x1", matmul) if f"{module}.conv1x1.weight" in w else None
        )
        self.pool = (
            DepthwiseUpsample(w[f"{module}.pool.weight"], w[f"{module}.pool.bias"])
            if f"{module}.pool.weight" in w
            else None
        )

    def __call__(self, x: mx.array, style: mx.array) -> mx.array:
        y = leaky_relu(self.norm1(x, style), 0.2)
        if self.pool is not None:
            y = self.pool(y)
            x = mx.repeat(x, 2, axis=0)
        y = self.conv2(leaky_relu(self.norm2(self.conv1(y), style), 0.2))
        if self.shortcut is not None:
            x = self.shortcut(x)
        return (y + x) * (1.0 / math.sqrt(2.0))


class Predictor:
    """Durations per phoneme, then F0 and energy (N) per half frame."""

    def __init__(self, w: Weights, matmul: bool) -> None:
        self.bert_encoder = Linear(w, "bert_encoder")
        p = "predictor"
        self.lstms = [BiLSTM(w, f"{p}.text_encoder.lstms.{i}") for i in (0, 2, 4)]
        self.norms = [AdaLayerNorm(w, f"{p}.text_encoder.lstms.{i}") for i in (1, 3, 5)]
        self.lstm = BiLSTM(w, f"{p}.lstm")
        self.duration_proj = Linear(w, f"{p}.duration_proj.linear_layer")
        self.shared = BiLSTM(w, f"{p}.shared")
        self.f0 = [AdainResBlock(w, f"{p}.F0.{i}", matmul) for i in range(3)]
        self.n = [AdainResBlock(w, f"{p}.N.{i}", matmul) for i in range(3)]
        self.f0_proj = _conv(w, f"{p}.F0_proj", matmul)
        self.n_proj = _conv(w, f"{p}.N_proj", matmul)

    def features(self, bert: mx.array, style: mx.array) -> mx.array:
        """The duration encoder's output ``(T, 512 + 128)``: what frames are expanded from."""
        x = self.bert_encoder(bert)
        s = mx.broadcast_to(style, (x.shape[0], style.shape[0]))
        for lstm, norm in zip(self.lstms, self.norms, strict=True):
            x = norm(lstm(mx.concatenate([x, s], axis=1)), style)
        return mx.concatenate([x, s], axis=1)

    def durations(self, features: mx.array) -> mx.array:
        """Frames per phoneme before rounding (at speed 1)."""
        return mx.sigmoid(self.duration_proj(self.lstm(features))).sum(axis=1)

    def f0_n(self, frames: mx.array, style: mx.array) -> tuple[mx.array, mx.array]:
        """F0 (Hz) and energy, two values per frame, from the features expanded to frames."""
        x = self.shared(frames)
        f0, n = x, x
        for block in self.f0:
            f0 = block(f0, style)
        for block in self.n:
            n = block(n, style)
        return self.f0_proj(f0)[:, 0], self.n_proj(n)[:, 0]


class AdaINResBlock1:
    """The generator's residual block: three AdaIN/Snake/dilated-conv pairs, each residual."""

    def __init__(self, w: Weights, module: str, dilations: tuple[int, ...], matmul: bool) -> None:
        self.stages = [
            (
                AdaIN(w, f"{module}.adain1.{j}"),
                w[f"{module}.alpha1.{j}"].reshape(-1),
                _conv(w, f"{module}.convs1.{j}", matmul, dilation=d),
                AdaIN(w, f"{module}.adain2.{j}"),
                w[f"{module}.alpha2.{j}"].reshape(-1),
                _conv(w, f"{module}.convs2.{j}", matmul),
            )
            for j, d in enumerate(dilations)
        ]

    def __call__(self, x: mx.array, style: mx.array) -> mx.array:
        for norm1, alpha1, conv1, norm2, alpha2, conv2 in self.stages:
            y = conv1(snake(norm1(x, style), alpha1))
            x = x + conv2(snake(norm2(y, style), alpha2))
        return x


def snake(x: mx.array, alpha: mx.array) -> mx.array:
    return x + (1.0 / alpha) * mx.square(mx.sin(alpha * x))


def _resize_linear(x: mx.array, scale: int) -> mx.array:
    """``Resize(mode=linear, half_pixel)`` by an integer factor along time, edges clamped."""
    n = x.shape[0]
    src = np.maximum((np.arange(n * scale) + 0.5) / scale - 0.5, 0.0)
    lo = np.floor(src).astype(np.int32)
    hi = np.minimum(lo + 1, n - 1)
    frac = mx.array((src - lo).astype(np.float32))[:, None]
    return x[mx.array(lo)] * (1.0 - frac) + x[mx.array(hi)] * frac


class HarmonicSource:
    """F0 -> the summed, tanh-squashed harmonics the generator is driven by (no noise: the
    export dropped SineGen's random phases and noise)."""

    def __init__(self, w: Weights) -> None:
        self.linear = Linear(w, "decoder.generator.m_source.l_linear")

    def __call__(self, f0: mx.array) -> mx.array:
        harmonics = f0[:, None] * mx.arange(1, _HARMONICS + 1, dtype=mx.float32)  # per F0 value
        rad = harmonics / SAMPLE_RATE
        rad = rad - mx.floor(rad)
        phase = mx.cumsum(rad, axis=0) * 2.0 * math.pi * _UPSAMPLE  # in the export's order
        sines = mx.sin(_resize_linear(phase, _UPSAMPLE)) * _SINE_AMP
        voiced = mx.repeat(f0 > _VOICED_THRESHOLD, _UPSAMPLE).astype(mx.float32)[:, None]
        return mx.tanh(self.linear(sines * voiced))[:, 0]


class Stft:
    """The export's STFT (reflect-padded, periodic Hann, 20 points, hop 5) as magnitude and
    phase, and its inverse (a transposed convolution and the export's normalisation)."""

    def __init__(self, w: Weights, matmul: bool) -> None:
        n = np.arange(_N_FFT)
        window = 0.5 - 0.5 * np.cos(2.0 * np.pi * n / _N_FFT)
        bins = np.arange(_N_FFT // 2 + 1)
        angle = 2.0 * np.pi * np.outer(n, bins) / _N_FFT
        basis = (
            np.concatenate([np.cos(angle), -np.sin(angle)], axis=1) * window[:, None]
        )  # (20, 22)
        taps = _N_FFT // _HOP
        # A frame is `taps` consecutive blocks of `_HOP` samples: a `taps`-tap conv over blocks.
        forward = basis.T.reshape(2 * len(bins), taps, _HOP)
        self._forward = Conv(mx.array(forward.astype(np.float32)), None, matmul=matmul)
        inverse = np.asarray(w["decoder.generator.istft.basis"])[:, 0, :]  # (22, 20)
        # Output sample q*hop + r sums frames q-j at taps j*hop + r: `taps` taps, `hop` phases.
        phases = inverse.reshape(-1, taps, _HOP).transpose(2, 1, 0)[:, ::-1, :]
        self._inverse = Conv(mx.array(np.ascontiguousarray(phases)), None, matmul=matmul)
        self._window_sum = np.asarray(w["decoder.generator.istft.window_sum"])

    def magnitude_phase(self, x: mx.array) -> mx.array:
        """``(frames, 22)``: 11 magnitudes then 11 phases, as the export computes them."""
        pad = _N_FFT // 2
        x = mx.concatenate([x[1 : pad + 1][::-1], x, x[-pad - 1 : -1][::-1]])
        spec = self._forward.valid(x.reshape(-1, _HOP))
        real, imag = mx.split(spec, 2, axis=1)
        # atan(imag / real), moved to the real part's half plane: the export's atan2.
        safe = mx.where(real == 0, 1.0, real)
        angle = mx.where(real == 0, mx.sign(imag) * (math.pi / 2), mx.arctan(imag / safe))
        angle = mx.where(real < 0, mx.where(imag > 0, angle + math.pi, angle - math.pi), angle)
        # DC and Nyquist have no imaginary part: PyTorch's angle (as trained) is pi for a
        # negative real part, and onnxruntime's DFT rounding mostly lands there too; the
        # export's formula would give -pi for an exact zero. Measured: -1.7 dB of level at -pi.
        edges = mx.where(real < 0, math.pi, 0.0)
        column = mx.arange(real.shape[1])
        angle = mx.where((column == 0) | (column == real.shape[1] - 1), edges, angle)
        return mx.concatenate([mx.sqrt(real * real + imag * imag), angle], axis=1)

    def inverse(self, spec: mx.array) -> mx.array:
        """``(frames, 22)`` log-magnitudes and raw phases -> ``(frames - 1) * hop`` samples."""
        magnitude = mx.exp(spec[:, : _N_FFT // 2 + 1])
        phase = mx.sin(spec[:, _N_FFT // 2 + 1 :])
        parts = mx.concatenate([magnitude * mx.cos(phase), magnitude * mx.sin(phase)], axis=1)
        taps = _N_FFT // _HOP
        y = self._inverse.valid(mx.pad(parts, [(taps - 1, taps - 1), (0, 0)])).reshape(-1)
        # The export divides only its first window's samples by the window's square (where
        # non-zero), scales by n_fft / hop, and trims half a window each side.
        head = np.ones(_N_FFT, np.float32)
        nonzero = self._window_sum > np.finfo(np.float32).tiny
        head[nonzero] = 1.0 / self._window_sum[nonzero]
        y = mx.concatenate([y[:_N_FFT] * mx.array(head), y[_N_FFT:]]) * float(_N_FFT // _HOP)
        return y[_N_FFT // 2 : -(_N_FFT // 2)]


class Generator:
    def __init__(self, w: Weights, matmul: bool) -> None:
        g = "decoder.generator"
        self.source = HarmonicSource(w)
        self.stft = Stft(w, matmul)
        self.ups = [
            Upsample(w[f"{g}.ups.0.weight"], w[f"{g}.ups.0.bias"], 10, 5, matmul=matmul),
            Upsample(w[f"{g}.ups.1.weight"], w[f"{g}.ups.1.bias"], 6, 3, matmul=matmul),
        ]
        self.noise_convs: list[Callable[[mx.array], mx.array]] = [
            StridedConv(w[f"{g}.noise_convs.0.weight"], w[f"{g}.noise_convs.0.bias"], 6, 3, matmul),
            _conv(w, f"{g}.noise_convs.1", matmul),
        ]
        self.noise_res = [
            AdaINResBlock1(w, f"{g}.noise_res.0", (1, 3, 5), matmul),
            AdaINResBlock1(w, f"{g}.noise_res.1", (1, 3, 5), matmul),
        ]
        self.resblocks = [
            [AdaINResBlock1(w, f"{g}.resblocks.{3 * i + j}", (1, 3, 5), matmul) for j in range(3)]
            for i in range(2)
        ]
        self.conv_post = _conv(w, f"{g}.conv_post", matmul)

    def __call__(self, x: mx.array, style: mx.array, f0: mx.array) -> mx.array:
        return self.stft.inverse(self.spectrum(x, style, self.harmonics(f0)))

    def harmonics(self, f0: mx.array) -> mx.array:
        """The harmonic source's magnitudes and phases, ``(120 * frames + 1, 22)``."""
        return self.stft.magnitude_phase(self.source(f0))

    def spectrum(self, x: mx.array, style: mx.array, harmonics: mx.array) -> mx.array:
        """Two upsamplings (x10, x6) with residual blocks, driven by the harmonics: the log
        magnitudes and phases the inverse STFT turns into audio."""
        for i, (up, noise_conv, noise_res, blocks) in enumerate(
            zip(self.ups, self.noise_convs, self.noise_res, self.resblocks, strict=True)
        ):
            x = up(leaky_relu(x, 0.1))
            if i == len(self.ups) - 1:
                x = mx.concatenate([x[1:2], x])  # ReflectionPad1d((1, 0))
            x = x + noise_res(noise_conv(harmonics), style)
            total = blocks[0](x, style)
            for block in blocks[1:]:
                total = total + block(x, style)
            x = total * (1.0 / len(blocks))
        return self.conv_post(leaky_relu(x, 0.01))


class Decoder:
    """Frames (text features, F0, energy, style) -> 24 kHz audio, 600 samples per frame."""

    def __init__(self, w: Weights, matmul: bool) -> None:
        d = "decoder"
        self.f0_conv = StridedConv(w[f"{d}.F0_conv.weight"], w[f"{d}.F0_conv.bias"], 2, 1, matmul)
        self.n_conv = StridedConv(w[f"{d}.N_conv.weight"], w[f"{d}.N_conv.bias"], 2, 1, matmul)
        self.encode = AdainResBlock(w, f"{d}.encode", matmul)
        self.asr_res = _conv(w, f"{d}.asr_res.0", matmul)
        self.decode = [AdainResBlock(w, f"{d}.decode.{i}", matmul) for i in range(4)]
        self.generator = Generator(w, matmul)

    def __call__(self, asr: mx.array, f0: mx.array, n: mx.array, style: mx.array) -> mx.array:
        return self.generator(self.hidden(asr, f0, n, style), style, f0)

    def hidden(self, asr: mx.array, f0: mx.array, n: mx.array, style: mx.array) -> mx.array:
        """The generator's input, ``(2 * frames, 512)``: text features with F0 and energy."""
        f0_frames = self.f0_conv(f0[:, None])
        n_frames = self.n_conv(n[:, None])
        x = self.encode(mx.concatenate([asr, f0_frames, n_frames], axis=1), style)
        residual = mx.concatenate([self.asr_res(asr), f0_frames, n_frames], axis=1)
        for block in self.decode:
            x = block(mx.concatenate([x, residual], axis=1), style)
        return x


@dataclass(frozen=True)
class Prosody:
    """Everything before the decoder, for one utterance."""

    durations: npt.NDArray[np.int64]
    """Frames per token (pads included), at the requested speed."""
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

    def prosody(self, tokens: list[int], style: mx.array, speed: float = 1.0) -> Prosody:
        """``tokens`` with the pad (0) at each end, ``style`` the voice's ``(256,)`` row."""
        ids = mx.array(tokens, dtype=mx.int32)
        features = self.predictor.features(self.bert(ids), style[128:])
        durations = np.array(self.predictor.durations(features) / speed)
        frames = np.maximum(np.round(durations), 1).astype(np.int64)
        index = mx.array(np.repeat(np.arange(len(tokens)), frames).astype(np.int32))
        f0, n = self.predictor.f0_n(features[index], style[128:])
        return Prosody(durations=frames, asr=self.text_encoder(ids)[index], f0=f0, n=n)

    def decode(self, prosody: Prosody, style: mx.array) -> mx.array:
        """The utterance's audio, 600 samples per frame (a lazy array: evaluate it)."""
        return self.decoder(prosody.asr, prosody.f0, prosody.n, style[:128])
