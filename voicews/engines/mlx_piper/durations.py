"""The stochastic duration predictor, run in reverse: a flow of rational-quadratic splines
over noise, conditioned on the encoder."""

from __future__ import annotations

import math

import mlx.core as mx

from .layers import DepthwiseConv, conv_from, count_modules, gelu, layer_norm, layer_norm_params
from .weights import VoiceWeights

SPLINE_TAIL_BOUND = 5.0
_MIN_BIN = 1e-3


class DDSConv:
    """Dilated depth-separable convolutions with layer norms and GELU, residual."""

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
        self.pointwise = [conv_from(w, f"{prefix}.convs_1x1.{i}", matmul) for i in range(n)]
        self.norms_1 = [layer_norm_params(w, f"{prefix}.norms_1.{i}") for i in range(n)]
        self.norms_2 = [layer_norm_params(w, f"{prefix}.norms_2.{i}") for i in range(n)]

    def __call__(self, x: mx.array) -> mx.array:
        for sep, pointwise, norm_1, norm_2 in zip(
            self.sep, self.pointwise, self.norms_1, self.norms_2, strict=True
        ):
            y = gelu(layer_norm(sep(x), norm_1))
            x = x + gelu(layer_norm(pointwise(y), norm_2))
        return x


def rational_quadratic_inverse(
    x: mx.array,
    widths_raw: mx.array,
    heights_raw: mx.array,
    derivatives_raw: mx.array,
    tail_bound: float = SPLINE_TAIL_BOUND,
) -> mx.array:
    """Inverse of the monotonic rational-quadratic spline, identity outside +-tail_bound."""
    bins = widths_raw.shape[-1]
    edge = mx.full((*x.shape, 1), math.log(math.expm1(1.0 - _MIN_BIN)))
    derivatives = _MIN_BIN + mx.logaddexp(
        mx.concatenate([edge, derivatives_raw, edge], axis=-1), 0.0
    )

    def knots(raw: mx.array) -> tuple[mx.array, mx.array]:
        sizes = _MIN_BIN + (1.0 - _MIN_BIN * bins) * mx.softmax(raw, axis=-1)
        inner = 2.0 * tail_bound * mx.cumsum(sizes, axis=-1)[..., :-1] - tail_bound
        ends = mx.full((*x.shape, 1), tail_bound)
        cum = mx.concatenate([-ends, inner, ends], axis=-1)
        return cum, cum[..., 1:] - cum[..., :-1]

    cum_w, widths = knots(widths_raw)
    cum_h, heights = knots(heights_raw)
    search = mx.concatenate([cum_h[..., :-1], cum_h[..., -1:] + 1e-6], axis=-1)
    index = mx.clip(mx.sum(x[..., None] >= search, axis=-1) - 1, 0, bins - 1)[..., None]

    def at(a: mx.array) -> mx.array:
        return mx.take_along_axis(a, index, -1)[..., 0]

    in_cw, in_w, in_ch, in_h = at(cum_w), at(widths), at(cum_h), at(heights)
    in_delta = at(heights / widths)
    d0, d1 = at(derivatives[..., :-1]), at(derivatives[..., 1:])
    shifted = x - in_ch
    slope_sum = d0 + d1 - 2.0 * in_delta
    a = shifted * slope_sum + in_h * (in_delta - d0)
    b = in_h * d0 - shifted * slope_sum
    c = -in_delta * shifted
    root = (2.0 * c) / (-b - mx.sqrt(mx.maximum(b * b - 4.0 * a * c, 0.0)))
    inside = (x >= -tail_bound) & (x <= tail_bound)
    return mx.where(inside, root * in_w + in_cw, x)


class ConvFlow:
    """One spline coupling flow of the duration predictor, run in reverse."""

    def __init__(self, w: VoiceWeights, prefix: str, matmul: bool) -> None:
        self.pre = conv_from(w, f"{prefix}.pre", matmul)
        self.convs = DDSConv(w, f"{prefix}.convs", matmul)
        self.proj = conv_from(w, f"{prefix}.proj", matmul)
        self.filter_channels = self.pre.out_channels
        self.half = int(w[f"{prefix}.pre.weight"].shape[2])
        self.bins = (self.proj.out_channels // self.half + 1) // 3

    def reverse(self, z: mx.array, cond: mx.array) -> mx.array:
        x0, x1 = z[:, : self.half], z[:, self.half :]
        h = self.proj(self.convs(self.pre(x0) + cond))
        h = h.reshape(h.shape[0], self.half, -1)
        scale = 1.0 / math.sqrt(self.filter_channels)
        n = self.bins
        x1 = rational_quadratic_inverse(
            x1, h[..., :n] * scale, h[..., n : 2 * n] * scale, h[..., 2 * n :]
        )
        return mx.concatenate([x0, x1], axis=1)


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

    def __call__(self, x: mx.array, noise: mx.array) -> mx.array:
        """``noise``: ``(T, 2)`` standard normal times ``noise_w``. Returns log durations."""
        cond = self.proj(self.convs(self.pre(x)))
        z = noise
        for flow in self.flows:
            z = flow.reverse(z[:, ::-1], cond)
        z = (z[:, ::-1] - self.affine_m) * self.affine_scale
        return z[:, 0]
