"""The building blocks of the MLX Piper model: convolutions (per-tap matmuls on a CPU,
native on a GPU), polyphase transposed convolutions, layer norm, activations."""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx
import numpy as np

from .weights import ConvAttrs, VoiceWeights

LRELU_SLOPE = 0.1
FINAL_LRELU_SLOPE = 0.01
"""HiFi-GAN's last ``F.leaky_relu`` is called without a slope: PyTorch's default, 0.01."""


def default_use_matmul() -> bool:
    """One matmul per tap on the CPU (measured 4-5x faster there); MLX's conv kernels elsewhere."""
    return bool(mx.default_device() == mx.cpu)


def leaky_relu(x: mx.array, slope: float) -> mx.array:
    return mx.maximum(x, slope * x)


def pad_time(x: mx.array, left: int, right: int) -> mx.array:
    """Zeros before and after along time, the second-to-last axis (``(T, C)`` or batched)."""
    if left == 0 and right == 0:
        return x
    return mx.pad(x, [*[(0, 0)] * (x.ndim - 2), (left, right), (0, 0)])


class Conv:
    """A 1-d convolution, ``(T, in) -> (T, out)`` with its zero padding, or ``valid`` without."""

    def __init__(
        self,
        weight: mx.array,
        bias: mx.array | None,
        *,
        dilation: int = 1,
        pad_left: int = 0,
        pad_right: int = 0,
        matmul: bool = True,
    ) -> None:
        out_channels, kernel, _ = weight.shape
        self.kernel = int(kernel)
        self.dilation = dilation
        self.pad_left = pad_left
        self.pad_right = pad_right
        self.span = dilation * (self.kernel - 1)
        """Input samples a ``valid`` output needs beyond its own position."""
        self.out_channels = int(out_channels)
        self._native = not matmul and self.kernel > 1
        self._weight = weight
        # (in, out) per tap, made contiguous once: a strided view would be copied by every matmul.
        taps = np.asarray(weight).transpose(1, 2, 0)
        self._taps = [] if self._native else [mx.array(np.ascontiguousarray(t)) for t in taps]
        self._bias = bias

    def valid(self, x: mx.array) -> mx.array:
        """Outputs only where the whole kernel lies inside ``x``: ``len(x) - span`` of them."""
        length = x.shape[-2] - self.span
        if self._native:
            if x.ndim == 2:  # reshapes: one operation each, where indexing is two
                y = self.valid(x.reshape(1, *x.shape))
                return y.reshape(y.shape[1:])
            y = mx.conv1d(x, self._weight, dilation=self.dilation)
            return y if self._bias is None else y + self._bias
        # One matmul per tap, accumulated: measured faster on the CPU than building the im2col
        # matrix (a copy of the input per tap) for one large matmul.
        d = self.dilation
        first = x if self.span == 0 else x[..., 0:length, :]
        y = (
            first @ self._taps[0]
            if self._bias is None
            else mx.addmm(self._bias, first, self._taps[0])
        )
        for k in range(1, self.kernel):
            y = mx.addmm(y, x[..., k * d : k * d + length, :], self._taps[k])
        return y

    def __call__(self, x: mx.array) -> mx.array:
        return self.valid(pad_time(x, self.pad_left, self.pad_right))


class DepthwiseConv:
    """A grouped convolution with one channel per group (the duration predictor's DDSConv):
    MLX's grouped ``conv1d`` where convolutions run natively (one operation, not one slice,
    multiply and add per tap), else a multiply-add per tap."""

    def __init__(self, weight: mx.array, bias: mx.array, attrs: ConvAttrs, matmul: bool) -> None:
        self._weight = weight  # (C, K, 1)
        self._taps = mx.array(np.ascontiguousarray(np.asarray(weight)[:, :, 0].T))  # (K, C)
        self._native = not matmul
        self.kernel = int(weight.shape[1])
        self.dilation = attrs.dilation
        self.pad_left, self.pad_right = attrs.pad_left, attrs.pad_right
        self.span = self.dilation * (self.kernel - 1)
        self._bias = bias

    def __call__(self, x: mx.array) -> mx.array:
        """``(T, C)``, or ``(B, T, C)`` for sentences side by side."""
        x = pad_time(x, self.pad_left, self.pad_right)
        if self._native:
            groups = int(self._weight.shape[0])
            one = x.ndim == 2
            y = mx.conv1d(
                x.reshape(1, *x.shape) if one else x,
                self._weight,
                dilation=self.dilation,
                groups=groups,
            )
            return (y.reshape(y.shape[1:]) if one else y) + self._bias
        length = x.shape[-2] - self.span
        d = self.dilation
        y = self._bias + x[..., 0:length, :] * self._taps[0]
        for k in range(1, self.kernel):
            y = y + x[..., k * d : k * d + length, :] * self._taps[k]
        return y


class Upsample:
    """``ConvTranspose1d(stride=s)`` as one stride-1 convolution with ``s`` interleaved phases.

    Output sample ``q*s + r`` is ``sum_j x[q - j] @ w[:, j*s + r + padding]``: phase ``r`` is
    an ordinary convolution over ``x`` with the taps whose index is ``r + padding`` modulo
    ``s``. Stacking the phases as output channels and interleaving them is exact, and costs a
    few taps per input sample instead of a kernel per output sample of a zero-stuffed signal.
    """

    def __init__(
        self, weight: mx.array, bias: mx.array | None, stride: int, padding: int, *, matmul: bool
    ) -> None:
        w = np.asarray(weight)  # (O, K, I)
        out_channels, kernel, in_channels = w.shape
        if kernel - 2 * padding != stride:
            raise ValueError(f"transposed conv k={kernel} s={stride} p={padding} is not x{stride}")
        taps = [
            (r, k, (k - r - padding) // stride)
            for r in range(stride)
            for k in range(kernel)
            if (k - r - padding) % stride == 0
        ]
        j_min, j_max = min(t[2] for t in taps), max(t[2] for t in taps)
        poly = np.zeros((stride, out_channels, j_max - j_min + 1, in_channels), w.dtype)
        for r, k, j in taps:
            poly[r, :, j_max - j, :] = w[:, k, :]
        self.stride = stride
        self.padding = padding
        """The transposed convolution's own padding (PyTorch's ``padding``)."""
        self.out_channels = int(out_channels)
        self.pad_left, self.pad_right = j_max, -j_min
        self._conv = Conv(
            mx.array(poly.reshape(stride * out_channels, j_max - j_min + 1, in_channels)),
            None if bias is None else mx.tile(bias, (stride,)),
            matmul=matmul,
        )
        self.span = self._conv.span

    def valid(self, x: mx.array) -> mx.array:
        y = self._conv.valid(x)
        return y.reshape(*y.shape[:-2], y.shape[-2] * self.stride, self.out_channels)

    def __call__(self, x: mx.array) -> mx.array:
        return self.valid(pad_time(x, self.pad_left, self.pad_right))


def conv_from(
    w: VoiceWeights,
    module: str,
    matmul: bool,
    *,
    same: bool = False,
    scale: float = 1.0,
    input_scale: float = 1.0,
) -> Conv:
    """The conv ``module`` as the graph called it (or 'same' padding where the graph padded),
    its output times ``scale``, of its input times ``input_scale`` (folded into the weights:
    a constant factor is otherwise one more operation a call)."""
    weight = w[f"{module}.weight"]
    bias = w.get(f"{module}.bias")
    if scale * input_scale != 1.0:
        weight = weight * (scale * input_scale)
    if scale != 1.0 and bias is not None:
        bias = bias * scale
    attrs = w.conv(module)
    kernel = int(weight.shape[1])
    left, right = ((kernel - 1) // 2, kernel // 2) if same else (attrs.pad_left, attrs.pad_right)
    return Conv(
        weight, bias, dilation=attrs.dilation, pad_left=left, pad_right=right, matmul=matmul
    )


def count_modules(w: VoiceWeights, pattern: str) -> int:
    n = 0
    while pattern.format(n) in w:
        n += 1
    return n


def layer_norm_params(w: VoiceWeights, prefix: str) -> tuple[mx.array, mx.array]:
    return w[f"{prefix}.gamma"], w[f"{prefix}.beta"]


def layer_norm(x: mx.array, params: tuple[mx.array, mx.array]) -> mx.array:
    return mx.fast.layer_norm(x, params[0], params[1], 1e-5)


def masked(x: mx.array, mask: mx.array | None) -> mx.array:
    """``x`` zeroed past each sentence's end (``mask``: ``(B, T, 1)``, None for one sentence),
    before a convolution that reaches its neighbours: it then reads the zeros a sentence of
    its own would be padded with."""
    return x if mask is None else x * mask


def time_mask(lengths: Sequence[int], length: int) -> mx.array:
    """``(B, length, 1)``: 1 within each sentence's ``lengths``, 0 after it."""
    inside = np.arange(length)[None, :] < np.asarray(lengths)[:, None]
    return mx.array(inside[:, :, None].astype(np.float32))
