"""Piper's VITS inference in MLX: text encoder, stochastic duration predictor, flow, HiFi-GAN.

Everything runs on one utterance at a time in ``(time, channels)`` layout, so Piper's masks
(all ones for a batch of one) disappear. Hyperparameters are not hard-coded: kernel sizes come
from the weights, dilations, paddings and strides from the ONNX nodes that used them, and the
HiFi-GAN's residual block kind from the weight names, so Piper's other qualities (x_low, low,
high) should load as well; the bundled medium voice is the one tested. Plain classes rather
than ``mlx.nn.Module``: the weights never train, and the code type-checks where MLX is absent.

Convolutions run as one matmul per kernel tap by default on the CPU: MLX's CPU ``conv1d`` and
``conv_transpose1d`` are several times slower there (see ``bench/mlx_chunked.py``). The
transposed convolutions always run polyphase (one stride-1 convolution whose outputs are
interleaved), which gives the same result without multiplying stuffed zeros.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mlx.core as mx
import numpy as np
import numpy.typing as npt

from .weights import ConvAttrs, VoiceWeights

LRELU_SLOPE = 0.1
FINAL_LRELU_SLOPE = 0.01
"""HiFi-GAN's last ``F.leaky_relu`` is called without a slope: PyTorch's default, 0.01."""
SPLINE_TAIL_BOUND = 5.0
_MIN_BIN = 1e-3


def default_use_matmul() -> bool:
    """One matmul per tap on the CPU (measured 4-5x faster there); MLX's conv kernels elsewhere."""
    return bool(mx.default_device() == mx.cpu)


def leaky_relu(x: mx.array, slope: float) -> mx.array:
    return mx.maximum(x, slope * x)


def gelu(x: mx.array) -> mx.array:
    """Exact (erf) GELU, as ``F.gelu`` in the duration predictor."""
    return 0.5 * x * (1.0 + mx.erf(x * (1.0 / math.sqrt(2.0))))


def pad_time(x: mx.array, left: int, right: int) -> mx.array:
    if left == 0 and right == 0:
        return x
    return mx.pad(x, [(left, right), (0, 0)])


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
        x = pad_time(x, self.pad_left, self.pad_right)
        if self._native:
            groups = int(self._weight.shape[0])
            y = mx.conv1d(
                x.reshape(1, *x.shape), self._weight, dilation=self.dilation, groups=groups
            )
            return y.reshape(y.shape[1:]) + self._bias
        length = x.shape[0] - self.span
        d = self.dilation
        y = self._bias + x[0:length] * self._taps[0]
        for k in range(1, self.kernel):
            y = y + x[k * d : k * d + length] * self._taps[k]
        return y


class Upsample:
    """``ConvTranspose1d(stride=s)`` as one stride-1 convolution with ``s`` interleaved phases.

    Output sample ``q*s + r`` is ``sum_j x[q - j] @ w[:, j*s + r + padding]``: phase ``r`` is
    an ordinary convolution over ``x`` with the taps whose index is ``r + padding`` modulo
    ``s``. Stacking the phases as output channels and interleaving them is exact, and costs a
    few taps per input sample instead of a kernel per output sample of a zero-stuffed signal.
    """

    def __init__(
        self, weight: mx.array, bias: mx.array, stride: int, padding: int, *, matmul: bool
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
            mx.tile(bias, (stride,)),
            matmul=matmul,
        )
        self.span = self._conv.span

    def valid(self, x: mx.array) -> mx.array:
        y = self._conv.valid(x)
        return y.reshape(*y.shape[:-2], y.shape[-2] * self.stride, self.out_channels)

    def __call__(self, x: mx.array) -> mx.array:
        return self.valid(pad_time(x, self.pad_left, self.pad_right))


def _conv(w: VoiceWeights, module: str, matmul: bool, *, same: bool = False) -> Conv:
    """The conv ``module`` as the graph called it (or 'same' padding where the graph padded)."""
    weight = w[f"{module}.weight"]
    bias = w.get(f"{module}.bias")
    attrs = w.conv(module)
    kernel = int(weight.shape[1])
    left, right = ((kernel - 1) // 2, kernel // 2) if same else (attrs.pad_left, attrs.pad_right)
    return Conv(
        weight, bias, dilation=attrs.dilation, pad_left=left, pad_right=right, matmul=matmul
    )


def _count(w: VoiceWeights, pattern: str) -> int:
    n = 0
    while pattern.format(n) in w:
        n += 1
    return n


def _layer_norm(w: VoiceWeights, prefix: str) -> tuple[mx.array, mx.array]:
    return w[f"{prefix}.gamma"], w[f"{prefix}.beta"]


def layer_norm(x: mx.array, params: tuple[mx.array, mx.array]) -> mx.array:
    return mx.fast.layer_norm(x, params[0], params[1], 1e-5)


@dataclass(frozen=True)
class _AttentionLayer:
    q: Conv
    k: Conv
    v: Conv
    o: Conv
    rel_k: mx.array  # (2 * window + 1, head_channels)
    rel_v: mx.array
    norm_1: tuple[mx.array, mx.array]
    ffn_1: Conv
    ffn_2: Conv
    norm_2: tuple[mx.array, mx.array]


class TextEncoder:
    """Phoneme ids -> hidden states and the prior's mean and log-scale per phoneme."""

    def __init__(self, w: VoiceWeights, matmul: bool) -> None:
        p = "enc_p.encoder"
        self.embedding = w["enc_p.emb.weight"]
        self.hidden = int(self.embedding.shape[1])
        self.layers = [
            _AttentionLayer(
                q=_conv(w, f"{p}.attn_layers.{i}.conv_q", matmul),
                k=_conv(w, f"{p}.attn_layers.{i}.conv_k", matmul),
                v=_conv(w, f"{p}.attn_layers.{i}.conv_v", matmul),
                o=_conv(w, f"{p}.attn_layers.{i}.conv_o", matmul),
                rel_k=w[f"{p}.attn_layers.{i}.emb_rel_k"][0],
                rel_v=w[f"{p}.attn_layers.{i}.emb_rel_v"][0],
                norm_1=_layer_norm(w, f"{p}.norm_layers_1.{i}"),
                ffn_1=_conv(w, f"{p}.ffn_layers.{i}.conv_1", matmul, same=True),
                ffn_2=_conv(w, f"{p}.ffn_layers.{i}.conv_2", matmul, same=True),
                norm_2=_layer_norm(w, f"{p}.norm_layers_2.{i}"),
            )
            for i in range(_count(w, p + ".attn_layers.{}.conv_q.weight"))
        ]
        rel = self.layers[0].rel_k
        self.window = (int(rel.shape[0]) - 1) // 2
        self.head_channels = int(rel.shape[1])
        self.heads = self.hidden // self.head_channels
        self.proj = _conv(w, "enc_p.proj", matmul)
        self.out_channels = self.proj.out_channels // 2

    def __call__(self, ids: mx.array) -> tuple[mx.array, mx.array, mx.array]:
        x = self.embedding[ids] * math.sqrt(self.hidden)
        offsets = mx.arange(ids.shape[0])[None, :] - mx.arange(ids.shape[0])[:, None]
        for layer in self.layers:
            x = layer_norm(x + self._attention(layer, x, offsets), layer.norm_1)
            y = layer.ffn_2(mx.maximum(layer.ffn_1(x), 0.0))
            x = layer_norm(x + y, layer.norm_2)
        stats = self.proj(x)
        return x, stats[:, : self.out_channels], stats[:, self.out_channels :]

    def _attention(self, layer: _AttentionLayer, x: mx.array, offsets: mx.array) -> mx.array:
        """Self-attention with relative position keys and values within +-window."""
        length, heads, dk, window = x.shape[0], self.heads, self.head_channels, self.window

        def split(t: mx.array) -> mx.array:
            return t.reshape(length, heads, dk).transpose(1, 0, 2)

        q = split(layer.q(x)) * (1.0 / math.sqrt(dk))
        k, v = split(layer.k(x)), split(layer.v(x))
        in_window = mx.abs(offsets) <= window
        rel_logits = q @ layer.rel_k.T  # (heads, T, 2w+1), by offset j - i
        rel_index = mx.broadcast_to(
            mx.clip(offsets + window, 0, 2 * window), (heads, *offsets.shape)
        )
        scores = q @ k.transpose(0, 2, 1)
        scores = scores + mx.where(in_window, mx.take_along_axis(rel_logits, rel_index, 2), 0.0)
        p = mx.softmax(scores, axis=-1)
        # The attention weight of each relative offset, for the relative value embeddings.
        cols = mx.arange(length)[:, None] + mx.arange(2 * window + 1)[None, :] - window
        in_range = (cols >= 0) & (cols < length)
        col_index = mx.broadcast_to(mx.clip(cols, 0, length - 1), (heads, *cols.shape))
        rel_weights = mx.where(in_range, mx.take_along_axis(p, col_index, 2), 0.0)
        out = p @ v + rel_weights @ layer.rel_v
        return layer.o(out.transpose(1, 0, 2).reshape(length, heads * dk))


class DDSConv:
    """Dilated depth-separable convolutions with layer norms and GELU, residual."""

    def __init__(self, w: VoiceWeights, prefix: str, matmul: bool) -> None:
        n = _count(w, prefix + ".convs_sep.{}.weight")
        self.sep = [
            DepthwiseConv(
                w[f"{prefix}.convs_sep.{i}.weight"],
                w[f"{prefix}.convs_sep.{i}.bias"],
                w.conv(f"{prefix}.convs_sep.{i}"),
                matmul,
            )
            for i in range(n)
        ]
        self.pointwise = [_conv(w, f"{prefix}.convs_1x1.{i}", matmul) for i in range(n)]
        self.norms_1 = [_layer_norm(w, f"{prefix}.norms_1.{i}") for i in range(n)]
        self.norms_2 = [_layer_norm(w, f"{prefix}.norms_2.{i}") for i in range(n)]

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
        self.pre = _conv(w, f"{prefix}.pre", matmul)
        self.convs = DDSConv(w, f"{prefix}.convs", matmul)
        self.proj = _conv(w, f"{prefix}.proj", matmul)
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
        self.pre = _conv(w, "dp.pre", matmul)
        self.convs = DDSConv(w, "dp.convs", matmul)
        self.proj = _conv(w, "dp.proj", matmul)
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


@dataclass(frozen=True)
class Coupling:
    """A mean-only residual coupling layer with its WaveNet-style stack (flow, reverse)."""

    pre: Conv
    in_layers: list[Conv]
    res_skip: list[Conv]
    post: Conv
    half: int
    hidden: int

    def wavenet(self, h: mx.array) -> mx.array:
        out: mx.array | None = None
        last = len(self.in_layers) - 1
        for i, (conv_in, conv_rs) in enumerate(zip(self.in_layers, self.res_skip, strict=True)):
            rs = conv_rs(gated(conv_in(h), self.hidden))
            skip = rs if i == last else rs[:, self.hidden :]
            if i != last:
                h = h + rs[:, : self.hidden]
            out = skip if out is None else out + skip
        assert out is not None
        return out

    def reverse(self, z: mx.array) -> mx.array:
        x0 = z[:, : self.half]
        m = self.post(self.wavenet(self.pre(x0)))
        return mx.concatenate([x0, z[:, self.half :] - m], axis=1)


def gated(x: mx.array, hidden: int) -> mx.array:
    return mx.tanh(x[..., :hidden]) * mx.sigmoid(x[..., hidden:])


class Flow:
    """The residual coupling block in reverse: prior sample -> decoder latent."""

    def __init__(self, w: VoiceWeights, matmul: bool) -> None:
        indices = sorted(
            (
                int(k.split(".")[2])
                for k in w.arrays
                if k.startswith("flow.flows.") and k.endswith(".pre.weight")
            ),
            reverse=True,
        )
        self.couplings = []
        for i in indices:
            p = f"flow.flows.{i}"
            n = _count(w, p + ".enc.in_layers.{}.weight")
            pre = _conv(w, f"{p}.pre", matmul)
            self.couplings.append(
                Coupling(
                    pre=pre,
                    in_layers=[_conv(w, f"{p}.enc.in_layers.{j}", matmul) for j in range(n)],
                    res_skip=[_conv(w, f"{p}.enc.res_skip_layers.{j}", matmul) for j in range(n)],
                    post=_conv(w, f"{p}.post", matmul),
                    half=int(w[f"{p}.pre.weight"].shape[2]),
                    hidden=pre.out_channels,
                )
            )
        self.reach = sum(c.pad_left for cp in self.couplings for c in cp.in_layers)
        """Latent frames of context each side that one output frame depends on."""

    def reverse(self, z: mx.array) -> mx.array:
        for coupling in self.couplings:
            z = coupling.reverse(z[:, ::-1])
        return z


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
        self.conv_pre = _conv(w, "dec.conv_pre", matmul)
        self.ups = []
        for i in range(_count(w, "dec.ups.{}.weight")):
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
        for b in range(_count(w, "dec.resblocks.{}.convs1.0.weight")):
            p = f"dec.resblocks.{b}"
            pairs = _count(w, p + ".convs1.{}.weight")
            blocks.append(
                ResBlock(
                    [
                        [_conv(w, f"{p}.convs1.{j}", matmul), _conv(w, f"{p}.convs2.{j}", matmul)]
                        for j in range(pairs)
                    ]
                )
            )
        for b in range(_count(w, "dec.resblocks.{}.convs.0.weight")):
            p = f"dec.resblocks.{b}"
            blocks.append(
                ResBlock(
                    [
                        [_conv(w, f"{p}.convs.{j}", matmul)]
                        for j in range(_count(w, p + ".convs.{}.weight"))
                    ]
                )
            )
        per_up = len(blocks) // len(self.ups)
        self.resblocks = [blocks[i * per_up : (i + 1) * per_up] for i in range(len(self.ups))]
        self.conv_post = _conv(w, "dec.conv_post", matmul)
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
