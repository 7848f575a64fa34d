"""The stochastic duration predictor, run in reverse: a flow of rational-quadratic splines
over noise, conditioned on the encoder."""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np

from .layers import (
    DepthwiseConv,
    conv_from,
    count_modules,
    layer_norm,
    layer_norm_params,
    masked,
)
from .weights import VoiceWeights

SPLINE_TAIL_BOUND = 5.0
_MIN_BIN = 1e-3
_ROOT_HALF = math.sqrt(0.5)


class DDSConv:
    """Dilated depth-separable convolutions with layer norms and GELU, residual.

    Each exact GELU, ``0.5 v (1 + erf(v / sqrt 2))`` on a layer norm's output ``v``, is
    computed as ``u + u erf(u)`` with ``u = v / sqrt 2`` (the layer norm's scale and shift taken
    so), its ``1 / sqrt 2`` folded into the pointwise convolution after the first and applied
    once to the second: 3 and 5 operations instead of 8 each.
    """

    def __init__(self, w: VoiceWeights, prefix: str, matmul: bool) -> None:
        n = count_modules(w, prefix + ".convs_sep.{}.weight")
        self.sep = [
            DepthwiseConv(
                w[f"{prefix}.convs_sep.{i}.weight"],
                w[f"{prefix}.convs_sep.{i}.bias"],
                w.conv(f"{prefix}.convs_sep.{i}"),
                matmul,
            )
            for i in range(n)
        ]
        self.pointwise = [
            conv_from(w, f"{prefix}.convs_1x1.{i}", matmul, input_scale=_ROOT_HALF)
            for i in range(n)
        ]
        self.norms_1 = [_halved(layer_norm_params(w, f"{prefix}.norms_1.{i}")) for i in range(n)]
        self.norms_2 = [_halved(layer_norm_params(w, f"{prefix}.norms_2.{i}")) for i in range(n)]

    def __call__(self, x: mx.array, mask: mx.array | None = None) -> mx.array:
        for sep, pointwise, norm_1, norm_2 in zip(
            self.sep, self.pointwise, self.norms_1, self.norms_2, strict=True
        ):
            u = layer_norm(sep(masked(x, mask)), norm_1)
            u = layer_norm(pointwise(u + u * mx.erf(u)), norm_2)
            x = x + (u + u * mx.erf(u)) * _ROOT_HALF
        return x


def _halved(params: tuple[mx.array, mx.array]) -> tuple[mx.array, mx.array]:
    """A layer norm's scale and shift, times ``1 / sqrt 2``."""
    return params[0] * _ROOT_HALF, params[1] * _ROOT_HALF


def rational_quadratic_inverse(
    x: mx.array, params: mx.array, scale: float, tail_bound: float = SPLINE_TAIL_BOUND
) -> mx.array:
    """Inverse of the monotonic rational-quadratic spline, identity outside +-tail_bound.

    ``params`` ``(..., 3 * bins - 1)``: the unnormalized bin widths and heights (times
    ``scale``), then the inner knots' unnormalized derivatives. Widths and heights go through
    each step together, and the bin each ``x`` falls in is read from one table in one gather.
    """
    bins = (int(params.shape[-1]) + 1) // 3
    raw = (params[..., : 2 * bins] * scale).reshape(*x.shape, 2, bins)
    sizes = _MIN_BIN + (1.0 - _MIN_BIN * bins) * mx.softmax(raw, axis=-1)
    inner = 2.0 * tail_bound * mx.cumsum(sizes, axis=-1)[..., :-1] - tail_bound
    ends = np.zeros(bins + 1, np.float32)
    ends[0], ends[-1] = -tail_bound, tail_bound
    knots = mx.pad(inner, [(0, 0)] * (inner.ndim - 1) + [(1, 1)]) + mx.array(ends)
    edge = math.log(math.expm1(1.0 - _MIN_BIN))
    edged = mx.pad(params[..., 2 * bins :], [(0, 0)] * x.ndim + [(1, 1)], constant_values=edge)
    derivatives = _MIN_BIN + mx.logaddexp(edged, 0.0)
    lift = np.zeros(bins + 1, np.float32)
    lift[-1] = 1e-6
    search = knots[..., 1, :] + mx.array(lift)
    index = mx.clip(mx.sum(x[..., None] >= search, axis=-1) - 1, 0, bins - 1)
    table = mx.concatenate(
        [
            knots[..., :-1],
            knots[..., 1:] - knots[..., :-1],
            derivatives[..., None, :-1],
            derivatives[..., None, 1:],
        ],
        axis=-2,
    )  # (..., 6, bins): knot and size of widths, of heights; derivative at each end
    picked = mx.take_along_axis(table, index[..., None, None], -1)
    in_cw, in_ch, in_w, in_h, d0, d1 = mx.split(picked.reshape(*x.shape, 6), 6, axis=-1)
    in_delta = in_h / in_w
    x = x[..., None]
    shifted = x - in_ch
    slope_sum = d0 + d1 - 2.0 * in_delta
    a = shifted * slope_sum + in_h * (in_delta - d0)
    b = in_h * d0 - shifted * slope_sum
    c = -in_delta * shifted
    root = (2.0 * c) / (-b - mx.sqrt(mx.maximum(b * b - 4.0 * a * c, 0.0)))
    inside = (x >= -tail_bound) & (x <= tail_bound)
    return mx.where(inside, root * in_w + in_cw, x)[..., 0]


class ConvFlow:
    """One spline coupling flow of the duration predictor, run in reverse."""

    def __init__(self, w: VoiceWeights, prefix: str, matmul: bool) -> None:
        self.pre = conv_from(w, f"{prefix}.pre", matmul)
        self.convs = DDSConv(w, f"{prefix}.convs", matmul)
        self.proj = conv_from(w, f"{prefix}.proj", matmul)
        self.filter_channels = self.pre.out_channels
        self.half = int(w[f"{prefix}.pre.weight"].shape[2])

    def reverse(self, z: mx.array, cond: mx.array, mask: mx.array | None = None) -> mx.array:
        x0, x1 = z[..., : self.half], z[..., self.half :]
        h = self.proj(self.convs(self.pre(x0) + cond, mask))
        h = h.reshape(*h.shape[:-1], self.half, -1)
        x1 = rational_quadratic_inverse(x1, h, 1.0 / math.sqrt(self.filter_channels))
        return mx.concatenate([x0, x1], axis=-1)


class DurationPredictor:
    """Piper's stochastic duration predictor in reverse: noise -> log durations per phoneme."""

    def __init__(self, w: VoiceWeights, matmul: bool) -> None:
        self.pre = conv_from(w, "dp.pre", matmul)
        self.convs = DDSConv(w, "dp.convs", matmul)
        self.proj = conv_from(w, "dp.proj", matmul)
        # Reverse order, without the first spline flow, which Piper's inference skips (and
        # its export leaves out): Flip, flows.7, Flip, flows.5, Flip, flows.3, Flip, affine.
        indices = sorted(
            (
                int(k.split(".")[2])
                for k in w.arrays
                if k.startswith("dp.flows.")
                and k.endswith(".pre.weight")
                and k != "dp.flows.1.pre.weight"
            ),
            reverse=True,
        )
        self.flows = [ConvFlow(w, f"dp.flows.{i}", matmul) for i in indices]
        self.affine_m = w["dp.flows.0.m"][:, 0]
        self.affine_scale = mx.exp(-w["dp.flows.0.logs"][:, 0])

    def __call__(self, x: mx.array, noise: mx.array, mask: mx.array | None = None) -> mx.array:
        """``noise``: ``(T, 2)`` standard normal times ``noise_w`` (or ``(B, T, 2)`` for
        sentences padded past ``mask``, :func:`.layers.time_mask`). Returns log durations."""
        cond = self.proj(self.convs(self.pre(x), mask))
        z = noise
        for flow in self.flows:
            z = flow.reverse(z[..., ::-1], cond, mask)
        z = (z[..., ::-1] - self.affine_m) * self.affine_scale
        return z[..., 0]
