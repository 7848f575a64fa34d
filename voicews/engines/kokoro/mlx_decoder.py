"""Kokoro's decoder in MLX: frames -> the iSTFTNet generator, driven by a harmonic source
made from F0, whose 20-point spectrum an inverse STFT turns into 24 kHz audio. Where mlx-audio
and the ONNX export differ this follows the export: no random source (SineGen's initial phases
and noise are gone), and an inverse STFT as a transposed convolution whose window
normalisation covers only the first 20 samples."""

from __future__ import annotations

import math
from collections.abc import Callable

import mlx.core as mx
import numpy as np

from ..mlx_piper.layers import Conv, Upsample, leaky_relu, pad_time
from .assets import SAMPLE_RATE
from .mlx_layers import (
    AdainResBlock,
    GroupedAdaIN,
    Lengths,
    Linear,
    StridedConv,
    StyleBank,
    Styles,
    Weights,
    same_conv,
)

_HARMONICS = 9
_SINE_AMP = 0.1
_VOICED_THRESHOLD = 10.0
_N_FFT = 20
_HOP = 5
_UPSAMPLE = 300
"""F0 samples per F0 value: F0 runs at twice the frame rate."""


class AdaINResBlock1:
    """The generator's residual block: three AdaIN/Snake/dilated-conv pairs, each residual.

    Snake is ``y + sin(alpha y)^2 / alpha``, that is ``(u + sin(u)^2) / alpha`` of
    ``u = alpha y``: the alpha is folded into the AdaIN's projection (its scale and shift) and
    the ``1 / alpha`` into the next convolution's weights, leaving three operations a Snake,
    none of them a broadcast.

    ``module`` a list: blocks that read the same input, their outputs summed (a generator
    stage's three, averaged by the caller), run side by side on their channels: one instance
    norm, one Snake and one residual sum serve all; each convolves its own channels (a split,
    a convolution each, a concatenation: their kernels differ, 3, 7 and 11, and padding them
    to one would compute 57% more). ``biased=False``: the second convolutions' biases are left
    out and summed into ``bias`` for the caller to add: constants that the next norm removes
    again, they only pass along the residual."""

    def __init__(
        self,
        w: Weights,
        module: str | list[str],
        dilations: tuple[int, ...],
        matmul: bool,
        bank: StyleBank,
        *,
        biased: bool = True,
        group: str | None = None,
    ) -> None:
        modules = [module] if isinstance(module, str) else module

        def alphas(name: str) -> list[np.ndarray]:
            return [np.asarray(w[f"{m}.{name}"]).reshape(-1).astype(np.float64) for m in modules]

        def convs(name: str, alpha: list[np.ndarray], d: int, normed: bool) -> list[Conv]:
            return [
                same_conv(w, f"{m}.{name}", matmul, dilation=d, input_scale=1.0 / a, normed=normed)
                for m, a in zip(modules, alpha, strict=True)
            ]

        self.stages = []
        bias = np.zeros(int(w[f"{modules[0]}.convs2.0.bias"].shape[0]), np.float32)
        for j, d in enumerate(dilations):
            alpha1, alpha2 = alphas(f"alpha1.{j}"), alphas(f"alpha2.{j}")
            self.stages.append(
                (
                    GroupedAdaIN(
                        w, [f"{m}.adain1.{j}" for m in modules], bank, alpha1, group=group
                    ),
                    convs(f"convs1.{j}", alpha1, d, True),  # adain2 follows
                    GroupedAdaIN(
                        w, [f"{m}.adain2.{j}" for m in modules], bank, alpha2, group=group
                    ),
                    convs(f"convs2.{j}", alpha2, 1, not biased),
                )
            )
            bias += sum(np.asarray(w[f"{m}.convs2.{j}.bias"]) for m in modules)
        self.blocks = len(modules)
        self.bias = mx.array(bias)
        """The second convolutions' biases, summed: what ``biased=False`` leaves out."""

    def __call__(self, x: mx.array, styles: Styles) -> mx.array:
        x = x if self.blocks == 1 else mx.concatenate([x] * self.blocks, axis=-1)
        for norm1, convs1, norm2, convs2 in self.stages:
            y = _side_by_side(convs1, styles.masked(snake_scaled(norm1(x, styles))))
            x = x + _side_by_side(convs2, styles.masked(snake_scaled(norm2(y, styles))))
        if self.blocks > 1:
            x = x.reshape(*x.shape[:-1], self.blocks, -1).sum(axis=-2)
        return x


def _side_by_side(convs: list[Conv], x: mx.array) -> mx.array:
    """Each convolution over its own consecutive channels of ``x``, their outputs joined."""
    if len(convs) == 1:
        return convs[0](x)
    parts = mx.split(x, len(convs), axis=-1)
    return mx.concatenate([conv(p) for conv, p in zip(convs, parts, strict=True)], axis=-1)


def snake_scaled(u: mx.array) -> mx.array:
    """Snake of ``u / alpha``, times alpha: ``u + sin(u)^2``."""
    return u + mx.square(mx.sin(u))


def _linear_taps(n: int, scale: int) -> tuple[mx.array, np.ndarray]:
    """``Resize(mode=linear, half_pixel)`` by an integer factor along time, edges clamped, as
    taps: output sample ``scale q + r`` is input rows ``index[q, r]`` times ``weights[q, r]``
    (each ``(2,)``: the rows below and above it)."""
    src = np.maximum((np.arange(n * scale) + 0.5) / scale - 0.5, 0.0)
    lo = np.floor(src).astype(np.int32)
    hi = np.minimum(lo + 1, n - 1)
    frac = (src - lo).astype(np.float32)
    index = np.stack([lo, hi], axis=1).reshape(n, scale, 2)
    weights = np.stack([np.float32(1.0) - frac, frac], axis=1).reshape(n, scale, 2, 1)
    return mx.array(index), weights


class HarmonicSource:
    """F0 -> the summed, tanh-squashed harmonics the generator is driven by (no noise: the
    export dropped SineGen's random phases and noise).

    Unvoiced F0 values are silenced through the interpolation's weights (their samples' phase
    made zero, whose sine is zero), not by a mask of the sines; the sines' amplitude is folded
    into the linear's weights. The samples stay ``(F0 values, 300, ...)`` until the end."""

    def __init__(self, w: Weights) -> None:
        linear = Linear(w, "decoder.generator.m_source.l_linear")
        self.weight = mx.array(np.asarray(linear.weight_t) * np.float32(_SINE_AMP))
        assert linear.bias is not None
        self.bias = linear.bias
        self.harmonics = mx.array(np.arange(1, _HARMONICS + 1, dtype=np.float32)[None])

    def __call__(self, f0: mx.array) -> mx.array:
        """``(values,)`` -> ``(300 values,)``; a padded batch ``(utterances, values)`` too,
        its padding zero: an F0 of zero adds no phase, so the last value's neighbour there
        holds the phase the clamped edge of the utterance alone repeats."""
        *batch, n = f0.shape
        rad = (f0[..., None] @ self.harmonics) / SAMPLE_RATE  # per F0 value and harmonic
        rad = rad - mx.floor(rad)
        phase = mx.cumsum(rad, axis=-2) * (2.0 * math.pi) * _UPSAMPLE  # in the export's order
        index, weights = _linear_taps(n, _UPSAMPLE)
        voiced = (f0 > _VOICED_THRESHOLD).reshape(*batch, n, 1, 1, 1)
        taps = phase[index] if not batch else phase[:, index]
        sines = mx.sin((taps * (mx.array(weights) * voiced)).sum(axis=-2))
        return mx.tanh(mx.addmm(self.bias, sines, self.weight)).reshape(*batch, -1)


_PAST_THE_END = np.repeat(np.array([-np.inf, 0.0], np.float32), _N_FFT // 2 + 1)
"""A spectrum's 22 values past an utterance's frames: log magnitudes of minus infinity (no
sound), phases of zero."""


def _reflected(valid: int, length: int, pad: int) -> np.ndarray:
    """Sample indices of ``valid`` samples padded ``pad`` each side by reflection, then
    repeating the first sample up to ``length + 2 pad`` (samples no valid frame reads)."""
    index = np.abs(np.arange(-pad, length + pad))
    index = np.where(index < valid, index, 2 * (valid - 1) - index)
    return np.where(index >= 0, index, 0).astype(np.int32)


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
        window_sum = np.asarray(w["decoder.generator.istft.window_sum"])
        self._head = np.ones(_N_FFT, np.float32)
        nonzero = window_sum > np.finfo(np.float32).tiny
        self._head[nonzero] = 1.0 / window_sum[nonzero]
        edges = np.zeros(len(bins), bool)
        edges[[0, -1]] = True
        self._edges = mx.array(edges)
        self._flat_negative = mx.array(np.where(edges, np.pi, -np.pi).astype(np.float32))

    def magnitude_phase(self, x: mx.array, lengths: Lengths | None = None) -> mx.array:
        """``(1, frames, 22)``: 11 magnitudes then 11 phases of ``x`` ``(samples,)``, as the
        export computes them; of a padded batch ``(utterances, samples)``, each reflected at
        its own end (``lengths``)."""
        pad, length = _N_FFT // 2, x.shape[-1]
        # Reflect-padded and cut into blocks of `_HOP` samples: one gather.
        if lengths is None:
            index = _reflected(length, length, pad)
            spec = self._forward.valid(x[mx.array(index.reshape(1, -1, _HOP))])
        else:
            rows = [_reflected(int(n), length, pad) for n in lengths.valid(length)]
            blocks = mx.take_along_axis(x, mx.array(np.stack(rows)), axis=-1)
            spec = self._forward.valid(blocks.reshape(x.shape[0], -1, _HOP))
        real, imag = mx.split(spec, 2, axis=-1)
        # The export's atan(imag / real), moved to the real part's half plane, is atan2 but
        # where imag is exactly zero: -pi there for a negative real part (atan2: pi for +0).
        # DC and Nyquist have no imaginary part: PyTorch's angle (as trained) is pi for a
        # negative real part, and onnxruntime's DFT rounding mostly lands there too; the
        # export's formula would give -pi for an exact zero. Measured: -1.7 dB of level at -pi.
        flat = (imag == 0) | self._edges
        flat_angle = mx.where(real < 0, self._flat_negative, 0.0)
        angle = mx.where(flat, flat_angle, mx.arctan2(imag, real))
        return mx.concatenate([mx.sqrt(real * real + imag * imag), angle], axis=-1)

    def inverse(self, spec: mx.array, lengths: Lengths | None = None) -> mx.array:
        """``(frames, 22)`` log-magnitudes and raw phases (or ``(1, frames, 22)``) ->
        ``(frames - 1) * hop`` samples; a padded batch ``(utterances, frames, 22)`` ->
        ``(utterances, (frames - 1) * hop)``, each utterance's frames past its own zero (as
        the padding of one alone), its samples valid as far as its own frames give them."""
        if lengths is not None:
            valid = lengths.mask(int(spec.shape[-2]))[0] > 0
            spec = mx.where(valid, spec, mx.array(_PAST_THE_END))
        magnitude = mx.exp(spec[..., : _N_FFT // 2 + 1])
        phase = mx.sin(spec[..., _N_FFT // 2 + 1 :])
        parts = mx.concatenate([magnitude * mx.cos(phase), magnitude * mx.sin(phase)], axis=-1)
        taps = _N_FFT // _HOP
        y = self._inverse.valid(pad_time(parts, taps - 1, taps - 1))
        y = y.reshape(-1) if lengths is None else y.reshape(y.shape[0], -1)
        # The export divides only its first window's samples by the window's square (where
        # non-zero), scales by n_fft / hop (a power of two: exact either way), and trims half
        # a window each side: one product by a vector of those factors.
        factors = np.full(y.shape[-1] - _N_FFT, _N_FFT // _HOP, np.float32)
        factors[: _N_FFT // 2] *= self._head[_N_FFT // 2 :]
        return y[..., _N_FFT // 2 : -(_N_FFT // 2)] * mx.array(factors)


class Generator:
    """Two upsampling stages (x10, x6), each with its harmonics' residual block and three
    residual blocks (one computation: ``AdaINResBlock1``), then the inverse STFT.

    A stage adds its constants once, at its end: the upsampling's bias, the noise
    convolution's, and its blocks' second convolutions' (the norms inside remove them again,
    so they only pass along the residuals). The three blocks' sum is not divided by three:
    leaky ReLU commutes with a positive factor, so the third is folded into the next
    convolution's weights."""

    _BLOCKS = 3

    def __init__(self, w: Weights, matmul: bool, bank: StyleBank) -> None:
        g = "decoder.generator"
        self.source = HarmonicSource(w)
        self.stft = Stft(w, matmul)
        self.stages = []
        for i, (stride, padding) in enumerate(((10, 5), (6, 3))):
            weight = np.asarray(w[f"{g}.ups.{i}.weight"]) / (1.0 if i == 0 else self._BLOCKS)
            up = Upsample(mx.array(weight), None, stride, padding, matmul=matmul)
            noise_conv: Callable[[mx.array], mx.array] = (
                StridedConv(w[f"{g}.noise_convs.0.weight"], None, 6, 3, matmul)
                if i == 0
                else same_conv(w, f"{g}.noise_convs.1", matmul, normed=True)
            )
            noise_res = AdaINResBlock1(
                w, f"{g}.noise_res.{i}", (1, 3, 5), matmul, bank, biased=False, group=f"stage {i}"
            )
            blocks = AdaINResBlock1(
                w,
                [f"{g}.resblocks.{self._BLOCKS * i + j}" for j in range(self._BLOCKS)],
                (1, 3, 5),
                matmul,
                bank,
                biased=False,
                group=f"stage {i}",
            )
            shift = np.asarray(w[f"{g}.ups.{i}.bias"]) + np.asarray(w[f"{g}.noise_convs.{i}.bias"])
            constant = self._BLOCKS * (shift + np.asarray(noise_res.bias)) + np.asarray(blocks.bias)
            self.stages.append((up, noise_conv, noise_res, blocks, mx.array(constant)))
        channels = int(w[f"{g}.conv_post.weight"].shape[2])
        self.conv_post = same_conv(
            w, f"{g}.conv_post", matmul, input_scale=np.full(channels, 1.0 / self._BLOCKS)
        )

    def __call__(self, x: mx.array, styles: Styles, f0: mx.array) -> mx.array:
        harmonics = self.harmonics(f0, styles.lengths)
        return self.stft.inverse(self.spectrum(x, styles, harmonics), styles.lengths)

    def harmonics(self, f0: mx.array, lengths: Lengths | None = None) -> mx.array:
        """The harmonic source's magnitudes and phases, ``(1, 120 * frames + 1, 22)`` (or
        one row an utterance of a padded batch)."""
        return self.stft.magnitude_phase(self.source(f0), lengths)

    def spectrum(self, x: mx.array, styles: Styles, harmonics: mx.array) -> mx.array:
        """The decoder's ``(1, 2 * frames, 512)`` upsampled twice with residual blocks, driven
        by the harmonics: the ``(1, 120 * frames + 1, 22)`` log magnitudes and phases the
        inverse STFT turns into audio."""
        harmonics = styles.masked(harmonics)
        for i, (up, noise_conv, noise_res, blocks, constant) in enumerate(self.stages):
            x = up(styles.masked(leaky_relu(x, 0.1)))
            if i == len(self.stages) - 1:
                x = mx.concatenate([x[:, 1:2], x], axis=1)  # ReflectionPad1d((1, 0))
            x = x + noise_res(noise_conv(harmonics), styles)
            x = blocks(x, styles) + constant  # three times the blocks' mean
        return self.conv_post(styles.masked(leaky_relu(x, 0.01)))


class Decoder:
    """Frames (text features, F0, energy, style) -> 24 kHz audio, 600 samples per frame."""

    def __init__(self, w: Weights, matmul: bool) -> None:
        d = "decoder"
        # F0's and energy's convolutions (one channel each) as one, block-diagonal.
        f0_weight, n_weight = (np.asarray(w[f"{d}.{m}_conv.weight"]) for m in ("F0", "N"))
        weight = np.zeros((2, f0_weight.shape[1], 2), np.float32)  # (out, kernel, in)
        weight[0, :, 0], weight[1, :, 1] = f0_weight[0, :, 0], n_weight[0, :, 0]
        bias = np.concatenate([np.asarray(w[f"{d}.{m}_conv.bias"]) for m in ("F0", "N")])
        self.f0_n_conv = StridedConv(mx.array(weight), mx.array(bias), 2, 1, matmul)
        self.styles = StyleBank()
        self.encode = AdainResBlock(w, f"{d}.encode", matmul, self.styles, "frames")
        self.asr_res = same_conv(w, f"{d}.asr_res.0", matmul)
        self.decode = [
            AdainResBlock(w, f"{d}.decode.{i}", matmul, self.styles, "frames") for i in range(4)
        ]
        self.generator = Generator(w, matmul, self.styles)

    def __call__(self, asr: mx.array, f0: mx.array, n: mx.array, style: mx.array) -> mx.array:
        styles = self.styles(style)
        return self.generator(self.hidden(asr, f0, n, styles), styles, f0)

    def batch(
        self, asrs: list[mx.array], f0s: list[mx.array], ns: list[mx.array], style: mx.array
    ) -> list[mx.array]:
        """Several utterances' audio in one pass (a GPU's: one dispatch of each operation for
        all of them), each equal to its own to float rounding: padded to the longest, every
        norm over each utterance's own samples and every convolution's input zero past them.
        ``style``: ``(utterances, 128)``; the audio lazy, each its own length."""
        lengths = Lengths([int(a.shape[0]) for a in asrs])
        frames = lengths.padded
        asr = mx.stack([pad_time(a, 0, frames - int(a.shape[0])) for a in asrs])
        f0, n = (
            mx.stack([mx.pad(v, (0, 2 * frames - int(v.shape[0]))) for v in vs]) for vs in (f0s, ns)
        )
        styles = self.styles(style)
        styles.lengths = lengths
        audio = self.generator(self.hidden(asr, f0, n, styles), styles, f0)
        return [audio[i, : int(k)] for i, k in enumerate(lengths.valid(int(audio.shape[-1])))]

    def hidden(self, asr: mx.array, f0: mx.array, n: mx.array, styles: Styles) -> mx.array:
        """The generator's input, ``(1, 2 * frames, 512)``: text features with F0 and energy,
        batched from here on (MLX's convolutions take that layout as is)."""
        f0_n_in = mx.stack([f0, n], axis=-1)
        if asr.ndim == 2:  # one utterance
            asr, f0_n_in = asr.reshape(1, *asr.shape), f0_n_in[None]
        f0_n = styles.masked(self.f0_n_conv(f0_n_in))
        x = self.encode(mx.concatenate([asr, f0_n], axis=-1), styles)
        residual = mx.concatenate([self.asr_res(asr), f0_n], axis=-1)
        for block in self.decode:
            x = block(mx.concatenate([x, residual], axis=-1), styles)
        return x
